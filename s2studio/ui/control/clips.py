"""The work behind the new-voice dialog, off the GUI thread: finding the speech in a clip (for its trim),
splitting a long recording at its pauses, and transcribing a clip (the model downloaded on first use).

One worker thread (`ui.control.background`) takes the jobs in order, analyses before transcripts so the
trims show first; each result names the clip it is for (a key) and the clip's generation, so a result that
arrives after the clip changed (its trim moved, it was removed) is dropped by the dialog. `cancel` stops the
running job (a download mid-file, a transcript between Whisper's windows) and forgets the queued ones.
QtCore only.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
from PySide6.QtCore import QObject, Signal

from s2studio.audio.asr import AsrSettings, transcribe
from s2studio.audio.clip_prep import speech_span, split_spans
from s2studio.errors import Cancelled, UserError
from s2studio.ui.control.background import Background

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Job:
    kind: str
    """"analyse", "split" or "transcribe"."""
    key: int
    generation: int
    mono: np.ndarray
    rate: int
    settings: AsrSettings | None = None


def _emit(signal: Any, *args: object) -> None:
    """Emit from the worker; once the owner is deleted (its window closed) the work is pointless: stop."""
    try:
        signal.emit(*args)
    except RuntimeError:
        raise Cancelled() from None


class ClipJobs(QObject):
    analysed = Signal(int, int, object)
    """(clip key, generation, the speech `Span` or None when there is none)."""
    split = Signal(int, int, object)
    """(clip key, generation, list of `Span`s)."""
    transcribed = Signal(int, int, object)
    """(clip key, generation, `Transcript`)."""
    failed = Signal(int, int, str, str)
    """(clip key, generation, job kind, one line for the person)."""
    progress = Signal(int, float, str)
    """(clip key, 0..1, what is happening: "Transcribing…", "Downloading … 34 of 145 MB")."""
    busy_changed = Signal(bool)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._task = Background("clip-jobs", self)
        self._task.done.connect(self._finished)
        self._lock = threading.Lock()
        self._jobs: deque[Job] = deque()
        self.current: Job | None = None

    @property
    def busy(self) -> bool:
        return self._task.running

    @property
    def stop_event(self) -> threading.Event:
        """Set it to stop the running job: for owners that go away without a Qt call (a closing window)."""
        return self._task.cancel

    def pending(self, kind: str | None = None) -> list[tuple[int, int]]:
        """(key, generation) of the queued and running jobs (of `kind`)."""
        with self._lock:
            jobs = list(self._jobs) + ([self.current] if self.current is not None else [])
        return [(j.key, j.generation) for j in jobs if kind is None or j.kind == kind]

    def analyse(self, key: int, generation: int, mono: np.ndarray, rate: int) -> None:
        self._add(Job("analyse", key, generation, mono, rate), first=True)

    def split_long(self, key: int, generation: int, mono: np.ndarray, rate: int) -> None:
        self._add(Job("split", key, generation, mono, rate), first=True)

    def transcribe(self, key: int, generation: int, mono: np.ndarray, rate: int, settings: AsrSettings) -> None:
        with self._lock:  # a clip has one transcript in the queue: the newest
            self._jobs = deque(j for j in self._jobs if not (j.kind == "transcribe" and j.key == key))
        self._add(Job("transcribe", key, generation, mono, rate, settings))

    def forget(self, key: int) -> None:
        """Drop the queued jobs of a clip (removed from the dialog); a running one's result is dropped."""
        with self._lock:
            self._jobs = deque(j for j in self._jobs if j.key != key)

    def cancel(self) -> None:
        """Stop the running job and forget the queue."""
        with self._lock:
            self._jobs.clear()
        if self._task.running:
            self._task.cancel.set()

    def wait(self) -> None:
        """Block until the worker ends (a dialog closing: it cancelled first, so this is short)."""
        self._task.wait()

    def _add(self, job: Job, first: bool = False) -> None:
        with self._lock:
            if first:  # analyses go before transcripts, in the order asked
                at = next((i for i, j in enumerate(self._jobs) if j.kind == "transcribe"), len(self._jobs))
                self._jobs.insert(at, job)
            else:
                self._jobs.append(job)
        self._start()

    def _start(self) -> None:
        if not self._task.running and self._jobs:
            self._task.start(self._run)
            self.busy_changed.emit(True)

    def _run(self, task: Background) -> None:
        while True:
            with self._lock:
                if not self._jobs:
                    self.current = None
                    return
                job = self.current = self._jobs.popleft()
            if task.cancel.is_set():
                raise Cancelled()
            self._one(job, task.cancel)

    def _one(self, job: Job, cancel: threading.Event) -> None:
        try:
            if job.kind == "analyse":
                _emit(self.analysed, job.key, job.generation, speech_span(job.mono, job.rate))
            elif job.kind == "split":
                _emit(self.split, job.key, job.generation, split_spans(job.mono, job.rate))
            else:
                assert job.settings is not None
                result: Any = transcribe(job.mono, job.rate, job.settings, cancel,
                                         lambda f, m: _emit(self.progress, job.key, f, m))
                _emit(self.transcribed, job.key, job.generation, result)
        except Cancelled:
            raise
        except UserError as exc:
            _emit(self.failed, job.key, job.generation, job.kind, str(exc))
        except Exception as exc:  # noqa: BLE001 - one clip's failure never stops the others
            logger.exception("%s of clip %s failed", job.kind, job.key)
            _emit(self.failed, job.key, job.generation, job.kind, f"{job.kind} failed ({type(exc).__name__}: {exc})")

    def _finished(self, _result: object, _error: str) -> None:
        with self._lock:
            self.current = None
            more = bool(self._jobs)
        if more:
            self._start()
        else:
            self.busy_changed.emit(False)
