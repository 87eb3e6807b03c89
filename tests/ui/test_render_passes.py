"""The engine's events and the waveform's picture take their turns from the window's one budget a pass: once a
pass has spent it, taking in more events and composing the waveform again wait for the next pass of the event
loop, instead of adding up in one (a take landing, then a repaint of a whole book's waveform). Counted per pass
of the event loop, not timed."""

from __future__ import annotations

import gc
import threading

import numpy as np
from PySide6.QtCore import QAbstractEventDispatcher

from s2studio.audio.timeline import Timeline
from s2studio.engine import api
from s2studio.state import take_audio
from s2studio.ui.control import slices
from s2studio.ui.control.slices import pass_budget
from s2studio.ui.player import waveform
from s2studio.ui.player.waveform import WaveformView
from s2studio.worker import EngineHost
from ui_helpers import cast_two_voices, close_studio, fake_engine, open_studio

LINES = 40


class ChunkEngine:
    """A line's start and one chunk of audio a line; before each line after the first, `paced()` (which
    returns when the window took in what came before, or soon after)."""

    def __init__(self, paced=lambda: None) -> None:
        self.paced = paced

    def generate(self, request, cancel):
        yield api.JobStarted(request.job_id, tuple(line.line_id for line in request.lines))
        for i, line in enumerate(request.lines):
            if i:
                self.paced()
            yield api.LineStarted(request.job_id, line.line_id)
            yield api.AudioChunk(request.job_id, line.line_id, 0, np.full(4000, 0.5, np.float32))
        yield api.JobFinished(request.job_id)


def test_events_taken_in_and_the_waveforms_picture_never_share_a_pass_that_spent_its_budget(qtbot, monkeypatch):
    monkeypatch.setattr(slices, "BUDGET_S", 0.0)  # the first job of a pass spends its budget
    monkeypatch.setattr(waveform, "MAX_REPAINT_HZ", 1000)  # (about) no rate limit: every line that lands asks for
    monkeypatch.setattr(waveform, "REPAINT_SHARE", 1000.0)  # a new picture
    ids = [f"l{i}" for i in range(LINES)]
    timeline = Timeline(gap_s=0.05)
    timeline.set_lines(ids, {})
    view = WaveformView(timeline)
    qtbot.addWidget(view)
    view.resize(600, 120)
    view.show()
    view.grab()
    passes: list[list[str]] = [[]]
    dispatcher = QAbstractEventDispatcher.instance()
    begin = lambda: passes.append([]) if passes[-1] else None  # noqa: E731 - a pass of the event loop starts
    dispatcher.aboutToBlock.connect(begin)
    composed = view._compose
    picture = threading.Event()
    monkeypatch.setattr(view, "_compose", lambda: passes[-1].append("compose") or picture.set() or composed())

    def landed(event: api.AudioChunk) -> None:
        passes[-1].append("event")
        timeline.set_audio(event.line_id, event.samples)
        view.refresh()

    def paced() -> None:
        """The next line once the window composed the picture of the last (at most 0.5 s later): an engine
        faster than the window would keep an event always waiting, and the picture would wait for its end."""
        picture.wait(0.5)
        picture.clear()

    host = EngineHost(lambda: ChunkEngine(paced))
    try:
        host.deliver_in_turns(pass_budget().ask)
        host.audio_chunk.connect(landed)
        with qtbot.waitSignal(host.job_finished, timeout=20000):
            host.generate(api.SynthesisRequest("job", tuple(api.LineSpec(k, 0, "hi") for k in ids)))
        qtbot.waitUntil(lambda: not view._recompose)
    finally:
        dispatcher.aboutToBlock.disconnect(begin)
        host.shutdown()
    events = sum(p.count("event") for p in passes)
    composes = sum(p.count("compose") for p in passes)
    assert events == LINES and composes >= 5
    assert [p for p in passes if "event" in p and "compose" in p] == []
    assert max(p.count("compose") for p in passes) == 1
    assert len(timeline.layout.tracks) == LINES


def test_a_job_asked_first_goes_before_the_jobs_waiting(qtbot, monkeypatch):
    qtbot.waitUntil(lambda: not pass_budget()._waiting)  # no other work waiting
    monkeypatch.setattr(slices, "BUDGET_S", 0.0)  # a pass's budget spent by its first job
    ran: list[str] = []
    jobs = {name: (lambda _until, name=name: ran.append(name)) for name in "abc"}
    budget = pass_budget()
    budget.ask(jobs["a"])
    budget.ask(jobs["b"])
    budget.ask(jobs["b"], first=True)  # asked again, first: moved ahead
    budget.ask(jobs["c"], first=True)
    qtbot.waitUntil(lambda: len(ran) == 3)
    assert ran == ["c", "b", "a"]


class StartEngine:
    def generate(self, request, cancel):
        yield api.LineStarted(request.job_id, request.lines[0].line_id)


def test_a_lines_start_is_taken_in_at_the_next_pass_before_the_work_waiting_there(qtbot, monkeypatch):
    """The engine's events share the budget with the window's other work, but the first of a burst does not wait
    behind it: the line that started is shown at once (Render All leaves a book's work in slices waiting)."""
    qtbot.waitUntil(lambda: not pass_budget()._waiting)
    monkeypatch.setattr(slices, "BUDGET_S", 0.0)  # a pass's budget spent by its first job
    ran: list[str] = []
    waiting = [slices.Slices(lambda i, k=k: ran.append(f"{k}{i}")) for k in "abc"]
    host = EngineHost(lambda: StartEngine())
    try:
        host.deliver_in_turns(pass_budget().ask)
        host.line_started.connect(lambda event: ran.append(event.line_id))
        host.hold(True)  # the event waits in the outbox until the window's work is waiting too
        host.generate(api.SynthesisRequest("job", (api.LineSpec("l0", 0, "hi"),)))
        qtbot.waitUntil(lambda: bool(host.worker.outbox), timeout=5000)
        for work in waiting:
            work.start(range(5), now=False)
        host.hold(False)
        qtbot.waitUntil(lambda: "l0" in ran, timeout=5000)
    finally:
        for work in waiting:
            work.stop()
        host.shutdown()
    assert ran.index("l0") <= 1  # at the next pass (or the one after), not after a turn of each job waiting


def test_render_all_freezes_the_book_shown_and_its_end_the_takes_made_so_full_collections_walk_only_what_came_after(
        qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, lambda: fake_engine(4, 0.0005))
    try:
        cast_two_voices(w, tmp_path, "".join(f"{'Alice' if i % 2 else 'Bob'}: Line {i}.\n" for i in range(30)))
        qtbot.waitUntil(w.actions_by_name["render_all"].isEnabled, timeout=10000)
        gc.unfreeze()  # (what the tests before left frozen)
        project = w.document.project
        generations = lambda: [o for g in range(3) for o in gc.get_objects(g) if o is project]  # noqa: E731
        assert gc.get_freeze_count() == 0 and generations() == [project]
        w.actions_by_name["render_all"].trigger()
        assert gc.get_freeze_count() > 0 and generations() == []  # in the permanent generation: never walked
        qtbot.waitUntil(lambda: not w.flow.busy, timeout=30000)
        takes = {id(entry.current) for entry in project.lines.values()}
        assert len(takes) == 30  # the takes it made live as long as the project: frozen when it ends
        assert not [o for g in range(3) for o in gc.get_objects(g) if id(o) in takes]
    finally:
        close_studio(w)


def test_a_renders_takes_are_rounded_to_what_their_files_hold_off_the_windows_thread(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    rounded_on: list[int] = []
    real = take_audio.rounded
    monkeypatch.setattr(take_audio, "rounded", lambda audio: (rounded_on.append(threading.get_ident()), real(audio))[1])
    w = open_studio(qtbot, lambda: fake_engine(4, 0.0))
    try:
        cast_two_voices(w, tmp_path, "".join(f"{'Alice' if i % 2 else 'Bob'}: Line {i}.\n" for i in range(6)))
        qtbot.waitUntil(w.actions_by_name["render_all"].isEnabled, timeout=10000)
        rounded_on.clear()
        w.actions_by_name["render_all"].trigger()
        qtbot.waitUntil(lambda: not w.flow.busy and len(w.document.project.lines) == 6, timeout=30000)
        takes = [entry.current for entry in w.document.project.lines.values()]
        assert len(rounded_on) >= 6 and threading.get_ident() not in rounded_on  # each take's, on the engine thread
        assert all(len(take.sound) > 0 for take in takes)
    finally:
        close_studio(w)
