"""The CPU kernels come built with the package: the fast path runs them on a machine with no compiler, the command
line says which kernels it runs, and the status bar says why when torch's slower ones run instead."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf
import torch

from s2studio.engine.weights import kernels

ROOT = Path(__file__).resolve().parents[1]
COMPILERS = ("c++", "g++", "gcc", "cc", "clang", "clang++", "cl", "ninja")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from s2studio.demo_model import write_demo_model

    return write_demo_model(tmp_path_factory.mktemp("demo") / "model", seed=0, size="tiny")


def test_synth_fast_runs_the_cpp_kernels_with_no_compiler_on_path(model_dir: Path, tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {**os.environ, "PATH": str(empty)}
    assert not [c for c in COMPILERS if shutil.which(c, path=env["PATH"])]
    out = tmp_path / "line.wav"
    done = subprocess.run([sys.executable, "-m", "s2studio", "synth", "--model", str(model_dir), "--fast",
                           "--text", "<|speaker:0|>No compiler here.", "--device", "cpu", "--threads", "1",
                           "--seed", "3", "--max-new-tokens", "8", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    width = kernels.widths_for(torch.backends.cpu.get_cpu_capability())[0]
    assert f"(float32, bf16 weights; C++ kernels ({width}))" in done.stderr, done.stderr
    assert "note: the CPU kernels are not used" not in done.stderr
    audio, rate = sf.read(str(out))
    assert rate == 44100 and len(audio) > 0


def test_without_its_kernels_synth_says_which_path_runs_and_why(model_dir: Path, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "s2studio", "synth", "--model", str(model_dir), "--fast",
                           "--text", "<|speaker:0|>Slower.", "--device", "cpu", "--threads", "1",
                           "--max-new-tokens", "4", "--codes-out", str(tmp_path / "codes.npy")],
                          cwd=ROOT, env={**os.environ, "S2STUDIO_CPU_KERNELS": "0"}, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "(float32; torch's kernels (slower))" in done.stderr
    assert "note: the CPU kernels are not used (off (S2STUDIO_CPU_KERNELS=0))" in done.stderr


def test_the_status_bar_says_which_kernels_run_and_why_the_slower_ones(qtbot) -> None:
    from PySide6.QtWidgets import QStatusBar

    from s2studio.engine.api import ModelInfo
    from s2studio.ui.status import StatusPanel

    bar = QStatusBar()
    qtbot.addWidget(bar)
    panel = StatusPanel(bar)
    fast = ModelInfo("demo", "cpu", "float32, bf16 weights", 44100, "", 1024, kernels="C++ kernels (AVX2)")
    panel.model_ready(fast, demo=False)
    assert panel.device.text() == "cpu · float32, bf16 weights · C++ kernels (AVX2)"
    assert panel.device.toolTip() == "" and bar.currentMessage() == ""
    why = "_cpu_avx2 does not load: undefined symbol"
    slow = ModelInfo("demo", "cpu", "float32", 44100, "", 1024, kernels="torch's kernels (slower)", kernels_note=why)
    panel.model_ready(slow, demo=False)
    assert panel.device.text() == "cpu · float32 · torch's kernels (slower)"
    assert why in panel.device.toolTip()
    assert bar.currentMessage() == f"Rendering with torch's kernels (slower): {why}"
    panel.model_loading(0.0, "reading the tokenizer")  # the next load: old news goes
    assert bar.currentMessage() == ""
