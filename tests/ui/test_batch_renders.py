"""The studio renders side by side (the engine's batch): Render All runs the scenes (a `#` heading starts one) at
once, each scene's lines in order, the first line of a scene hearing no earlier line; Render Takes… asks how many
takes and renders them of the selected lines at once, each joining its line's takes; the status bar says how many
lines run at once. Through the real window on the fake engine, and once on the real engine's fast path."""

from __future__ import annotations

from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QInputDialog

from s2studio.engine.fake import FakeEngine
from ui_helpers import cast_two_voices, close_studio, on_modal, open_studio

SCENES = "# One\nAlice: First of one.\nBob: Second of one.\n# Two\nAlice: First of two.\nBob: Second of two."


def put_cursor_on(w, row: int) -> None:
    w.editor.setTextCursor(QTextCursor(w.editor.document().findBlockByNumber(row)))


def test_scenes_render_side_by_side_and_takes_join_their_line(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, lambda: FakeEngine(frame_latency_s=0.005, max_batch=4))
    try:
        assert w.status.device.text().endswith(" · 4 lines at once")
        cast_two_voices(w, tmp_path, SCENES)
        one, two = w.document.script.lines[:2], w.document.script.lines[2:]
        seen: list[tuple[str, str]] = []
        w.ctx.host.line_started.connect(lambda e: seen.append(("start", e.line_id)))
        w.ctx.host.line_finished.connect(lambda e: seen.append(("end", e.line_id)))
        requests: list = []
        w.ctx.host.job_started.connect(lambda e: requests.append(e.plan) if e.job_id.startswith("render") else None)
        w.actions_by_name["render_all"].trigger()
        qtbot.waitUntil(lambda: not w.flow.busy and len(w.document.project.lines) == 4, timeout=20000)
        assert sorted(requests) == sorted([tuple(ln.line_id for ln in one), tuple(ln.line_id for ln in two)])
        # scene two began before scene one ended, and each scene's lines came in order
        assert seen.index(("start", two[0].line_id)) < seen.index(("end", one[-1].line_id)), seen
        for scene in (one, two):
            ends = [seen.index(("end", ln.line_id)) for ln in scene]
            assert ends == sorted(ends)
        assert all(w.timeline.layout.bounds(ln.line_id) is not None for ln in w.document.script.lines)  # every line landed

        put_cursor_on(w, 2)  # "Bob: Second of one."
        picked = one[1].line_id
        before = {ln.line_id: len(w.document.project.takes_of(ln.line_id)) for ln in w.document.script.lines}

        def three_takes(dialog: QInputDialog) -> None:
            assert dialog.labelText().startswith("Takes of this line, rendered at once (1–8)")
            dialog.setIntValue(3)
            dialog.accept()

        requests.clear()
        qtbot.waitUntil(w.actions_by_name["render_takes"].isEnabled, timeout=10000)  # as a person can click it
        on_modal(qtbot, QInputDialog, three_takes, timeout_ms=60000)
        w.actions_by_name["render_takes"].trigger()
        qtbot.waitUntil(lambda: not w.flow.busy and len(w.document.project.takes_of(picked)) == 4, timeout=20000)
        assert requests == [(picked,)] * 3  # three jobs, side by side
        takes = w.document.project.takes_of(picked)
        assert len({t.seed for t in takes[1:]}) == 3 and len({t.take_id for t in takes}) == 4
        assert {ln.line_id: len(w.document.project.takes_of(ln.line_id)) for ln in w.document.script.lines} == {**before, picked: 4}
        assert not w.session.pending and not w.session.running
    finally:
        close_studio(w)


def test_on_the_real_engine_scenes_side_by_side_sound_as_one_at_a_time(qtbot, tmp_path, monkeypatch, request):
    """The tiny model's fast path (float32, the C++ kernels): Render All with one line at a time and with the
    scenes side by side gives every line the same codes (a stream's codes do not depend on what runs beside it),
    and Render Takes… on the batch adds that many different takes."""
    from dataclasses import replace

    import numpy as np

    from s2studio.demo_model import write_demo_model
    from ui_helpers import open_real_studio, write_wav

    model = write_demo_model(tmp_path / "tiny", seed=0)
    w = open_real_studio(qtbot, monkeypatch, tmp_path / "data", request)
    w.live.enabled = False
    voice = w.library.create("A", [(write_wav(tmp_path / "a.wav", seconds=2.0), "hello there")])
    w.voices.refresh()
    w.voice_commands.reread()
    w.editor.setPlainText(SCENES.replace("Bob", "Alice"))
    w.reparse()
    w.cast_panel.combos["Alice"].setCurrentIndex(w.cast_panel.combos["Alice"].findData(voice.id))
    failures: list[str] = []
    w.session.failed.connect(failures.append)
    codes: dict[int, list] = {}
    for at_once in (1, 4):
        settings = replace(w.document.project.settings, precision="fp32", speed="fast", seed_mode="fixed", seed=11,
                           max_frames=24, max_batch=at_once)
        w.document.set_settings(settings)
        w.models.load(model)
        qtbot.waitUntil(lambda: w.model.info is not None and not w.model.busy, timeout=120000)
        assert w.model.info.max_batch == at_once
        w.actions_by_name["render_all"].trigger()
        qtbot.waitUntil(lambda: bool(failures) or (not w.flow.busy and all(
            len(w.document.project.takes_of(ln.line_id)) == len(codes) + 1 for ln in w.document.script.lines)), timeout=120000)
        assert failures == []
        codes[at_once] = [w.document.project.current(ln.line_id).codes for ln in w.document.script.lines]
    assert all(c.shape[1] > 0 for c in codes[1])
    assert all(np.array_equal(a, b) for a, b in zip(codes[1], codes[4], strict=True))

    put_cursor_on(w, 1)
    line = w.document.script.lines[0].line_id

    asked: list[str] = []

    def two_takes(dialog: QInputDialog) -> None:
        asked.append(dialog.labelText())
        dialog.setIntValue(2)
        dialog.accept()

    qtbot.waitUntil(w.actions_by_name["render_takes"].isEnabled, timeout=10000)  # as a person can click it
    on_modal(qtbot, QInputDialog, two_takes, timeout_ms=60000)
    w.actions_by_name["render_takes"].trigger()
    assert asked and w.flow.busy, (asked, w.statusBar().currentMessage(), w.editor.lines_in_selection(w.document.script),
                                   w.editor.textCursor().blockNumber(), w.editor.toPlainText()[:40])
    qtbot.waitUntil(lambda: bool(failures) or (not w.flow.busy and len(w.document.project.takes_of(line)) == 4),
                    timeout=120000)
    assert failures == []
    new = w.document.project.takes_of(line)[2:]
    assert [t.seed for t in new] == [11, 12] and np.array_equal(new[0].codes, codes[1][0])  # take 1: seed 11 again
    assert not np.array_equal(new[0].codes[:, :5], new[1].codes[:, :5])
    w.close()
