"""scripts/setup says what it installs and lets pip show its progress (it once printed nothing for 3½ minutes
while pip installed 6 GB), and a second run with nothing to do prints nothing. Run on a copy of the script with a
stand-in pip that reports its arguments, so nothing is installed."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_setup_names_what_it_installs_and_shows_pips_progress(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "tests").mkdir()
    shutil.copy(ROOT / "scripts" / "setup", tmp_path / "scripts" / "setup")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copy(ROOT / "tests" / "asr-model.txt", tmp_path / "tests" / "asr-model.txt")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "pip").write_text('#!/bin/sh\necho "pip $*"\necho "Collecting torch"\necho "Downloading torch.whl"\n')
    for exe in ("python", "pip"):
        (bin_dir / exe).chmod(0o755)
    (tmp_path / "scripts" / "setup").chmod((tmp_path / "scripts" / "setup").stat().st_mode | stat.S_IXUSR)
    first = subprocess.run(["bash", "scripts/setup"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    out = first.stdout
    assert "scripts/setup: installing S2 Studio's Python packages into .venv: PyTorch, PySide6" in out
    assert "about 6 GB" in out
    install = next(line for line in out.splitlines() if line.startswith("pip install") and "-e .[dev]" in line)
    assert " -q" not in install  # pip's own lines and progress are shown
    assert "Collecting torch" in out and "Downloading torch.whl" in out
    assert out.rstrip().endswith("scripts/setup: done")
    again = subprocess.run(["bash", "scripts/setup"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and again.stdout == ""  # nothing to do: nothing said
