"""Start-up as a new user met it: the window painted, then torch imported on the engine thread, and the window's
event loop kept ticking while it was (it once stopped answering for two seconds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).with_name("startup_probe.py")


def test_torch_is_imported_on_the_engine_thread_after_the_window_painted_and_the_window_answers():
    pytest.importorskip("torch")
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run([sys.executable, str(PROBE)], capture_output=True, text=True, timeout=300, env=env)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("{")), None)
    assert line is not None, done.stdout + done.stderr
    seen = json.loads(line)
    assert seen["torch_thread"] == "engine"  # never the window's thread
    assert seen["torch_at_paint"] is False and seen["painted"] < seen["torch_began"]
    # the import takes seconds; the window's 20 ms timer kept firing through it (a frozen loop does not tick)
    duration = seen["torch_ended"] - seen["torch_began"]
    assert seen["ticks_during_import"] >= max(5, duration / 0.5), seen
