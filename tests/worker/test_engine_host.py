"""EngineHost + a stub engine on the real engine thread: order of events, cancel, failures, reuse."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from s2studio.engine import api
from s2studio.errors import UserError
from s2studio.worker import EngineHost


class StubEngine:
    """Yields a fixed sequence; `generate` waits on `gate` between lines so cancel can be tested."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.thread_names: list[str] = []

    def load(self, request, cancel):
        self.thread_names.append(threading.get_ident())
        raise UserError("Not an S2 model folder: config.json is missing.")

    def encode(self, request, cancel):
        raise RuntimeError("boom")

    def generate(self, request, cancel):
        self.thread_names.append(threading.get_ident())
        yield api.JobStarted(request.job_id, tuple(line.line_id for line in request.lines))
        for line in request.lines:
            self.gate.wait(5)
            if cancel.is_set():
                yield api.JobFinished(request.job_id, cancelled=True)
                return
            yield api.LineStarted(request.job_id, line.line_id)
            yield api.AudioChunk(request.job_id, line.line_id, 0, np.ones(10, np.float32))
        yield api.JobFinished(request.job_id)


def _request(job_id: str, n: int = 2) -> api.SynthesisRequest:
    return api.SynthesisRequest(job_id, tuple(api.LineSpec(f"l{i}", 0, "hi") for i in range(n)))


@pytest.fixture
def host(qtbot):
    engine = StubEngine()
    h = EngineHost(lambda: engine)
    h.engine = engine
    yield h
    h.shutdown()


def test_events_arrive_in_order_on_gui_thread(host, qtbot):
    seen: list[str] = []
    for name in ("job_started", "line_started", "audio_chunk"):
        getattr(host, name).connect(lambda e, name=name: seen.append(f"{name}:{getattr(e, 'line_id', '')}"))
    with qtbot.waitSignal(host.job_finished, timeout=5000) as blocker:
        job = host.generate(_request("a"))
        assert host.busy
    assert blocker.args[0] == api.JobFinished(job, cancelled=False)
    assert seen == ["job_started:", "line_started:l0", "audio_chunk:l0", "line_started:l1", "audio_chunk:l1"]
    assert not host.busy
    assert host.engine.thread_names and threading.get_ident() not in host.engine.thread_names


def test_cancel_ends_job_without_error_and_worker_stays_usable(host, qtbot):
    host.engine.gate.clear()
    job = host.generate(_request("b", n=3))
    host.cancel(job)
    host.engine.gate.set()
    with qtbot.waitSignal(host.job_finished, timeout=5000) as blocker:
        pass
    assert blocker.args[0] == api.JobFinished("b", cancelled=True)
    with qtbot.waitSignal(host.job_finished, timeout=5000) as blocker:
        host.generate(_request("c", n=1))
    assert blocker.args[0] == api.JobFinished("c", cancelled=False)


def test_user_error_and_bug_become_job_failed(host, qtbot):
    with qtbot.waitSignal(host.job_failed, timeout=5000) as blocker:
        host.load(api.LoadRequest("m", model_dir=__import__("pathlib").Path("/nowhere")))
    assert blocker.args[0] == api.JobFailed("m", "Not an S2 model folder: config.json is missing.")
    with qtbot.waitSignal(host.job_failed, timeout=5000) as blocker:
        host.submit("e", lambda engine, _job, cancel: engine.encode(api.EncodeRequest("e", clips=()), cancel))
    assert blocker.args[0].error == "internal error (RuntimeError: boom); details are in the log"
    assert not host.busy


def test_a_fast_engine_waits_for_the_window_which_keeps_answering(host, qtbot, monkeypatch):
    """An engine faster than the window fills the outbox up to its limit and waits there; the window takes
    the events a slice at a time, running its other events (a timer here) in between."""
    from PySide6.QtCore import QTimer

    from s2studio.worker import host as host_module

    monkeypatch.setattr(host_module, "OUTBOX_LIMIT", 20)
    monkeypatch.setattr(host_module, "SLICE_S", 0.001)
    most = [0]
    chunks: list[int] = []

    def slow_slot(_event) -> None:  # the window's work per chunk
        most[0] = max(most[0], len(host.worker.outbox))
        chunks.append(ticks[0])
        threading.Event().wait(0.0005)

    host.audio_chunk.connect(slow_slot)
    ticks = [0]
    timer = QTimer()
    timer.setInterval(0)
    timer.timeout.connect(lambda: ticks.__setitem__(0, ticks[0] + 1))
    timer.start()
    with qtbot.waitSignal(host.job_finished, timeout=20000):
        host.generate(_request("fast", 400))
    timer.stop()
    assert len(chunks) == 400 and most[0] <= 20  # the engine waited for room
    assert len(set(chunks)) > 20  # the timer ran between slices, not only before and after the flood


def test_a_lines_progress_waiting_for_the_window_is_replaced_by_its_next_one(host, qtbot):
    """Only the latest progress of a line says anything: a window behind the engine gets that one, in its place
    among the line's other events (chunks, its end), never one of another line or job folded in."""
    worker, cancel = host.worker, threading.Event()
    taken: list[api.Event] = []
    events = [api.LineStarted("a", "l1"), api.Progress("a", "l1", 4, 80, 0.1),
              api.AudioChunk("a", "l1", 0, np.zeros(4, np.float32)), api.Progress("a", "l1", 8, 80, 0.1),
              api.Progress("b", "l9", 4, 80, 0.1), api.Progress("a", "l1", 12, 80, 0.1),
              api.LineStarted("a", "l2"), api.Progress("a", "l2", 4, 80, 0.1), api.Progress("a", "l2", 8, 80, 0.2)]
    worker.told = True  # the host is not told: the events wait, as behind a busy window
    for event in events:
        worker.put(event, cancel)
    with worker.room:
        while (event := worker.take()) is not None:
            taken.append(event)
    assert taken == [events[0], events[5], events[2], events[4], events[6], events[8]]
    assert worker._progress == {}


def test_a_lines_audio_waiting_for_the_window_is_handed_over_as_one_chunk(host, qtbot):
    """A window behind the engine takes one chunk for a line's audio that waits in pieces, in the place of its
    first piece: never a piece of another job, of another take of the line (it starts again at 0), or one that
    came after another event of its job (its end, a next line), and progress between pieces does not part them."""
    worker, cancel = host.worker, threading.Event()

    def chunk(job: str, line: str, start: int, n: int) -> api.AudioChunk:
        return api.AudioChunk(job, line, start, np.arange(start, start + n, dtype=np.float32))

    events = [api.LineStarted("a", "l1"), chunk("a", "l1", 0, 3), api.Progress("a", "l1", 1, 8, 0.1),
              chunk("b", "l9", 0, 2), chunk("a", "l1", 3, 4), api.Progress("a", "l1", 2, 8, 0.1),
              chunk("a", "l1", 7, 1), chunk("b", "l9", 2, 2),
              chunk("a", "l1", 0, 2),  # the line's next take: its own chunk
              chunk("a", "l1", 2, 2),
              api.LineFinished("a", "l1", "t1", np.zeros((10, 1), np.int64), np.zeros(4, np.float32), 0, ""),
              chunk("a", "l1", 4, 1),  # after the take's end: not folded into audio before it
              api.LineStarted("a", "l2"), chunk("a", "l2", 0, 5)]
    worker.told = True  # the host is not told: the events wait, as behind a busy window
    for event in events:
        worker.put(event, cancel)
    assert len(worker.outbox) == 9
    with worker.room:
        taken = []
        while (event := worker.take()) is not None:
            taken.append(event)
    chunks = [(e.job_id, e.line_id, e.start_sample, e.samples.tolist()) for e in taken if isinstance(e, api.AudioChunk)]
    assert chunks == [("a", "l1", 0, list(range(8))), ("b", "l9", 0, [0, 1, 2, 3]), ("a", "l1", 0, [0, 1, 2, 3]),
                      ("a", "l1", 4, [4]), ("a", "l2", 0, [0, 1, 2, 3, 4])]
    assert [type(e).__name__ for e in taken] == ["LineStarted", "AudioChunk", "Progress", "AudioChunk", "AudioChunk",
                                                 "FinishedTake", "AudioChunk", "LineStarted", "AudioChunk"]
    assert taken[2].frames == 2 and worker._joined == {} and worker._progress == {}


def test_while_the_events_are_held_a_cancelled_job_ends_at_once_and_the_others_wait(host, qtbot):
    """Stop while the window holds the events (the writer behind): the render shows stopped at once."""
    host.engine.gate.clear()
    ended: list[api.JobFinished] = []
    started: list[str] = []
    host.job_finished.connect(ended.append)
    host.job_started.connect(lambda e: started.append(e.job_id))
    host.hold(True)
    host.generate(_request("stopped", n=3))
    host.generate(_request("kept", n=1))
    qtbot.waitUntil(lambda: len(host.worker.outbox) == 1)  # the first job's JobStarted, held
    host.cancel("stopped")
    host.engine.gate.set()
    qtbot.waitUntil(lambda: [e.job_id for e in ended] == ["stopped"], timeout=5000)
    assert host.held and ended[0].cancelled and started == ["stopped"]
    qtbot.waitUntil(lambda: len(host.worker.outbox) == 4, timeout=5000)  # the job not cancelled: its events wait
    assert [type(e).__name__ for e in host.worker.outbox] == ["JobStarted", "LineStarted", "_Joined", "JobFinished"]
    assert started == ["stopped"]
    host.hold(False)
    qtbot.waitUntil(lambda: [e.job_id for e in ended] == ["stopped", "kept"], timeout=5000)
    assert started == ["stopped", "kept"]


class FinishingEngine(StubEngine):
    """Finishes each line with a take: audio with values between the 24-bit steps, and one out of range."""

    def generate(self, request, cancel):
        yield api.JobStarted(request.job_id, tuple(line.line_id for line in request.lines))
        for i, line in enumerate(request.lines):
            audio = np.linspace(-1.5, 1.5, 1001, dtype=np.float32) / (i + 1)
            yield api.LineFinished(request.job_id, line.line_id, f"t{i}", np.zeros((10, 2), np.int64), audio, i, "")
        yield api.JobFinished(request.job_id)


def test_a_finished_takes_sound_is_made_on_the_engine_thread_as_its_file_will_hold_it(qtbot, monkeypatch):
    from s2studio.state import take_audio
    from s2studio.worker.finished_take import FinishedTake

    rounded_on: list[int] = []
    peaked_on: list[int] = []
    real, real_peaks = take_audio.rounded, take_audio.peaks_of
    monkeypatch.setattr(take_audio, "rounded", lambda audio: (rounded_on.append(threading.get_ident()), real(audio))[1])
    monkeypatch.setattr(take_audio, "peaks_of",
                        lambda audio: (peaked_on.append(threading.get_ident()), real_peaks(audio))[1])
    engine = FinishingEngine()
    host = EngineHost(lambda: engine)
    got: list[api.LineFinished] = []
    host.line_finished.connect(got.append)
    try:
        with qtbot.waitSignal(host.job_finished, timeout=5000):
            host.generate(_request("j1", 3))
    finally:
        host.shutdown()
    assert [e.take_id for e in got] == ["t0", "t1", "t2"]
    assert all(isinstance(e, FinishedTake) for e in got)
    assert len(rounded_on) == 3 and threading.get_ident() not in rounded_on
    for e in got:  # the same samples the window's thread would have made, and the event's other fields kept
        assert np.array_equal(e.sound.samples(), real(e.audio)) and len(e.sound) == 1001
    assert got[0].audio.max() == 1.5 and got[0].sound.samples().max() < 1.0  # clipped as the file holds it
    peaks = [e.sound.peaks() for e in got]  # what the timeline draws: made with the sound, not here
    assert len(peaked_on) == 3 and threading.get_ident() not in peaked_on
    assert all(np.array_equal(p, real_peaks(e.sound.samples())) for p, e in zip(peaks, got, strict=True))
