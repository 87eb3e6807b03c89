"""Play pressed at once after opening another project plays that project: in the pass the project was opened in,
before the window lays out its timeline a slice a pass, the timeline still held the last project's audio, and Play
played it. Through the real window on the fake engine, with its sound going to the test's file-backed output."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt
from ui_helpers import cast_two_voices, close_studio, fake_engine, listen, open_studio, project_shown


def _render(qtbot, w) -> None:
    qtbot.waitUntil(w.actions_by_name["render_all"].isEnabled, timeout=10000)
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: not w.flow.busy and all(w.document.project.current(i) for i in w.document.script.line_ids),
                    timeout=30000)


def test_play_in_the_pass_a_project_opens_in_plays_the_new_projects_audio(qtbot, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, lambda: fake_engine(4, 0.0))
    w.check_commands.checks.enabled = False
    try:
        cast_two_voices(w, tmp_path, "Alice: The project to open again speaks first.\nBob: Then it ends.\n")
        _render(qtbot, w)
        opened = tmp_path / "opened.s2proj"
        assert w.projects.save_as(opened)
        ids = tuple(w.document.script.line_ids)
        w.editor.setPlainText("Bob: Another project.\nAlice: With three lines.\nBob: So it lasts longer.\n")
        w.reparse()
        _render(qtbot, w)
        assert w.projects.save_as(tmp_path / "other.s2proj")
        qtbot.waitUntil(lambda: not w.store.unsaved_work and not w.showing.busy, timeout=10000)
        other = w.timeline.mix()
        heard = listen(w)
        assert w.projects.open(opened)
        qtbot.mouseClick(w.player_bar.play_button, Qt.MouseButton.LeftButton)  # the same pass: nothing laid out yet
        assert w.player.playing
        assert tuple(t.line_id for t in w.timeline.layout.tracks) == ids  # what the player reads is the new project
        qtbot.waitUntil(lambda: not w.player.playing, timeout=20000)  # played to the end
        project_shown(qtbot, w)
        played, mix = np.concatenate(heard), w.timeline.mix()
        assert len(played) == len(mix) < len(other)  # two lines, not the other project's three
        np.testing.assert_allclose(played, mix, rtol=0, atol=1e-4)
    finally:
        close_studio(w)
