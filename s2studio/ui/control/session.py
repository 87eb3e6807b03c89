"""Render session: turns engine events into takes on the project and a playable, growing timeline.

The timeline is every line's picked take in script order with a short gap between lines. While a job
runs, the timeline stops at the first line of the job that has not finished yet; that line's audio
streams in chunk by chunk, so the player can follow the render with nothing skipped. Lines before
the live line never move, which keeps the playhead stable while the buffer grows.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict

import numpy as np
from PySide6.QtCore import QObject, Signal

from s2studio.engine import api
from s2studio.state.project import Project, Take
from s2studio.state.script import Line, Script
from s2studio.ui.control.player import PlaybackBuffer
from s2studio.worker import EngineHost

logger = logging.getLogger(__name__)

GAP_SECONDS = 0.4
"""Default silence between lines (`Project.gap_s` holds the project's own, which export uses too)."""
GAP = round(GAP_SECONDS * api.SAMPLE_RATE)

RequestBuilder = Callable[[str, Sequence[Line]], api.SynthesisRequest]
"""(job_id, lines to render) -> the request; raises UserError when the cast is incomplete."""


def staleness_key(line: Line, voice_id: str, project: Project) -> str:
    """What makes a take stale: the line's text and speaker, its voice (with its clips' checksums) and the
    sampling settings. Not the engine's `plan.line_fingerprint`: the editor must judge staleness on every
    keystroke, before any reference codes exist, so this key is computed from what the studio knows."""
    settings = asdict(project.settings)
    if project.settings.seed_mode == "random":
        settings.pop("seed")
    blob = json.dumps([line.speaker, line.text, voice_id, settings], sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


class RenderSession(QObject):
    timeline_changed = Signal()
    """The buffer was rebuilt (boundaries may have moved)."""
    audio_grew = Signal(int)
    """New samples from this offset on (a chunk of the live line)."""
    takes_changed = Signal(str)
    """line_id whose takes or pick changed."""
    busy_changed = Signal(bool)
    line_started = Signal(str)
    stats = Signal(object)
    """`api.Progress` of the running job."""
    failed = Signal(str)
    finished = Signal(bool)
    """A render job ended; True when it was cancelled."""

    def __init__(self, host: EngineHost, project: Project, buffer: PlaybackBuffer,
                 builder: RequestBuilder, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.project = project
        self.buffer = buffer
        self.builder = builder
        self.script: Script | None = None
        self.boundaries: list[tuple[str, int, int]] = []
        self.job_id: str | None = None
        self._pending: list[str] = []
        self._live: str | None = None
        self._live_offset = 0
        self._live_chunks: list[tuple[int, np.ndarray]] = []
        self.plan: tuple[str, ...] = ()
        self.done_lines = 0
        self.voice_key: Callable[[str], str] = lambda voice_id: voice_id
        """What a cast voice id stands for in a take's fingerprint; RenderFlow adds the voice's clips."""
        host.job_started.connect(self._on_job_started)
        host.line_started.connect(self._on_line_started)
        host.audio_chunk.connect(self._on_chunk)
        host.line_finished.connect(self._on_line_finished)
        host.progress.connect(self._on_progress)
        host.job_finished.connect(self._on_job_finished)
        host.job_failed.connect(self._on_job_failed)

    # -- queries ---------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self.job_id is not None

    @property
    def gap(self) -> int:
        """Samples of silence between lines: the project's gap, rounded as `audio.timeline` rounds it, so
        the player's timeline and an export place every line at the same sample."""
        return round(self.project.gap_s * api.SAMPLE_RATE)

    def voice_of(self, line: Line) -> str:
        return self.voice_key(self.project.cast.get(line.speaker, ""))

    def is_stale(self, line: Line) -> bool:
        take = self.project.current(line.line_id)
        return take is None or take.fingerprint != staleness_key(line, self.voice_of(line), self.project)

    def stale_lines(self) -> list[Line]:
        return [ln for ln in (self.script.lines if self.script else ()) if self.is_stale(ln)]

    def line_at(self, sample: int) -> str | None:
        for line_id, start, end in self.boundaries:
            if start <= sample < end + self.gap:
                return line_id
        return None

    def start_of(self, line_id: str) -> int | None:
        return next((start for lid, start, _ in self.boundaries if lid == line_id), None)

    # -- commands --------------------------------------------------------------------------------

    def set_script(self, script: Script) -> None:
        """Called after every edit (debounced): the timeline is laid out again only when the list of
        line ids changes (a line's text, speaker or order), not for headings, blank lines or
        warnings, so typing in a long project does not copy its audio on every keystroke."""
        before = tuple(ln.line_id for ln in self.script.lines) if self.script else None
        self.script = script
        if not self.busy and tuple(ln.line_id for ln in script.lines) != before:
            self.rebuild()

    def set_project(self, project: Project) -> None:
        self.cancel()
        self.project = project
        self.rebuild()

    def render(self, lines: Sequence[Line]) -> str | None:
        """Start rendering `lines` (in script order). Raises UserError from the builder."""
        if self.busy or not lines:
            return None
        job_id = self.host.new_job_id("render")
        request = self.builder(job_id, lines)
        self.job_id = job_id
        self._pending = [ln.line_id for ln in lines]
        self.plan = tuple(self._pending)
        self.done_lines = 0
        self._live, self._live_chunks = None, []
        self.buffer.growing = True
        self.rebuild()
        self.host.generate(request)
        self.busy_changed.emit(True)
        return job_id

    def cancel(self) -> None:
        if self.job_id is not None:
            self.host.cancel(self.job_id)

    def pick(self, line_id: str, index: int) -> None:
        self.project.pick(line_id, index)
        self.takes_changed.emit(line_id)
        if not self.busy:
            self.rebuild()

    def rebuild(self) -> None:
        """Lay out the timeline from the picked takes (up to the first unfinished line of a job)."""
        pos, gap = 0, self.gap
        bounds: list[tuple[str, int, int]] = []
        self.buffer.length = 0
        pending = set(self._pending)
        for line in self.script.lines if self.script else ():
            if line.line_id in pending:
                if line.line_id == self._live:
                    if pos:
                        pos += gap
                        self.buffer.set_length(pos)
                    self._live_offset = pos
                    end = pos
                    for start, samples in self._live_chunks:
                        self.buffer.write(pos + start, samples)
                        end = max(end, pos + start + len(samples))
                    bounds.append((line.line_id, pos, end))
                break
            take = self.project.current(line.line_id)
            if take is None or len(take.audio) == 0:
                continue
            if pos:
                self.buffer.set_length(pos + gap)
                pos += gap
            self.buffer.write(pos, take.audio)
            bounds.append((line.line_id, pos, pos + len(take.audio)))
            pos += len(take.audio)
        self.boundaries = bounds
        self.timeline_changed.emit()

    # -- engine events ---------------------------------------------------------------------------

    def _mine(self, event: object) -> bool:
        return getattr(event, "job_id", None) == self.job_id and self.job_id is not None

    def _on_job_started(self, event: api.JobStarted) -> None:
        if self._mine(event):
            self.plan = event.plan

    def _on_line_started(self, event: api.LineStarted) -> None:
        if not self._mine(event):
            return
        self._live, self._live_chunks = event.line_id, []
        if event.line_id in self._pending:  # render order = script order, so it is the first pending
            self._pending = self._pending[self._pending.index(event.line_id):]
        self.rebuild()
        self.line_started.emit(event.line_id)

    def _on_chunk(self, event: api.AudioChunk) -> None:
        if not self._mine(event) or event.line_id != self._live:
            return
        self._live_chunks.append((event.start_sample, event.samples))
        start = self._live_offset + event.start_sample
        self.buffer.write(start, event.samples)
        lid, s, e = self.boundaries[-1]
        self.boundaries[-1] = (lid, s, max(e, start + len(event.samples)))
        self.audio_grew.emit(start)

    def _on_line_finished(self, event: api.LineFinished) -> None:
        if not self._mine(event) or self.script is None:
            return
        line = self.script.line(event.line_id)
        if line is None:  # the text changed while it rendered: keep nothing that no line owns
            return
        fp = staleness_key(line, self.voice_of(line), self.project)
        self.project.add_take(Take(event.take_id, event.line_id, line.text, event.audio, event.codes,
                                   event.seed, fp))
        self.done_lines += 1
        if event.line_id in self._pending:
            self._pending.remove(event.line_id)
        self._live, self._live_chunks = None, []
        self.rebuild()
        self.takes_changed.emit(event.line_id)

    def _on_progress(self, event: api.Progress) -> None:
        if self._mine(event):
            self.stats.emit(event)

    def _end(self) -> None:
        self.job_id = None
        self._pending, self._live, self._live_chunks = [], None, []
        self.buffer.growing = False
        self.rebuild()
        self.busy_changed.emit(False)

    def _on_job_finished(self, event: api.JobFinished) -> None:
        if self._mine(event):
            self._end()
            self.finished.emit(event.cancelled)

    def _on_job_failed(self, event: api.JobFailed) -> None:
        if self._mine(event):
            self._end()
            self.failed.emit(event.error)
