"""Render session: engine events become takes on the document and audio on the one timeline. QtCore only.

The timeline holds every script line's picked take, in script order (`Document` says when lines or
picks change). While a job runs:

- a line with no audio after it on the timeline streams in, chunk by chunk, so the player can follow
  the render (`Timeline.begin_stream`);
- a line that already has a take keeps playing its old take until the new one is finished, which then
  replaces it in one swap that moves only the lines after it. Chosen over streaming the new take in its
  place because streaming there would move every later line on every chunk (the playhead would jump,
  and each chunk would cost the whole project), and the person comparing takes hears a whole take,
  never half of one;
- every other line stays on the timeline, audible and unchanged.

A take records what the line was when it was asked (`RenderJob.asked`), not what it is when the take
arrives, so a line edited during its own render gets a take that is already stale, and a line deleted
during it keeps the take (Undo brings both back).

A render is one or more engine jobs at once (`RenderJob.pieces`: its scenes, and its takes of the same lines,
`engine.plan.plan_pieces`): the engine runs them side by side, each line's take lands where the line is as it
finishes, and only the one line that may grow at the end of the timeline streams (from one job). The render ends
when its last job has; a failing job stops the others. Only its first job is compiled (`RenderJob.compile`) and
handed to the engine at once; the others follow in slices of the next passes of the event loop (`Slices`): a
book's 200 scenes are compiled and queued while its first line is already rendering.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from PySide6.QtCore import QObject, Signal

from s2studio.audio.layout import LineAudio
from s2studio.audio.timeline import Timeline
from s2studio.engine import api
from s2studio.engine.plan import Piece
from s2studio.engine.render import Render
from s2studio.state.project import Project, Take, now_iso
from s2studio.state.script import Line
from s2studio.state.staleness import take_fingerprint
from s2studio.ui.control import heap
from s2studio.ui.control.document import Document
from s2studio.ui.control.pace import Pace
from s2studio.ui.control.slices import Slices, pass_budget
from s2studio.worker import EngineHost
from s2studio.worker.finished_take import FinishedTake

ORDER_SOON_LINES = 1000
"""A script of this many lines or more has the timeline follow its new order a pass after the change."""

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Asked:
    """What one line's take is asked for: what the take will record (`state.staleness`)."""

    speaker: str
    text: str
    voice: str
    settings: dict[str, Any] = field(hash=False)


@dataclass(frozen=True)
class RenderJob:
    job_id: str
    lines: tuple[Line, ...]
    """The lines asked for, in render order."""
    takes: int
    """Takes of each line."""
    asked: Mapping[str, Asked] = field(hash=False)
    """line id -> what its take is asked for."""
    pieces: tuple[Piece, ...]
    """The render jobs the engine runs side by side (scenes, takes: `plan.plan_pieces`), in order."""
    compile: Callable[[Piece], Render] = field(hash=False)
    """A piece's render job, compiled when it is handed to the engine."""


def lora_switch_message(speaker: str, seconds: float) -> str:
    """What the status bar says when a line's render began by changing the model's LoRA weights."""
    whose = f"{speaker}'s line" if speaker else "this line"
    return f"Switched the model's LoRA for {whose} in {seconds:.2f} s."


class _PickedAudio:
    """Each line's picked take's audio, looked up as the timeline lays the line out (not a book's takes at once)."""

    def __init__(self, project: Project) -> None:
        self.project = project

    def get(self, line_id: str, /) -> LineAudio | None:
        take = self.project.current(line_id)
        return take.sound if take is not None else None

    def keys(self) -> Collection[str]:
        """The lines with takes (the others have no audio)."""
        return self.project.lines.keys()


class RenderSession(QObject):
    timeline_changed = Signal()
    """Lines on the timeline moved, appeared or went (read `timeline.layout`)."""
    audio_grew = Signal(int)
    """The streaming line grew: new samples from this timeline sample on."""
    rendering_changed = Signal(tuple)
    """These lines started or stopped rendering (all of a job's lines once when it starts, one line as it
    finishes, the unfinished ones when it ends): views read `rendering` for the lines they show."""
    busy_changed = Signal(bool)
    progress = Signal(object)
    """`api.Progress` of the running job."""
    failed = Signal(str)
    lora_switched = Signal(str)
    """A line's render began by changing the model's LoRA: the sentence that says for whom and how long it took."""
    finished = Signal(bool)
    """A render job ended; True when it was cancelled."""

    def __init__(self, host: EngineHost, document: Document, timeline: Timeline,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.host = host
        host.deliver_in_turns(pass_budget().ask)  # a pass that takes in events leaves the rest of the budget to others
        self.document = document
        self.timeline = timeline
        self.job: RenderJob | None = None
        self.job_id: str | None = None
        """The render's id (its request's); its engine jobs are `running`."""
        self.running: set[str] = set()
        """The render's engine jobs not ended yet (handed to the engine or still to be)."""
        self.unsent: dict[str, Piece] = {}
        """The render's jobs still to be handed to the engine (by `_sender`, a slice a pass), in order."""
        self._sender: Slices[Piece] = Slices(self._send, parent=self)
        self.pending: dict[str, int] = {}
        """Line ids of the render not finished yet, in render order, each with the takes still to come (a dict: a
        membership test for any line of a 10,000-line job is one lookup)."""
        self._streamer: dict[str, str] = {}
        """line id -> the job whose take of it streams onto the timeline (one per line)."""
        self._open: dict[str, None] = {}
        """The lines of `_streamer` whose stream has not been ended here, in the order they began: the partial lines
        of the timeline, which a job's end and the render's look at (not every line of a book)."""
        self._cancelled = False
        self._error = ""
        self.live: str | None = None
        """The line the engine is rendering now."""
        self._project: Project | None = None
        """The project the running job renders for: its takes never land in another one opened meanwhile.
        None between jobs, so that a project closed since does not stay in memory with all its audio."""
        self.done_lines = 0
        self.pace = Pace()
        """The running (or last) job's speed, ETA and the playback lead it needs."""
        host.line_started.connect(self._on_line_started)
        host.audio_chunk.connect(self._on_chunk)
        host.line_finished.connect(self._on_line_finished)
        host.progress.connect(self._on_progress)
        host.job_finished.connect(self._on_job_finished)
        host.job_failed.connect(self._on_job_failed)
        document.script_changed.connect(self._script_changed)
        document.takes_changed.connect(self._takes_changed)
        document.replaced.connect(self._replaced)
        self._relayout_due = False
        """Another project is open and its timeline not laid out yet (the window does it a pass later, `relayout`;
        anything here that touches the timeline before then lays it out first)."""
        self._laying: Slices[int] = Slices(lambda _lines: None, done=self._laid_out, parent=self)
        """The timeline being laid out, a slice of lines a pass (`Timeline.lay_out`)."""
        self._landed_while_laying: set[str] = set()
        """Lines whose take changed while the timeline was being laid out: placed once it is (`_takes_changed`)."""
        self._order_due = False
        """A book's lines changed order and the timeline follows a pass later (as `_relayout_due`)."""
        self.relayout()

    @property
    def busy(self) -> bool:
        return self.job_id is not None

    def rendering(self, line_id: str) -> bool:
        return line_id in self.pending

    # -- the timeline follows the document -------------------------------------------------------

    def _picked_audio(self) -> _PickedAudio:
        return _PickedAudio(self.document.project)

    def _replaced(self) -> None:
        self._relayout_due = True

    def lay_out_if_due(self) -> None:
        """Start laying out the timeline of a project just opened, or have it follow a book's new order, unless
        that is done already."""
        if self._relayout_due:
            self.relayout()
        elif self._order_due:
            self._follow_order()

    def lay_out_now(self) -> None:
        """The timeline of the project as it is, whole, now: for what plays it in this pass (Play pressed before
        the window's passes have laid out a project just opened would play the last project's audio)."""
        self.lay_out_if_due()
        self._laying.finish()

    def relayout(self) -> None:
        """Every line's picked take, laid out again (a project opened, the gap changed): a slice of lines a pass
        of the event loop, `timeline_changed` when the layout is in place (and now: the timeline is empty until
        then). Whatever changes or asks the timeline meanwhile (a take, an edit, the player) lays out the rest at
        once (`Timeline.lay_out`)."""
        self._relayout_due = self._order_due = False
        steps = self.timeline.lay_out(self.document.script.line_ids, self._picked_audio())
        self.timeline.set_gap(self.document.project.gap_s)
        self.timeline_changed.emit()
        self._laying.start(steps, now=False)

    def _script_changed(self, order_changed: bool) -> None:
        self.lay_out_if_due()
        if not order_changed:
            return
        if len(self.document.script.lines) >= ORDER_SOON_LINES:  # a book's: a pass later, not in the parse's pass
            self._order_due = True
            pass_budget().ask(self._order_turn)
        else:
            self._follow_order()

    def _order_turn(self, _until: float) -> None:
        if self._order_due:
            self._follow_order()

    def _follow_order(self) -> None:
        """Lines added, deleted, moved or back (Undo): audio stays with its line."""
        self._order_due = False
        self.timeline.set_order(self.document.script.line_ids, self._picked_audio())
        self.timeline_changed.emit()

    def _laid_out(self) -> None:
        landed, self._landed_while_laying = self._landed_while_laying, set()
        for line_id in landed:
            self._place_take(line_id)
        self.timeline_changed.emit()

    def _takes_changed(self, line_id: str) -> None:
        """A line's picked take changed, or only its check or notes. While the timeline is being laid out (a book
        just opened) the line waits for the layout's end: the layout reads each line's picked take when it gets
        there, and placing one now would lay out the whole book in this pass, as a check result a second does for
        minutes after a book is opened."""
        self.lay_out_if_due()
        if self._laying.busy:
            self._landed_while_laying.add(line_id)
            return
        if self._place_take(line_id):
            self.timeline_changed.emit()

    def _place_take(self, line_id: str) -> bool:
        """The line's picked take on the timeline; True when the layout changed."""
        if line_id not in self.timeline:
            return False  # a line not in the script (deleted while it rendered): its take is kept, not placed
        take = self.document.project.current(line_id)
        audio = take.sound if take is not None else None
        layout = self.timeline.layout
        if self.timeline.partial(line_id):
            self.timeline.end_stream(line_id, audio)
            self._open.pop(line_id, None)
        else:
            self.timeline.set_audio(line_id, audio)
        return self.timeline.layout is not layout  # not when only the take's check or notes changed

    # -- commands --------------------------------------------------------------------------------

    def start(self, job: RenderJob) -> None:
        """Hand a built request to the engine (`RenderFlow` builds it)."""
        if self.busy:
            raise RuntimeError("a render is already running")
        self.lay_out_if_due()
        self.job, self.job_id = job, job.job_id
        self._project = self.document.project
        line_ids = list(map(attrgetter("line_id"), job.lines))  # a book's 10,000: no Python loop a line here
        self.pending = dict.fromkeys(line_ids, job.takes)
        self.running = {piece.job_id for piece in job.pieces}
        self._streamer, self._open, self._cancelled, self._error = {}, {}, False, ""
        self.live, self.done_lines = None, 0
        self.pace = Pace(dict(zip(line_ids, map(len, map(attrgetter("text"), job.lines)))), started=time.monotonic())
        first, *rest = job.pieces
        self.unsent = {piece.job_id: piece for piece in rest}
        self._send(first)
        self._sender.start(rest, now=False)
        heap.keep()  # the book shown (a paste's, not frozen yet): no full collection in the render walks it again
        self.busy_changed.emit(True)
        self.rendering_changed.emit(tuple(self.pending))

    def _send(self, piece: Piece) -> None:
        self.unsent.pop(piece.job_id, None)
        if self.job is not None:
            self.host.submit(piece.job_id, self.job.compile(piece).work)

    def cancel(self) -> None:
        unsent, self.unsent = list(self.unsent), {}
        self._sender.stop()
        for job_id in list(self.running):
            if job_id not in unsent:
                self.host.cancel(job_id)
        if unsent:  # never handed over: they end here
            self._cancelled = True
            self.running.difference_update(unsent)
            if not self.running and self.busy:
                error = self._error
                self._end()
                if error:
                    self.failed.emit(error)
                else:
                    self.finished.emit(True)

    # -- engine events ---------------------------------------------------------------------------

    def _mine(self, event: Any) -> bool:
        return event.job_id in self.running

    def _for_this_project(self, event: Any) -> bool:
        """An event of the running job while the project it renders for is still open."""
        return self._mine(event) and self.document.project is self._project

    def _on_line_started(self, event: api.LineStarted) -> None:
        if not self._for_this_project(event):
            return
        self.live = event.line_id
        if event.lora_switch_s is not None:
            asked = self.job.asked.get(event.line_id) if self.job is not None else None
            self.last_lora_switch_s = event.lora_switch_s
            self.lora_switched.emit(lora_switch_message(asked.speaker if asked else "", event.lora_switch_s))
        if event.line_id not in self._streamer and self.timeline.begin_stream(event.line_id):
            self._streamer[event.line_id] = event.job_id
            self._open[event.line_id] = None
            self.timeline_changed.emit()

    def _on_chunk(self, event: api.AudioChunk) -> None:
        if not self._for_this_project(event) or self._streamer.get(event.line_id) != event.job_id:
            return  # a held line (its old take plays on), another take of a streaming line, or a line gone
        if not self.timeline.streaming(event.line_id):
            return
        self.audio_grew.emit(self.timeline.append(event.line_id, event.start_sample, event.samples))

    def _on_line_finished(self, event: api.LineFinished) -> None:
        if not self._for_this_project(event) or self.job is None:
            return
        asked = self.job.asked[event.line_id]
        left = self.pending.get(event.line_id, 1) - 1
        if left > 0:
            self.pending[event.line_id] = left
        else:
            self.pending.pop(event.line_id, None)
        if self.live == event.line_id:
            self.live = None
        self.done_lines += 1
        sound = event.sound if isinstance(event, FinishedTake) else None  # made on the engine thread
        self.document.add_take(Take(event.take_id, event.line_id, asked.text, event.audio, event.codes, event.seed,
                                    take_fingerprint(asked.text, asked.speaker, asked.voice, asked.settings),
                                    speaker=asked.speaker, voice=asked.voice, settings=_with_backend(asked.settings, event),
                                    created=now_iso(), sound=sound))
        if left <= 0:
            self.rendering_changed.emit((event.line_id,))

    def _on_progress(self, event: api.Progress) -> None:
        if self._mine(event):
            self.pace.update(time.monotonic(), event.line_id, event.frames, event.expected, event.rtf)
            self.progress.emit(event)

    def _end(self) -> None:
        for line_id in list(self._open):
            if self.timeline.partial(line_id):  # cancelled or failed half-way: no take, no audio
                self.timeline.end_stream(line_id, None)
                self.timeline_changed.emit()
        pending, self.pending = self.pending, {}
        self.job = self.job_id = self.live = self._project = None
        self.running, self._streamer, self._open = set(), {}, {}
        if pending:
            self.rendering_changed.emit(tuple(pending))
        heap.keep()  # the takes made live as long as the project: the next full collection (a save's) skips them
        self.busy_changed.emit(False)

    def _job_ended(self, job_id: str) -> bool:
        """One of the render's jobs ended; True when it was the last."""
        self.running.discard(job_id)
        for line_id in [k for k in self._open if self._streamer.get(k) == job_id]:
            if self.timeline.partial(line_id) and line_id in self.pending:
                self.timeline.end_stream(line_id, None)  # its take did not come: the line stops growing
                self._open.pop(line_id, None)
                self.timeline_changed.emit()
        return not self.running

    def _on_job_finished(self, event: api.JobFinished) -> None:
        if self._mine(event):
            self._cancelled = self._cancelled or event.cancelled
            if self._job_ended(event.job_id):
                error, cancelled = self._error, self._cancelled
                self._end()
                if error:
                    self.failed.emit(error)
                else:
                    self.finished.emit(cancelled)

    def _on_job_failed(self, event: api.JobFailed) -> None:
        if self._mine(event):
            self._error = self._error or event.error
            self.cancel()  # the render's other jobs stop too
            if self._job_ended(event.job_id):
                self._end()
                self.failed.emit(self._error)


def _with_backend(settings: dict, event: api.LineFinished) -> dict:
    """The take's settings, with the engine that made it when that was not this computer alone."""
    made = dict(settings)
    if event.backend is not None:
        made["backend"] = event.backend.describe()
    return made
