"""Opening a book: what shows a whole project at once (the cast's rows, ...) is built over several passes of the
event loop, so that the window keeps answering, ends as if built at once, and loses nothing done meanwhile.
Counted, not timed."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication

from s2studio.ui.script import cast_panel as cast_module
from s2studio.ui.script.cast_panel import CastPanel

SPEAKERS = [f"Speaker{i:02d}" for i in range(20)]
VOICES = [(f"v{i}", f"Voice {i}") for i in range(5)]


def chosen(panel: CastPanel) -> dict[str, str]:
    return {s: combo.currentData() for s, combo in panel.combos.items()}


def test_a_large_cast_is_built_a_few_rows_a_pass_and_a_pick_meanwhile_is_kept(qtbot):
    panel = CastPanel()
    qtbot.addWidget(panel)
    panel.show()
    panel.set_voices(VOICES)
    picked: list[tuple[str, str]] = []
    panel.cast_changed.connect(lambda speaker, vid: picked.append((speaker, vid)))
    cast = {s: VOICES[i % len(VOICES)][0] for i, s in enumerate(SPEAKERS)}
    panel.set_speakers(SPEAKERS, cast, {s: i for i, s in enumerate(SPEAKERS)})
    assert list(panel.combos) == SPEAKERS[:cast_module.CHIPS_PER_PASS]  # the rest after the window answered
    assert panel.building()
    panel.combos[SPEAKERS[0]].setCurrentIndex(panel.combos[SPEAKERS[0]].findData("v4"))  # a pick meanwhile
    passes = 1
    while panel.building():
        QApplication.processEvents()
        passes += 1
        assert len(panel.combos) <= passes * cast_module.CHIPS_PER_PASS
    assert passes == -(-len(SPEAKERS) // cast_module.CHIPS_PER_PASS)
    assert picked == [(SPEAKERS[0], "v4")]
    assert chosen(panel) == {**cast, SPEAKERS[0]: "v4"}
    assert [panel.combos[s].objectName() for s in SPEAKERS] == [f"cast:{s}" for s in SPEAKERS]
    everyone = CastPanel()  # the same cast built in one pass: the same rows
    qtbot.addWidget(everyone)
    cast_module_passes = cast_module.CHIPS_PER_PASS
    try:
        cast_module.CHIPS_PER_PASS = len(SPEAKERS)
        everyone.set_voices(VOICES)
        everyone.set_speakers(SPEAKERS, {**cast, SPEAKERS[0]: "v4"}, {s: i for i, s in enumerate(SPEAKERS)})
    finally:
        cast_module.CHIPS_PER_PASS = cast_module_passes
    assert not everyone.building()
    assert chosen(everyone) == chosen(panel)
    assert everyone.summary.text() == panel.summary.text()


def test_a_new_cast_while_the_last_is_built_builds_only_the_new_one(qtbot):
    panel = CastPanel()
    qtbot.addWidget(panel)
    panel.set_voices(VOICES)
    panel.set_speakers(SPEAKERS, {}, {s: i for i, s in enumerate(SPEAKERS)})
    panel.set_speakers(["Alice", "Bob"], {"Bob": "v1"}, {"Alice": 0, "Bob": 1})
    qtbot.waitUntil(lambda: not panel.building())
    QApplication.processEvents()
    assert chosen(panel) == {"Alice": "", "Bob": "v1"}
