"""The second pass, on the real window and the FakeEngine: editing, inserting, splitting and re-rendering
lines never loses a take or another line's audio; Undo/Redo bring the same takes back; A/B stays inside
the line; the timeline zooms and selects; settings that cannot change the audio mark nothing stale."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QTextCursor, QWheelEvent
from PySide6.QtWidgets import QApplication

from s2studio.engine import api
from s2studio.state.staleness import Stale
from ui_helpers import cast_two_voices, close_studio, fake_engine, open_studio, write_wav

FRAMES = 12
SIX = ("Alice: One, the first line.\nBob: Two, the second line.\nAlice: Three, the third line.\n"
       "Bob: Four, the fourth line.\nAlice: Five, the fifth line.\nBob: Six, the sixth line.\n")


@pytest.fixture
def studio(qtbot, tmp_path, monkeypatch):
    """The window on a FakeEngine the test can slow down (`studio.engine.frame_latency_s`)."""
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    engine = fake_engine(FRAMES, 0.002)
    w = open_studio(qtbot, lambda: engine)
    w.engine = engine
    yield w
    close_studio(w)


def render_all(qtbot, w) -> None:
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: not w.flow.busy and all(w.document.project.current(k) for k in w.document.script.line_ids),
                    timeout=20000)


def put_cursor(w, position: int) -> None:
    cursor = w.editor.textCursor()
    cursor.setPosition(position)
    w.editor.setTextCursor(cursor)
    w.editor.setFocus()


def takes_of(w) -> dict[str, list[str]]:
    return {k: [t.take_id for t in e.takes] for k, e in w.document.project.lines.items()}


def kinds(w) -> list[str]:
    return [w.document.state(ln).kind for ln in w.document.script.lines]


def test_editing_a_rendered_line_keeps_its_takes_and_audio_and_undo_redo_keep_them(qtbot, studio, tmp_path):
    w = studio
    cast_two_voices(w, tmp_path, "Alice: One two three.\nBob: Four five.\nAlice: Six seven.")
    render_all(qtbot, w)
    ids, takes, mix = w.document.script.line_ids, takes_of(w), w.timeline.mix().copy()
    segments = w.timeline.segments()
    bob = w.document.script.lines[1]
    put_cursor(w, bob.end)
    qtbot.keyClicks(w.editor, " Six")  # real keys, parsed after the editor's debounce
    qtbot.waitUntil(lambda: w.document.script.lines[1].text == "Four five. Six", timeout=3000)
    assert w.document.script.line_ids == ids and takes_of(w) == takes
    assert w.timeline.segments() == segments and np.array_equal(w.timeline.mix(), mix)  # its audio stays
    assert kinds(w) == ["fresh", "stale", "fresh"]
    assert w.document.state(w.document.script.lines[1]).reasons == (Stale.TEXT,)
    assert w.player_bar.waveform.stale_lines == {bob.line_id}
    assert w.editor.gutter.mark(1).kind == "stale" and w.editor.gutter.mark(1).takes == 1
    assert "stale: text edited" in w.inspector.takes.title.text()  # the takes panel shows the line under the cursor
    assert w.inspector.takes.list.count() == 1

    for _ in range(5):  # Undo (Ctrl+Z) until the text is back: the same line, the same take, up to date
        if w.editor.toPlainText().endswith("Four five.\nAlice: Six seven."):
            break
        qtbot.keyClick(w.editor, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: w.document.script.lines[1].text == "Four five.", timeout=3000)
    assert w.document.script.line_ids == ids and takes_of(w) == takes and kinds(w) == ["fresh"] * 3
    assert np.array_equal(w.timeline.mix(), mix)
    qtbot.keyClick(w.editor, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    qtbot.waitUntil(lambda: w.document.script.lines[1].text == "Four five. Six", timeout=3000)
    assert w.document.script.line_ids == ids and takes_of(w) == takes and kinds(w) == ["fresh", "stale", "fresh"]


def test_deleting_a_line_then_undo_brings_its_takes_back(qtbot, studio, tmp_path):
    w = studio
    cast_two_voices(w, tmp_path, "Alice: One two three.\nBob: Four five.\nAlice: Six seven.")
    render_all(qtbot, w)
    ids, takes, mix = w.document.script.line_ids, takes_of(w), w.timeline.mix().copy()
    cursor = w.editor.textCursor()
    cursor.setPosition(w.document.script.lines[1].start - len("Bob: "))
    cursor.movePosition(QTextCursor.MoveOperation.Down, QTextCursor.MoveMode.KeepAnchor)
    w.editor.setTextCursor(cursor)
    w.editor.setFocus()
    qtbot.keyClick(w.editor, Qt.Key.Key_Delete)
    qtbot.waitUntil(lambda: len(w.document.script.lines) == 2, timeout=3000)
    assert w.document.script.line_ids == (ids[0], ids[2])
    assert takes_of(w) == takes  # the deleted line's take stays in the project
    assert [s.line_id for s in w.timeline.segments()] == [ids[0], ids[2]]
    qtbot.keyClick(w.editor, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: len(w.document.script.lines) == 3, timeout=3000)
    assert w.document.script.line_ids == ids and kinds(w) == ["fresh"] * 3
    assert np.array_equal(w.timeline.mix(), mix)


def test_inserting_a_line_above_keeps_every_take_where_it_was(qtbot, studio, tmp_path):
    w = studio
    cast_two_voices(w, tmp_path, "Alice: One two three.\nBob: Four five.")
    render_all(qtbot, w)
    ids, takes, mix = w.document.script.line_ids, takes_of(w), w.timeline.mix().copy()
    put_cursor(w, 0)
    qtbot.keyClicks(w.editor, "Bob: A new first line.")
    qtbot.keyClick(w.editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(w.document.script.lines) == 3, timeout=3000)
    assert w.document.script.line_ids[1:] == ids and w.document.script.line_ids[0] not in ids
    assert takes_of(w) == takes and kinds(w) == ["none", "fresh", "fresh"]
    assert [s.line_id for s in w.timeline.segments()] == list(ids)  # a line without audio takes no room
    assert np.array_equal(w.timeline.mix(), mix)
    assert w.editor.gutter.mark(0).kind == "none" and w.editor.gutter.mark(1).kind == "fresh"
    w.actions_by_name["render_stale"].trigger()  # only the new line renders; it comes in before the others
    qtbot.waitUntil(lambda: not w.flow.busy and w.document.project.current(w.document.script.line_ids[0]) is not None, timeout=20000)
    assert takes_of(w) == {**takes, w.document.script.line_ids[0]: takes_of(w)[w.document.script.line_ids[0]]}
    first = len(w.document.project.current(w.document.script.line_ids[0]).audio) + w.timeline.gap
    assert np.array_equal(w.timeline.mix()[first:], mix)  # the old lines moved back, unchanged


def test_splitting_a_line_keeps_its_takes_with_the_larger_part(qtbot, studio, tmp_path):
    w = studio
    cast_two_voices(w, tmp_path, "Alice: Hi there. How are you today, my old friend?\nBob: Fine, thanks.")
    render_all(qtbot, w)
    ids, takes = w.document.script.line_ids, takes_of(w)
    put_cursor(w, w.document.script.lines[0].start + len("Hi there."))
    qtbot.keyClick(w.editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(w.document.script.lines) == 3, timeout=3000)
    assert [(ln.speaker, ln.text) for ln in w.document.script.lines] == [
        ("Alice", "Hi there."), ("Alice", "How are you today, my old friend?"), ("Bob", "Fine, thanks.")]
    assert w.document.script.line_ids[1:] == ids and w.document.script.line_ids[0] not in ids
    assert takes_of(w) == takes
    assert kinds(w) == ["none", "stale", "fresh"]
    assert w.document.state(w.document.script.lines[1]).reasons == (Stale.TEXT,)
    qtbot.keyClick(w.editor, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)  # joined again
    qtbot.waitUntil(lambda: len(w.document.script.lines) == 2, timeout=3000)
    assert w.document.script.line_ids == ids and kinds(w) == ["fresh", "fresh"]


def test_rerendering_line_1_of_6_leaves_lines_2_to_6_audible(qtbot, studio, tmp_path):
    w = studio
    cast_two_voices(w, tmp_path, SIX)
    render_all(qtbot, w)
    first = w.document.script.lines[0].line_id
    old_take = w.document.project.current(first)
    layout = w.timeline.layout
    start2 = layout.bounds(w.document.script.lines[1].line_id)[0]
    before = w.timeline.mix().copy()
    chunks: list[int] = []
    w.ctx.host.audio_chunk.connect(lambda e: chunks.append(e.start_sample) if e.line_id == first else None)
    w.engine.frame_latency_s = 0.05  # slow enough to look at the timeline while the job runs
    put_cursor(w, w.document.script.lines[0].start + 2)
    qtbot.keyClick(w.editor, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)  # Render ▸ Render Line
    qtbot.waitUntil(lambda: len(chunks) >= 3, timeout=10000)
    assert w.session.busy and w.session.rendering(first)
    during = w.timeline.mix()
    assert np.array_equal(during, before)  # every line audible; line 1 still plays its old take
    assert [s.start for s in w.timeline.segments()] == [s.start for s in layout.segments()]
    assert first in w.player_bar.waveform.rendering_lines and w.editor.gutter.mark(0).kind == "rendering"
    qtbot.waitUntil(lambda: not w.flow.busy, timeout=20000)
    new_take = w.document.project.current(first)
    assert [t.take_id for t in w.document.project.lines[first].takes] == [old_take.take_id, new_take.take_id]
    after = w.timeline.mix()
    assert np.array_equal(after[:len(new_take.audio)], new_take.audio)
    assert not np.array_equal(new_take.audio, old_take.audio)
    assert np.array_equal(after[start2:], before[start2:])  # a take of the same length: nothing else moved


def test_ab_playback_never_leaves_the_line(qtbot, studio, tmp_path):
    w = studio
    cast_two_voices(w, tmp_path, "Alice: One two three.\nBob: Four five.\nAlice: Six seven.")
    render_all(qtbot, w)
    line = w.document.script.lines[1]
    put_cursor(w, line.start + 1)
    w.actions_by_name["render_line"].trigger()
    qtbot.waitUntil(lambda: not w.flow.busy and len(w.document.project.lines[line.line_id].takes) == 2, timeout=20000)
    outside: list[tuple[int, tuple[int, int]]] = []
    blocks: list[int] = []
    callback = w.player._callback

    def watched(outdata, frames, time, status):  # noqa: ANN001 - sounddevice's callback, observed
        callback(outdata, frames, time, status)
        bounds = w.timeline.layout.bounds(line.line_id)
        blocks.append(w.player.position)
        if not bounds[0] <= w.player.position <= bounds[1]:
            outside.append((w.player.position, bounds))

    w.player._callback = watched
    w.inspector.setCurrentWidget(w.inspector.takes)
    picks = []
    for _ in range(4):
        qtbot.mouseClick(w.inspector.takes.ab_button, Qt.MouseButton.LeftButton)
        picks.append(w.document.project.lines[line.line_id].picked)
        assert w.player.playing and w.player.looping and w.player.line == line.line_id
        qtbot.wait(400)  # longer than the line (12 frames: 0.56 s) at least once: the loop wraps
    w.player.pause()
    assert picks == [0, 1, 0, 1]
    assert len(blocks) > 20 and outside == []
    assert min(blocks) < w.timeline.layout.bounds(line.line_id)[0] + 4096  # it went round


def test_play_line_stops_at_the_lines_end(qtbot, studio, tmp_path):
    w = studio
    cast_two_voices(w, tmp_path, "Alice: One two three.\nBob: Four five.\nAlice: Six seven.")
    render_all(qtbot, w)
    line = w.document.script.lines[0]
    put_cursor(w, line.start)
    w.inspector.setCurrentWidget(w.inspector.takes)
    qtbot.mouseClick(w.inspector.takes.play_button, Qt.MouseButton.LeftButton)
    assert w.player.playing
    qtbot.waitUntil(lambda: not w.player.playing, timeout=5000)
    assert w.player.position == w.timeline.layout.bounds(line.line_id)[1]


def test_twenty_speakers_keep_the_window_on_a_1280_px_screen(qtbot, studio, tmp_path):
    w = studio
    names = ["Alice", "Bob", "Carol", "Dave", "Eve", "Frank", "Grace", "Heidi", "Ivan", "Judy", "Mallory",
             "Niaj", "Olivia", "Peggy", "Rupert", "Sybil", "Trent", "Victor", "Walter", "Bbo"]
    clip = write_wav(tmp_path / "a.wav")
    voices = {n: w.library.create(n, [(clip, "hello")]) for n in ("Alice", "Bob")}
    w.voices.refresh()
    w.voice_commands.reread()
    w.editor.setPlainText("".join(f"{n}: Line {i} of the scene.\n" for i, n in enumerate(names)))
    w.reparse()
    w.resize(1280, 800)
    qtbot.waitUntil(lambda: not w.cast_panel.building())  # a cast this large is built over a few passes
    qtbot.wait(50)
    QApplication.processEvents()
    assert len(w.cast_panel.combos) == 20
    assert w.width() <= 1280 and w.minimumSizeHint().width() <= 1280
    assert w.cast_panel.geometry().right() <= w.width()
    assert w.document.project.cast == {"Alice": voices["Alice"].id, "Bob": voices["Bob"].id}  # voices named as speakers
    text = w.cast_panel.summary.text()
    assert text.startswith("⚠ 18 speakers have no voice: Carol, Dave, Eve, Frank,")
    assert "“Bbo”: did you mean Bob?" in text
    assert w.cast_panel.scroll.height() <= 3 * 40  # three rows show; the rest scrolls


def test_zoom_changes_samples_per_pixel_and_a_click_selects_the_line(qtbot, studio, tmp_path):
    w = studio
    cast_two_voices(w, tmp_path, "Alice: One two three.\nBob: Four five.\nAlice: Six seven.")
    render_all(qtbot, w)
    wave = w.player_bar.waveform
    fitted = wave.samples_per_pixel
    assert wave.fitted and fitted == pytest.approx(int(w.timeline.layout.end * 1.01 + 1) / wave.width())
    centre = QPointF(wave.width() / 2, wave.height() / 2)
    wheel = QWheelEvent(centre, wave.mapToGlobal(centre), QPoint(0, 0), QPoint(0, 240), Qt.MouseButton.NoButton,
                        Qt.KeyboardModifier.ControlModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(wave, wheel)  # Ctrl+wheel: two steps in
    assert wave.samples_per_pixel == pytest.approx(fitted / 1.5 ** 2)
    assert w.player_bar.scrollbar.isEnabled() and w.player_bar.scrollbar.maximum() > 0
    qtbot.mouseClick(wave, Qt.MouseButton.LeftButton, pos=QPoint(5, wave.height() // 2))  # gives the focus
    qtbot.keyClick(wave, Qt.Key.Key_Plus)
    assert wave.samples_per_pixel == pytest.approx(fitted / 1.5 ** 3)
    w.player_bar.scrollbar.setValue(w.player_bar.scrollbar.maximum())
    assert wave.origin == w.player_bar.scrollbar.maximum() > 0
    w.player_bar.scrollbar.setValue(0)
    far = w.timeline.layout.end - 100
    wave.set_playhead(far)  # a seek while paused: the view stays
    assert wave.origin == 0
    wave.set_playhead(far, moving=True)  # playing, with Follow on: the view pages to the playhead
    assert wave.origin <= far <= wave.origin + wave.visible and wave.origin > 0
    w.actions_by_name["follow_playhead"].trigger()  # Follow off
    wave.scroll_to(0)
    wave.set_playhead(far, moving=True)
    assert wave.origin == 0
    qtbot.keyClick(wave, Qt.Key.Key_0)
    assert wave.fitted and wave.samples_per_pixel == pytest.approx(fitted)

    third = w.document.script.lines[2]
    start, end = w.timeline.layout.bounds(third.line_id)
    put_cursor(w, w.document.script.lines[0].start)
    qtbot.mouseClick(wave, Qt.MouseButton.LeftButton, pos=QPoint(int(wave.x_of((start + end) / 2)), 50))
    assert w.lines.selected() == third and wave.selected_line == third.line_id
    assert w.inspector.currentWidget() is w.inspector.takes and third.text in w.inspector.takes.title.text()
    assert start <= w.player.position < end
    put_cursor(w, w.document.script.lines[1].start)  # the reverse: the editor's line is the waveform's selection
    assert wave.selected_line == w.document.script.lines[1].line_id


def test_a_gutter_mark_selects_the_lines_takes_and_a_deleted_take_comes_back(qtbot, studio, tmp_path):
    w = studio
    cast_two_voices(w, tmp_path, "Alice: One two three.\nBob: Four five.")
    render_all(qtbot, w)
    bob = w.document.script.lines[1]
    put_cursor(w, 0)
    w.inspector.setCurrentIndex(0)
    block = w.editor.document().findBlockByNumber(1)
    top = w.editor.blockBoundingGeometry(block).translated(w.editor.contentOffset()).top()
    qtbot.mouseClick(w.editor.gutter, Qt.MouseButton.LeftButton, pos=QPoint(10, int(top) + 8))
    assert w.lines.selected() == bob and w.inspector.currentWidget() is w.inspector.takes
    assert "Four five." in w.inspector.takes.title.text() and w.inspector.takes.list.count() == 1
    take = w.document.project.current(bob.line_id)
    w.inspector.takes.list.setCurrentRow(0)
    qtbot.mouseClick(w.inspector.takes.delete_button, Qt.MouseButton.LeftButton)
    assert bob.line_id not in w.document.project.lines and w.editor.gutter.mark(1).kind == "none"
    assert [s.line_id for s in w.timeline.segments()] == [w.document.script.lines[0].line_id]
    qtbot.mouseClick(w.inspector.takes.undo_button, Qt.MouseButton.LeftButton)
    assert w.document.project.current(bob.line_id) is take and w.editor.gutter.mark(1).kind == "fresh"
    assert len(w.timeline.segments()) == 2


def test_settings_that_cannot_change_the_audio_mark_nothing_stale(qtbot, studio, tmp_path):
    w = studio
    cast_two_voices(w, tmp_path, "Alice: One two three.\nBob: Four five.")
    render_all(qtbot, w)
    panel = w.inspector.settings_panel
    for box, value in ((panel.mode, "exact"), (panel.device, "cpu"), (panel.mode, "int8"), (panel.mode, "int4")):
        box.setCurrentIndex(box.findData(value))
        qtbot.waitUntil(lambda: not w.model.busy and w.model.info is not None, timeout=5000)  # reloaded
    panel.threads.setValue(1)
    qtbot.waitUntil(lambda: not w.model.busy and w.model.info is not None, timeout=5000)
    w.renders.set_gap(1.5)
    assert w.document.project.settings.speed == "fast" and w.document.project.settings.quantize == "int4"
    assert w.document.project.settings.threads == 1 and panel.threads.text() == "1"
    assert w.document.stale_lines() == [] and kinds(w) == ["fresh", "fresh"]
    assert [w.editor.gutter.mark(b).kind for b in (0, 1)] == ["fresh", "fresh"]
    panel.temperature.setValue(0.5)  # what the model is asked: every line stale, and why
    assert kinds(w) == ["stale", "stale"]
    assert {w.document.state(ln).reasons for ln in w.document.script.lines} == {(Stale.SETTINGS,)}
    assert "stale: settings changed" in w.editor.gutter.tip(0)


def test_transport_keys_work_in_the_player(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, lambda: fake_engine(frames=110, latency_s=0.0))  # lines of 5.1 s
    try:
        cast_two_voices(w, tmp_path, "Alice: One two three.\nBob: Four five.")
        render_all(qtbot, w)
        w.activateWindow()
        qtbot.waitUntil(w.isActiveWindow, timeout=3000)  # shortcuts reach the active window only
        wave = w.player_bar.waveform
        qtbot.mouseClick(wave, Qt.MouseButton.LeftButton, pos=QPoint(2, wave.height() // 2))
        assert wave.hasFocus() and w.player.position < 4096
        end = w.timeline.layout.end
        qtbot.keyClick(wave, Qt.Key.Key_Right)
        assert w.player.position == pytest.approx(5 * 44100, abs=4096)
        qtbot.keyClick(wave, Qt.Key.Key_End)
        assert w.player.position == end
        qtbot.keyClick(wave, Qt.Key.Key_Left)
        assert w.player.position == end - 5 * 44100
        qtbot.keyClick(wave, Qt.Key.Key_Home)
        assert w.player.position == 0
        qtbot.keyClick(wave, Qt.Key.Key_Space)
        assert w.player.playing
        qtbot.keyClick(wave, Qt.Key.Key_Space)
        assert not w.player.playing
        second = w.document.script.lines[1].line_id
        start, stop = w.timeline.layout.bounds(second)
        x = int(wave.x_of((start + stop) / 2))
        qtbot.mouseClick(wave, Qt.MouseButton.LeftButton, pos=QPoint(x, wave.height() // 2))  # selects line 2 …
        assert w.lines.selected().line_id == second
        qtbot.keyClick(wave, Qt.Key.Key_L)  # … and L loops it
        assert w.player.playing and w.player.looping and w.player.line == second
        assert w.actions_by_name["loop_line"].isChecked()
        qtbot.keyClick(wave, Qt.Key.Key_L)
        assert not w.player.looping and w.player.line is None
    finally:
        close_studio(w)


def test_the_request_hashes_each_clip_once_off_the_gui_thread(qtbot, studio, tmp_path, monkeypatch):
    import threading

    from s2studio.state import voice_codes

    w = studio
    cast_two_voices(w, tmp_path, "Alice: One two three.\nBob: Four five.")
    hashed: list[tuple[str, bool]] = []
    real = voice_codes.sha256_of

    def counted(path):  # noqa: ANN001, ANN202
        hashed.append((path.name, threading.current_thread() is threading.main_thread()))
        return real(path)

    monkeypatch.setattr(voice_codes, "sha256_of", counted)  # where a request's codes are looked up
    render_all(qtbot, w)  # the first render encodes both clips (and caches their codes)
    assert sorted(hashed) == sorted([(c.file, False) for v in w.library.list() for c in v.clips])
    hashed.clear()
    put_cursor(w, w.document.script.lines[1].start)
    w.actions_by_name["render_line"].trigger()  # codes from the cache: still each clip hashed once
    qtbot.waitUntil(lambda: not w.flow.busy and len(w.document.project.lines[w.document.script.line_ids[1]].takes) == 2,
                    timeout=20000)
    assert len(hashed) == 2 and not any(on_gui for _, on_gui in hashed)


def test_a_render_cancelled_by_opening_another_project_leaves_it_alone(qtbot, studio, tmp_path):
    w = studio
    cast_two_voices(w, tmp_path, SIX)
    saved = tmp_path / "six.s2proj"
    w.projects.save_as(saved)
    w.engine.frame_latency_s = 0.02
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: w.session.busy and w.timeline.layout.end > 0, timeout=10000)
    job, first = w.session.job_id, w.document.script.lines[0].line_id
    assert w.projects.open(saved)  # the same lines (the same ids), no takes
    # a line the engine finished just before it saw the cancel, its event still queued
    w.ctx.host.line_finished.emit(api.LineFinished(job, first, "0123456789ab", np.zeros((10, 2), np.int64),
                                                   np.full(4096, 0.5, np.float32), 1, ""))
    qtbot.waitUntil(lambda: not w.flow.busy, timeout=20000)
    assert w.document.project.lines == {} and w.timeline.segments() == []
