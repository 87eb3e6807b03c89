"""A book pasted into the window: it arrives whole, one undo takes it back, and the views show it in steps over
several passes of the event loop (the cast a few rows a pass, the line states a slice a pass), not all in the
pass that applies the parse. Counted, not timed."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QApplication

from ui_helpers import close_studio, fake_engine, open_studio, write_wav

SPEAKERS = [f"Speaker{i}" for i in range(14)]


@pytest.fixture
def studio(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, lambda: fake_engine(6, 0.0005))
    yield w
    close_studio(w)


def book(lines: int) -> str:
    rows = [f"{SPEAKERS[i % len(SPEAKERS)]}: Line {i} of the book." for i in range(lines)]
    return "\n".join(rows) + "\n"


def test_a_pasted_book_arrives_whole_undoes_in_one_step_and_is_shown_over_several_passes(qtbot, studio, tmp_path,
                                                                                           monkeypatch):
    from s2studio.ui.control.document import OFF_THREAD_ROWS
    from s2studio.ui.script import cast_panel
    from s2studio.ui.window import line_states

    w = studio
    for name in SPEAKERS[:3]:  # cast by name as the parse is applied
        w.library.create(name, [(write_wav(tmp_path / f"{name}.wav", seconds=1.0), "hello there")])
    w.voices.refresh()
    w.voice_commands.reread()
    batches: list[int] = []
    build_some = cast_panel.CastPanel._build_some

    def counted(panel):  # noqa: ANN001, ANN202
        before = len(panel.combos)
        build_some(panel)
        batches.append(len(panel.combos) - before)

    monkeypatch.setattr(cast_panel.CastPanel, "_build_some", counted)
    text = book(OFF_THREAD_ROWS + 100)
    assert OFF_THREAD_ROWS + 100 > line_states.RECOUNT_ABOVE
    seen: list[tuple[int, int]] = []  # in the pass that applied the parse: combos made, lines recounted
    updates = w.lines.updates
    w.document.script_changed.connect(lambda _o: seen.append((len(w.cast_panel.combos), w.lines.updates - updates)))
    QApplication.clipboard().setText(text)
    w.editor.setFocus()
    w.actions_by_name["paste"].trigger()
    qtbot.waitUntil(lambda: len(w.document.script.lines) == OFF_THREAD_ROWS + 100, timeout=20000)
    assert w.document.project.script == text and w.editor.toPlainText() == text  # whole and in order
    combos_then, counted_then = seen[-1]
    assert combos_then <= cast_panel.CHIPS_PER_PASS and counted_then == 0  # in that pass: a few rows, no line
    qtbot.waitUntil(lambda: not w.cast_panel.building() and not w.lines._recount.busy, timeout=10000)
    assert w.lines.updates - updates >= OFF_THREAD_ROWS + 100  # every line counted, a slice a pass
    assert list(w.cast_panel.combos) == SPEAKERS
    assert len(batches) >= 3 and max(batches) <= cast_panel.CHIPS_PER_PASS
    voices = {v.name: v.id for v in w.library.list()}
    for speaker, combo in w.cast_panel.combos.items():
        assert combo.currentData() == voices.get(speaker, "") == w.document.project.cast.get(speaker, "")
    w.actions_by_name["undo"].trigger()  # the whole paste, in one step
    assert w.editor.toPlainText() == ""
