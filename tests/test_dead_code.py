"""No dead code in the package: vulture (the dev extra; its settings, and the names only a framework calls, are
`[tool.vulture]` in pyproject.toml) finds no function, class, attribute or variable of `s2studio/` that nothing
reads — written-only attributes included. Code used only by tests or benchmarks counts as used."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_vulture_finds_nothing_unused_in_the_package() -> None:
    pytest.importorskip("vulture", reason="the dev extra is not installed: pip install -e '.[dev]'")
    done = subprocess.run([sys.executable, "-m", "vulture"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    found = [line for line in done.stdout.splitlines() if line.startswith("s2studio")]
    assert not found, "\n".join(found)
