"""The layering rules of design.md §1, checked on the source and on what an import really loads.

Every import counts, wherever it is written (module top, inside a function, under TYPE_CHECKING): a circle hidden
in function-local imports is still a circle, and an arrow up the layers is still one when it runs late.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "s2studio"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("s2studio", "s2studio.errors", "s2studio.paths", "s2studio.units", "s2studio.settings"),  # facts every layer reads
    ("s2studio.state",),
    ("s2studio.audio",),
    ("s2studio.text",),
    ("s2studio.codec",),
    ("s2studio.model",),
    ("s2studio.checks",),  # checks of finished takes: speech recognition, signal, voice (torch in its process)
    ("s2studio.engine",),  # the torch-free seam: api, plan, fake
    ("s2studio.engine.weights",),
    ("s2studio.demo_model",),
    ("s2studio.engine.s2",),  # the runtime
    ("s2studio.train",),  # LoRA fine-tuning on the runtime's loader and codec
    ("s2studio.worker",),
    ("s2studio.serve",),  # HTTP in front of the engine and the voice library
    ("s2studio.commands",),
    ("s2studio.ui",),
    ("s2studio.app",),
    ("s2studio.cli", "s2studio.__main__"),
)
"""Bottom to top, in design.md §1's order (state, audio, text, codec, model, engine, worker, ui, app): a module
may import modules of its own layer or of the layers below it, never above. A name stands for the module and its
submodules."""

NO_QT = ("state", "audio", "text", "model", "codec", "engine")
NO_TORCH = ("state", "audio", "ui", "worker")
NO_ENGINE_INTERNALS_IN_UI = ("s2studio.model", "s2studio.codec", "s2studio.engine.s2")


def module_name(path: pathlib.Path) -> str:
    parts = ("s2studio", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(path: pathlib.Path) -> Iterator[str]:
    """The s2studio modules `path` imports, anywhere in it (`from pkg import mod` counts as pkg.mod)."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[:len(package.split(".")) - node.level + 1], *filter(None, [base])])
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:  # `import s2studio.x.y` of an attribute: its module
                name = name.rpartition(".")[0]
            if name.startswith("s2studio") and name != me:
                yield name


GRAPH = {name: set(imported_modules(path)) for name, path in MODULES.items()}


def layer_of(module: str) -> int:
    best, best_len = -1, -1
    for index, names in enumerate(LAYERS):
        for name in names:
            if module == name or module.startswith(name + ".") and len(name) > best_len:
                best, best_len = index, len(name)
    return best


def test_every_module_has_a_layer() -> None:
    assert [m for m in MODULES if layer_of(m) < 0] == []


def upward(graph: dict[str, set[str]]) -> list[str]:
    return [f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})"
            for m, targets in sorted(graph.items()) for t in sorted(targets) if layer_of(t) > layer_of(m)]


def test_each_module_imports_only_its_layer_and_below() -> None:
    assert upward(GRAPH) == []


def test_the_layer_rule_catches_the_arrows_it_exists_for() -> None:
    """audio -> engine.api (SAMPLE_RATE, once), state -> audio, weights -> runtime (the old circle)."""
    for module, target in (("s2studio.audio.timeline", "s2studio.engine.api"),
                           ("s2studio.state.project", "s2studio.audio.export"),
                           ("s2studio.state.codes", "s2studio.audio"),
                           ("s2studio.engine.weights.bf16", "s2studio.engine.s2.setup"),
                           ("s2studio.engine.api", "s2studio.engine.s2.device")):
        graph = {**GRAPH, module: GRAPH[module] | {target}}
        assert len(upward(graph)) == 1, (module, target)


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of `graph` (as a list of modules, first == last), or [] when there is none."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state and (found := visit(target)):
                return found
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_the_import_graph_has_no_cycle() -> None:
    assert _cycle(GRAPH) == []
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]  # the search finds one


def test_the_units_import_nothing_and_are_defined_once() -> None:
    assert GRAPH["s2studio.units"] == set()
    for name in ("SAMPLE_RATE", "FRAME_SAMPLES", "FRAMES_PER_SECOND", "NUM_CODEBOOKS", "LINE_GAP_S"):
        defined = [m for m, path in MODULES.items() for node in ast.walk(ast.parse(path.read_text("utf-8")))
                   if isinstance(node, (ast.Assign, ast.AnnAssign))
                   and any(isinstance(t, ast.Name) and t.id == name
                           for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))]
        assert defined == ["s2studio.units"], (name, defined)


def test_the_weights_never_import_the_runtime_and_the_seam_never_imports_torch_code() -> None:
    weights = [m for m in GRAPH if m.startswith("s2studio.engine.weights")]
    assert weights and not [t for m in weights for t in GRAPH[m] if t.startswith("s2studio.engine.s2")]
    seam = [m for m in GRAPH if layer_of(m) == layer_of("s2studio.engine")]
    assert {"s2studio.engine.api", "s2studio.engine.plan", "s2studio.engine.fake"} <= set(seam)
    assert not [t for m in seam for t in GRAPH[m] if t.startswith(("s2studio.engine.", "s2studio.model",
                                                                      "s2studio.codec")) and t not in seam]


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


@pytest.mark.parametrize("module", ["s2studio.engine.api", "s2studio.engine.plan", "s2studio.engine.fake",
                                    "s2studio.engine.switch", "s2studio.cli", "s2studio.state", "s2studio.audio"])
def test_light_modules_do_not_pull_in_torch(module: str) -> None:
    assert "torch" not in _loaded_after(module)


def test_main_window_does_not_pull_in_torch() -> None:
    loaded = _loaded_after("s2studio.ui.window.main_window")
    assert "PySide6.QtWidgets" in loaded
    assert "torch" not in loaded


# -- ui/ (design.md §1, §8): controllers without widgets, and only the engine's torch-free seam -------------

UI_ENGINE_SEAM = ("s2studio.engine.api", "s2studio.engine.plan", "s2studio.engine.render")
"""The torch-free seam (issue 11; the render job every caller submits, issue 28). Settings ▸ Render on reaches servers through the worker layer
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


def test_the_main_window_only_composes_and_wires() -> None:
    """Its parts do the work and tests reach them by name: the window stays small and forwards nothing."""
    text = (PACKAGE / "ui/window/main_window.py").read_text()
    assert len(text.splitlines()) < 300
    assert "@property" not in text and "def _slots" not in text


def _self_attributes(tree: ast.AST) -> set[str]:
    """The names a class's methods assign on `self` (`self.a = …`, `self.a, self.b = …`)."""
    targets = [t for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets]
    names = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
    return {e.attr for e in names if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name)
            and e.value.id == "self"}


def test_the_window_has_every_part_its_action_slots_name() -> None:
    """`action_slots` types the window as `WindowParts` (naming `MainWindow` there would be an import circle): every
    part it reads is declared there, and the window builds every declared part."""
    slots = ast.parse((PACKAGE / "ui/window/action_slots.py").read_text())
    protocol = next(n for n in ast.walk(slots) if isinstance(n, ast.ClassDef) and n.name == "WindowParts")
    declared = {n.target.id for n in protocol.body if isinstance(n, ast.AnnAssign)}
    declared |= {n.name for n in protocol.body if isinstance(n, ast.FunctionDef)}
    read = {n.attr for n in ast.walk(slots) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == "w"}
    assert read <= declared, read - declared
    built = _self_attributes(ast.parse((PACKAGE / "ui/window/main_window.py").read_text()))
    assert declared - {"window", "close"} <= built, declared - built  # window() and close() are QWidget's


WIDGET_FOLDERS = ("s2studio.ui.voices", "s2studio.ui.inspector", "s2studio.ui.script", "s2studio.ui.player",
                  "s2studio.ui.dialogs")


def test_the_voices_region_meets_the_other_views_only_in_the_window() -> None:
    """ui/voices reads controllers and shared helpers, never another widget folder, and only the window
    composes it: what it shares with the rest goes through `ui/control` (the transcription choice, playback)."""
    out = [f"{p.relative_to(PACKAGE)}: {m}" for p in _files("ui/voices") for m in _modules_named(p)
           if m.startswith(WIDGET_FOLDERS) and not m.startswith("s2studio.ui.voices")]
    into = [f"{p.relative_to(PACKAGE)}: {m}" for p in PACKAGE.rglob("*.py") for m in _modules_named(p)
            if m.startswith("s2studio.ui.voices") and not p.is_relative_to(PACKAGE / "ui/voices")
            and not p.is_relative_to(PACKAGE / "ui/window")]
    assert out == [] and into == []


def test_the_voices_region_is_small_modules() -> None:
    """The voices region's views: thin modules, each with one job (the dialogs' parts in their own folders)."""
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines())
             for p in (PACKAGE / "ui/voices").rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n >= 400} == {}


def test_ui_imports_only_the_engine_seam() -> None:
    def outside_the_seam(m: str) -> bool:
        if m.startswith(UI_ENGINE_SEAM) or m == "s2studio.engine":
            return False
        return m.startswith(("s2studio.engine.", "s2studio.demo_model", "s2studio.model", "s2studio.codec"))

    offenders = [f"{p.relative_to(PACKAGE)}: {m}" for p in _files("ui") for m in _modules_named(p)
                 if outside_the_seam(m)]
    assert offenders == []
