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

A book opened queues its 10,000 takes: they are listed from plain data (a take's result and key), `LINES_A_STEP`
lines at a time in slices between which the window keeps answering (`Slices`; a small part of each pass, the
project's text, timeline and lines' states being shown meanwhile), and what checking one needs (its
voice's clips, its neighbours' paces) is worked out only when it is next, a job or two ahead of the checker
(`AHEAD`), so queuing a book costs the window's thread milliseconds, not seconds.
"""

from __future__ import annotations

import logging
import multiprocessing
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

from s2studio import priority
from s2studio.audio import SAMPLE_RATE
from s2studio.audio.asr import AsrSettings
from s2studio.checks.job import CheckJob
from s2studio.checks.settings import CheckSettings, check_key
from s2studio.state.project import Take
from s2studio.state.take_check import TakeCheck
from s2studio.ui.control.document import Document
from s2studio.ui.control.slices import Slices

log = logging.getLogger(__name__)

NEIGHBOURS = 3
"""Lines of the same speaker on each side whose picked takes' pace a take is compared with."""
ClipsOf = Callable[[str], tuple]
"""Speaker -> the clips of the voice cast for it (`checks.checker.Clip`s), () without one."""
AHEAD = 2
"""Jobs handed to the checker's thread before their results came back: one checked, one ready to send."""
LINES_A_STEP = 250
"""Lines whose takes a step of a project's listing reads (`check_project`)."""
LISTING_BUDGET_S = 0.002
"""The CPU time a pass gives the listing at most: the rest of the pass's budget goes to what the window shows."""
STOP_GRACE_S = 0.3
"""How long closing waits for the checker's process to finish on its own: it stops between two checks, and one
check can take seconds. It writes nothing (its results come back over the pipe), so past this it is ended, not
waited for: a person closing the window does not wait for a check whose result nobody will read."""


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
        """Jobs for the checker's thread: at most `AHEAD` of this project's at a time."""
        self._waiting: deque[Take] = deque()
        """Takes to check, in order, not handed to the thread yet (their jobs are made when they are next)."""
        self._sent = 0
        """This project's jobs handed to the thread whose results have not come back."""
        self._pending: set[str] = set()
        """Ids of the takes waiting or being checked."""
        self._generation = 0
        self._thread: threading.Thread | None = None
        self._conn = None
        self._process = None
        self._listing: Slices[list[Take]] = Slices(self._wait_for, self._listed, self, budget_s=LISTING_BUDGET_S)
        """A project's takes are listed in slices from the next pass of the event loop on (`check_project`)."""
        self._result.connect(self._store)
        document.takes_changed.connect(self.check_line)
        document.replaced.connect(self.check_project)

    @property
    def key(self) -> str:
        asr = self.asr()
        return check_key(self.settings, asr.model, asr.language)

    @property
    def busy(self) -> bool:
        return bool(self._pending) or self._listing.busy

    def waiting(self, take: Take) -> bool:
        """Whether the take is waiting to be checked (or being checked)."""
        return take.take_id in self._pending

    def current(self, take: Take, key: str | None = None) -> bool:
        """Whether the take's result was made with today's checker and thresholds (`key`: `self.key`, asked once
        by a caller that asks for many takes)."""
        return take.check is not None and take.check.key == (self.key if key is None else key)

    # -- what to check ---------------------------------------------------------------------------

    def check_line(self, line_id: str) -> None:
        entry = self.document.project.lines.get(line_id)
        if entry is not None and self.enabled:
            self._wait_for([take for take in entry.takes if self._wanted(take, self.key)])

    def check_project(self) -> None:
        """Every take without an up-to-date result, the picked ones first (listed from the next pass of the event
        loop on: the project's takes are read as they are then)."""
        self._generation += 1
        self._pending.clear()
        self._waiting.clear()
        self._sent = 0
        while True:  # what was queued for the project before is not checked
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._listing.start(self._project_takes(), now=False)

    def _project_takes(self) -> Iterator[list[Take]]:
        """The project's takes to check, `LINES_A_STEP` lines' at a time: every line's picked take, then the
        others of lines with more than one (`_wanted`, written out: it runs for every take of a book)."""
        if not self.enabled:
            return
        key, pending = self.key, self._pending
        entries = list(self.document.project.lines.values())
        for picked in (True, False):
            for at in range(0, len(entries), LINES_A_STEP):
                lines = [(entry.current, entry.takes) for entry in entries[at:at + LINES_A_STEP]]
                yield [take for current, takes in lines
                       for take in ((current,) if picked else takes if len(takes) > 1 else ())
                       if take is not None and (take is current) == picked and not take.held
                       and take.take_id not in pending and (take.check is None or take.check.key != key)]

    def _listed(self) -> None:
        if not self._pending:
            self.idle.emit()

    def set_settings(self, settings: CheckSettings) -> None:
        """New thresholds: every result made with others is made again."""
        self.settings = settings
        self.check_project()

    def _wanted(self, take: Take, key: str) -> bool:
        return self.enabled and take.take_id not in self._pending and not self.current(take, key) and not take.held

    def _wait_for(self, takes: list[Take]) -> None:
        """Queue these takes (each wanted, once) after those waiting."""
        self._pending.update(take.take_id for take in takes)
        self._waiting.extend(takes)
        self._send()

    def _send(self) -> None:
        """Make the jobs of the next waiting takes while fewer than `AHEAD` are with the thread."""
        key = ""
        while self._sent < AHEAD and self._waiting:
            take = self._waiting.popleft()
            key = key or self.key
            max_frames = (take.settings or {}).get("max_frames")
            self._queue.put(_Job(take, take.text, self.clips_of(take.speaker or ""),
                                 int(max_frames) if max_frames else None,
                                 self.neighbour_paces(take.line_id, take.speaker or ""), key, self._generation))
            self._sent += 1
        if key:
            self._start()

    def neighbour_paces(self, line_id: str, speaker: str) -> tuple[float, ...]:
        """The measured paces of the picked takes of the same speaker's lines around `line_id` (up to
        `NEIGHBOURS` each side), those checked already."""
        script = self.document.script
        line = script.line(line_id)
        if line is None or line.speaker != speaker:
            return ()
        paces = []  # found by walking out from the line, not by listing a book's lines for every take
        speakers, ids = script.line_speakers, script.line_ids
        for other in _same_speaker(speakers, ids, line.index, -1, speaker)[::-1] + _same_speaker(
                speakers, ids, line.index, 1, speaker):
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
        priority.background()  # (the checker's process, started from this thread, too)
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
        self._sent -= 1
        self._pending.discard(job.take.take_id)
        self._send()
        if isinstance(found, str):
            log.warning("take %s not checked: %s", job.take.take_id, found)
        elif found.key == self.key:
            self.document.set_check(job.take, found)
        self.checked.emit(job.take.line_id, job.take.take_id)
        if not self.busy:
            self.idle.emit()

    def shutdown(self) -> None:
        self._listing.stop()
        self._queue.put(None)
        if self._conn is not None:
            try:
                self._conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        if self._process is not None:
            self._process.join(STOP_GRACE_S)
            if self._process.is_alive():
                self._process.kill()
                self._process.join(5)


def _same_speaker(speakers: Sequence[str], ids: Sequence[str], at: int, step: int, speaker: str) -> list[str]:
    """Ids of up to `NEIGHBOURS` lines of `speaker` from `at` on (not `at` itself), going by `step` (`speakers`,
    `ids`: the script's, line by line)."""
    found: list[str] = []
    i = at + step
    while 0 <= i < len(speakers) and len(found) < NEIGHBOURS:
        if speakers[i] == speaker:
            found.append(ids[i])
        i += step
    return found
