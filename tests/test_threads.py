"""OpenMP's wait policy and the default thread count (s2studio/threads.py), set before torch in every entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from s2studio.threads import free_cores, usable_cores

SPY = """
import importlib.abc, json, os, sys
def report(when):
    keys = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")
    print(json.dumps({"when": when, **{k: os.environ.get(k) for k in keys}}), flush=True)
class Spy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch":  # the moment OpenMP would read its settings
            report("torch")
            os._exit(0)
        return None
assert "torch" not in sys.modules
sys.meta_path.insert(0, Spy())
from s2studio.cli import main
code = main(sys.argv[1:])
report(f"exit {code}")
"""
"""Runs `cli.main(argv)` and prints the OpenMP variables at the first `import torch` (then stops the process: the
settings are what torch would have read), or at the end when nothing imported torch."""


def _spy(argv: list[str], tmp_path: Path, **env: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    base.update(PYTHONPATH=os.pathsep.join(sys.path), S2STUDIO_DATA_DIR=str(tmp_path / "data"),
                XDG_CONFIG_HOME=str(tmp_path / "config"), **env)
    proc = subprocess.run([sys.executable, "-c", SPY, *argv], env=base, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, proc.stdout + proc.stderr
    return json.loads(lines[-1])


def test_free_cores_are_the_usable_ones_less_the_load_and_at_least_one() -> None:
    assert free_cores(2, 0.3) == 2
    assert free_cores(2, 0.6) == 1
    assert free_cores(2, 7.0) == 1
    assert free_cores(16, 3.4) == 13
    assert free_cores(4, 0.0) == 4
    assert 1 <= free_cores() <= usable_cores()


@pytest.mark.parametrize("command", [
    ["synth", "--model", "{m}", "--text", "hi", "--out", "{m}/out.wav"],
    ["codec", "decode", "--model", "{m}", "{m}/codes.npy", "--out", "{m}/out.wav"],
    ["serve", "--model", "{m}"],
    ["demo-model", "{m}/demo"],
], ids=["synth", "codec", "serve", "demo-model"])
def test_every_command_sets_the_wait_policy_and_threads_before_torch_is_imported(command: list[str],
                                                                                   tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    seen = _spy([a.format(m=model) for a in command], tmp_path)
    assert seen["when"] == "torch"  # the command imported torch, and by then:
    assert seen["OMP_WAIT_POLICY"] == "PASSIVE"
    assert 1 <= int(seen["OMP_NUM_THREADS"]) <= usable_cores()


def test_the_studio_sets_them_at_start(tmp_path: Path) -> None:
    seen = _spy([], tmp_path, S2STUDIO_ENGINE="fake", QT_QPA_PLATFORM="offscreen", S2STUDIO_QUIT_AFTER_MS="300")
    assert seen["when"] in ("torch", "exit 0")
    assert seen["OMP_WAIT_POLICY"] == "PASSIVE" and 1 <= int(seen["OMP_NUM_THREADS"]) <= usable_cores()


def test_a_persons_own_settings_are_kept(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    seen = _spy(["synth", "--model", str(model), "--text", "hi"], tmp_path, OMP_WAIT_POLICY="active",
                OMP_NUM_THREADS="3")
    assert (seen["when"], seen["OMP_WAIT_POLICY"], seen["OMP_NUM_THREADS"]) == ("torch", "active", "3")


def test_torch_takes_the_thread_count_and_threads_overrides_it(tmp_path: Path) -> None:
    """torch starts with the chosen count; `set_threads` (what --threads and the Threads setting call) wins."""
    code = ("import os; from s2studio.threads import prepare_threads; prepare_threads(); import torch; "
            "n = torch.get_num_threads(); from s2studio.engine.s2.device import set_threads; set_threads(3); "
            "print(os.environ['OMP_NUM_THREADS'], n, torch.get_num_threads())")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": os.pathsep.join(sys.path)},
                         capture_output=True, text=True, timeout=120, check=True).stdout.split()
    assert out[0] == out[1] and out[2] == "3"
