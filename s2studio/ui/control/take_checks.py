"""Every finished take checked, off the GUI thread and outside the engine's loop. QtCore only.

The checks run in a process of their own (`checks.process`, started on first use at a lower priority): the
speech recognizer and the voice encoder (torch) never load in the window's process, and a render on the same
cores keeps its speed. One thread here feeds it a take at a time (reading the take's audio there, not on the
GUI thread) and hands each result back through a signal; the result is stored on the take
(`Document.set_check`), so it is saved with the project.

What is checked: every take of a line whose takes changed (a new take, a take restored) that has no result, or
a result made with other settings (`TakeCheck.key` is not `key`); on a project opened or settings changed, every
such take of the project, the picked ones first. Nothing is lost meanwhile: an out-of-date result is shown as it
is until its replacement arrives.
"""

from __future__ import annotations

import logging
import multiprocessing
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

from s2studio.audio import SAMPLE_RATE
from s2studio.audio.asr import AsrSettings
from s2studio.checks.job import CheckJob
from s2studio.checks.settings import CheckSettings, check_key
from s2studio.state.project import Take
from s2studio.state.script import Line
from s2studio.state.take_check import TakeCheck
from s2studio.ui.control.document import Document
from s2studio.ui.control.slices import Slices

log = logging.getLogger(__name__)

NEIGHBOURS = 3
"""Lines of the same speaker on each side whose picked takes' pace a take is compared with."""
ClipsOf = Callable[[str], tuple]
"""Speaker -> the clips of the voice cast for it (`checks.checker.Clip`s), () without one."""


@dataclass(frozen=True)
class _Job:
    take: Take
    text: str
    clips: tuple
    max_frames: int | None
    neighbour_paces: tuple[float, ...]
    key: str
    generation: int
    """Of the project it was queued for (a result for another project is dropped)."""


class TakeChecks(QObject):
    checked = Signal(str, str)
    """(line id, take id): a take's check ended (its result is on it; still None when it could not be checked)."""
    idle = Signal()
    """Nothing is waiting to be checked."""
    _result = Signal(object, object)

    def __init__(self, document: Document, clips_of: ClipsOf, asr: Callable[[], AsrSettings],
                 settings: CheckSettings = CheckSettings(), parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.document, self.clips_of, self.asr, self.settings = document, clips_of, asr, settings
        self.enabled = True
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._pending: set[str] = set()
        self._generation = 0
        self._thread: threading.Thread | None = None
        self._conn = None
        self._process = None
        self._queuing: Slices[Take] = Slices(self._add, self._queued, self)
        """A project's takes queued in slices (a book's 10,000 take a second): the window answers meanwhile."""
        self._key = ""
        """`key` while a project's takes are queued (asked once, not per take)."""
        self._result.connect(self._store)
        document.takes_changed.connect(self.check_line)
        document.replaced.connect(self.check_project)

    @property
    def key(self) -> str:
        if self._queuing.busy and self._key:
            return self._key
        asr = self.asr()
        return check_key(self.settings, asr.model, asr.language)

    @property
    def busy(self) -> bool:
        return bool(self._pending) or self._queuing.busy

    def waiting(self, take: Take) -> bool:
        """Whether the take is waiting to be checked (or being checked)."""
        return take.take_id in self._pending

    def current(self, take: Take) -> bool:
        """Whether the take's result was made with today's checker and thresholds."""
        return take.check is not None and take.check.key == self.key

    # -- what to check ---------------------------------------------------------------------------

    def check_line(self, line_id: str) -> None:
        entry = self.document.project.lines.get(line_id)
        for take in entry.takes if entry is not None else ():
            self._add(take)

    def check_project(self) -> None:
        """Every take without an up-to-date result, the picked ones first (queued in slices, from the next
        pass of the event loop on)."""
        self._generation += 1
        self._pending.clear()
        while True:  # what was queued for the project before is not checked
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._queuing.stop()
        self._key = self.key
        self._queuing.start(self._project_takes(), now=False)

    def _project_takes(self) -> Iterator[Take]:
        entries = list(self.document.project.lines.values())  # lines added meanwhile come by `check_line`
        for picked_only in (True, False):
            for entry in entries:
                for take in tuple(entry.takes):
                    if (take is entry.current) == picked_only:
                        yield take

    def _queued(self) -> None:
        if not self._pending:
            self.idle.emit()

    def set_settings(self, settings: CheckSettings) -> None:
        """New thresholds: every result made with others is made again."""
        self.settings = settings
        self.check_project()

    def _add(self, take: Take) -> None:
        if not self.enabled or take.take_id in self._pending or self.current(take) or take.held:
            return
        self._pending.add(take.take_id)
        max_frames = (take.settings or {}).get("max_frames")
        self._queue.put(_Job(take, take.text, self.clips_of(take.speaker or ""), int(max_frames) if max_frames else None,
                             self.neighbour_paces(take.line_id, take.speaker or ""), self.key, self._generation))
        self._start()

    def neighbour_paces(self, line_id: str, speaker: str) -> tuple[float, ...]:
        """The measured paces of the picked takes of the same speaker's lines around `line_id` (up to
        `NEIGHBOURS` each side), those checked already."""
        script = self.document.script
        line = script.line(line_id)
        if line is None or line.speaker != speaker:
            return ()
        paces = []  # found by walking out from the line, not by listing a book's lines for every take
        for other in _same_speaker(script.lines, line.index, -1, speaker)[::-1] + _same_speaker(
                script.lines, line.index, 1, speaker):
            take = self.document.project.current(other)
            pace = take.check.of("pace") if take is not None and take.check is not None else None
            if pace is not None and pace.value is not None:
                paces.append(pace.value)
        return tuple(paces)

    # -- the checker's process -------------------------------------------------------------------

    def _start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._thread = threading.Thread(target=self._run, name="take checks",
                                         daemon=True)
        self._thread.start()

    def _connect(self, asr: AsrSettings) -> None:
        from s2studio.checks.process import serve  # noqa: PLC0415 - the process's own module, torch-free here

        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        process = context.Process(target=serve, args=(theirs, self.settings, asr), name="s2studio-checks",
                                  daemon=True)
        process.start()
        self._process = process  # only once started: shutdown on the window's thread may join it at any moment
        theirs.close()
        self._conn = ours

    def _run(self) -> None:
        sent_key = ""
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                if self._conn is None or sent_key != job.key:
                    if self._conn is None:
                        self._connect(self.asr())
                    else:
                        self._conn.send(("settings", self.settings, self.asr()))
                    sent_key = job.key
                samples = job.take.audio
                self._conn.send(("check", CheckJob(job.take.take_id, job.take.line_id, job.text, samples, SAMPLE_RATE,
                                                   job.max_frames, job.clips, job.neighbour_paces)))
                kind, _take_id, found = self._conn.recv()
            except (EOFError, OSError, BrokenPipeError) as exc:
                log.warning("the take checker stopped: %s", exc)
                self._conn = None
                kind, found = "failed", f"the checker stopped ({exc}); it starts again with the next take"
            except Exception as exc:  # noqa: BLE001 - one take's failure is reported, the rest go on
                log.exception("checking take %s failed", job.take.take_id)
                kind, found = "failed", str(exc)
            try:
                self._result.emit(job, found if kind == "done" else str(found))
            except RuntimeError:  # the window is gone
                return

    def _store(self, job: _Job, found: TakeCheck | str) -> None:
        if job.generation != self._generation:
            return
        self._pending.discard(job.take.take_id)
        if isinstance(found, str):
            log.warning("take %s not checked: %s", job.take.take_id, found)
        elif found.key == self.key:
            self.document.set_check(job.take, found)
        self.checked.emit(job.take.line_id, job.take.take_id)
        if not self.busy:
            self.idle.emit()

    def shutdown(self) -> None:
        self._queue.put(None)
        if self._conn is not None:
            try:
                self._conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        if self._process is not None:
            self._process.join(5)
            if self._process.is_alive():
                self._process.kill()


def _same_speaker(lines: Sequence[Line], at: int, step: int, speaker: str) -> list[str]:
    """Ids of up to `NEIGHBOURS` lines of `speaker` from `at` on (not `at` itself), going by `step`."""
    found: list[str] = []
    i = at + step
    while 0 <= i < len(lines) and len(found) < NEIGHBOURS:
        if lines[i].speaker == speaker:
            found.append(lines[i].line_id)
        i += step
    return found
