"""The engine's events and the waveform's picture take their turns from the window's one budget a pass: once a
pass has spent it, taking in more events and composing the waveform again wait for the next pass of the event
loop, instead of adding up in one (a take landing, then a repaint of a whole book's waveform). Counted per pass
of the event loop, not timed."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QAbstractEventDispatcher

from s2studio.audio.timeline import Timeline
from s2studio.engine import api
from s2studio.ui.control import slices
from s2studio.ui.control.slices import pass_budget
from s2studio.ui.player import waveform
from s2studio.ui.player.waveform import WaveformView
from s2studio.worker import EngineHost

LINES = 40


class ChunkEngine:
    """A line's start and one chunk of audio a line, as fast as the window takes them."""

    def generate(self, request, cancel):
        yield api.JobStarted(request.job_id, tuple(line.line_id for line in request.lines))
        for line in request.lines:
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
    monkeypatch.setattr(view, "_compose", lambda: passes[-1].append("compose") or composed())

    def landed(event: api.AudioChunk) -> None:
        passes[-1].append("event")
        timeline.set_audio(event.line_id, event.samples)
        view.refresh()

    host = EngineHost(lambda: ChunkEngine())
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
