"""Test helpers are imported by names only one module has. pytest imports every folder's `conftest.py` as the
module `conftest`, so `from conftest import x` gets whichever folder's was collected last (`pytest tests/serve
tests/hostile` once failed to collect the serve tests that way); a helper module named like one in another
folder is shadowed the same way, since each test folder goes on `sys.path` under its plain name."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).parent


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
    return names


def test_no_test_imports_from_a_conftest() -> None:
    offenders = sorted(str(p.relative_to(TESTS)) for p in TESTS.rglob("*.py") if "conftest" in _imported_modules(p))
    assert offenders == [], f"import these helpers from a module with its own name instead: {offenders}"


def test_every_helper_module_name_is_used_once_under_tests() -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for p in TESTS.rglob("*.py"):
        if p.name != "conftest.py" and "__pycache__" not in p.parts:
            by_name[p.stem].append(str(p.relative_to(TESTS)))
    assert {name: paths for name, paths in by_name.items() if len(paths) > 1} == {}
