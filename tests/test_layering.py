"""The layering rules of design.md §1, checked on the source and on what an import really loads."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "s2studio"

NO_QT = ("state", "audio", "text", "model", "codec", "engine")
NO_TORCH = ("state", "audio", "ui", "worker")
NO_ENGINE_INTERNALS_IN_UI = ("s2studio.model", "s2studio.codec", "s2studio.engine.s2")


def _imports(path: pathlib.Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _files(layer: str) -> list[pathlib.Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", NO_QT)
def test_lower_layers_never_import_qt(layer: str) -> None:
    offenders = [f"{p.relative_to(PACKAGE)}: {m}" for p in _files(layer) for m in _imports(p)
                 if m.split(".")[0] in ("PySide6", "shiboken6")]
    assert offenders == []


@pytest.mark.parametrize("layer", NO_TORCH)
def test_gui_side_layers_never_import_torch(layer: str) -> None:
    offenders = [f"{p.relative_to(PACKAGE)}: {m}" for p in _files(layer) for m in _imports(p)
                 if m.split(".")[0] in ("torch", "torchaudio")]
    assert offenders == []


def test_ui_never_imports_engine_internals() -> None:
    offenders = [f"{p.relative_to(PACKAGE)}: {m}" for p in _files("ui") for m in _imports(p)
                 if m.startswith(NO_ENGINE_INTERNALS_IN_UI)]
    assert offenders == []


def _loaded_after(module: str) -> set[str]:
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize("module", ["s2studio.engine.api", "s2studio.cli", "s2studio.state", "s2studio.audio"])
def test_light_modules_do_not_pull_in_torch(module: str) -> None:
    assert "torch" not in _loaded_after(module)


def test_main_window_does_not_pull_in_torch() -> None:
    loaded = _loaded_after("s2studio.ui.main_window")
    assert "PySide6.QtWidgets" in loaded
    assert "torch" not in loaded


# -- ui/ (design.md §1, §8): controllers without widgets, and only the engine's torch-free seam -------------

UI_ENGINE_SEAM = ("s2studio.engine.api", "s2studio.engine.plan")
"""The torch-free seam (issue 11). Settings ▸ Render on reaches servers through the worker layer
(`worker/servers.py`: the server as plain data, and "Test connection")."""


def _modules_named(path: pathlib.Path) -> set[str]:
    """Every module a file imports, `from package import module` counted as `package.module`."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_ui_controllers_are_qtcore_only() -> None:
    offenders = [f"{p.relative_to(PACKAGE)}: {m}" for p in _files("ui/control") for m in _modules_named(p)
                 if m.startswith(("PySide6.QtWidgets", "PySide6.QtGui"))]
    assert offenders == []


def test_ui_imports_only_the_engine_seam() -> None:
    def outside_the_seam(m: str) -> bool:
        if m.startswith(UI_ENGINE_SEAM) or m == "s2studio.engine":
            return False
        return m.startswith(("s2studio.engine.", "s2studio.demo_model", "s2studio.model", "s2studio.codec"))

    offenders = [f"{p.relative_to(PACKAGE)}: {m}" for p in _files("ui") for m in _modules_named(p)
                 if outside_the_seam(m)]
    assert offenders == []
