"""The one way the window runs work off the GUI thread (hashing clips, exports, downloads): a plain thread
per task whose `progress` and `done` arrive on the GUI thread as queued signals. QtCore only.

Engine work never goes here: it belongs to the engine thread (`worker.EngineHost`)."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from s2studio import priority
from s2studio.errors import Cancelled, UserError

__all__ = ["Background", "Cancelled"]
"""`Cancelled` (from `s2studio.errors`) raised inside a task ends it with the message "Cancelled."."""

logger = logging.getLogger(__name__)

KEEP_S = 5.0
"""How long a kept thread (`keep_thread`) waits for its next task before it ends."""


class Background(QObject):
    """Runs one function at a time on a plain thread."""

    progress = Signal(float, str)
    done = Signal(object, str)
    """(result or None, error message or ""): a UserError's message, "Cancelled.", or the exception's
    type and message (the traceback goes to the log)."""

    _ended = Signal(object, str)
    """From the task's thread; `done` is emitted from it on the GUI thread."""

    def __init__(self, name: str, parent: QObject | None = None, keep_thread: bool = False) -> None:
        """`keep_thread`: tasks that come often (a render's takes written a few times a second) run one after
        another on one thread that waits `KEEP_S` for the next: starting a thread makes the window wait until the
        new thread gets the interpreter, 10-15 ms on a busy machine."""
        super().__init__(parent)
        self.name = name
        self.cancel = threading.Event()
        self.thread: threading.Thread | None = None
        self._active = False
        self._ended.connect(self._on_ended)
        self._keep = keep_thread
        self._tasks: deque[Callable[[Background], object]] = deque()
        self._room = threading.Condition()
        self._serving = False
        self._idle = threading.Event()
        self._idle.set()

    def _on_ended(self, result: object, error: str) -> None:
        """On the GUI thread: `running` is False, then every slot of `done` runs, in this one pass of the event
        loop (a queued `done` would reach each slot in a pass of its own: between two of them the task would
        read as over, and a follow-up its first slot starts, such as a render, as not begun yet)."""
        self._active = False
        self.done.emit(result, error)

    @property
    def running(self) -> bool:
        return self._active

    def start(self, fn: Callable[[Background], object]) -> None:
        """Run `fn(self)` on a new thread; it may emit `progress` and should check `cancel`."""
        self.cancel.clear()
        self._active = True
        if self._keep:
            with self._room:
                self._tasks.append(fn)
                self._idle.clear()
                if self._serving:
                    self._room.notify()
                    return
                self._serving = True
            target: Callable[[], None] = self._serve
        else:
            target = lambda: self._run(fn)  # noqa: E731 - one task, one thread
        self.thread = threading.Thread(target=_in_background(target), name=self.name, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        """The kept thread: its tasks in order, until none came for `KEEP_S`."""
        while True:
            with self._room:
                if not self._tasks:
                    self._room.wait(KEEP_S)
                if not self._tasks:
                    self._serving = False
                    self._idle.set()
                    return
                fn = self._tasks.popleft()
            self._run(fn)
            with self._room:
                if not self._tasks:
                    self._idle.set()

    def _run(self, fn: Callable[[Background], object]) -> None:
        try:
            result = fn(self)
        except Cancelled:
            self._report(None, "Cancelled.")
        except UserError as exc:
            self._report(None, str(exc))
        except Exception as exc:  # noqa: BLE001 - reported, never a crash of the studio
            logger.exception("background task %s failed", self.name)
            self._report(None, f"{type(exc).__name__}: {exc}")
        else:
            self._report(result, "")

    def _report(self, result: object, error: str) -> None:
        try:
            self._ended.emit(result, error)
        except RuntimeError:  # the window that owned the task closed while it ran: nobody is told
            logger.debug("background task %s ended after its owner was deleted", self.name)

    def wait(self) -> None:
        """Block until the task's thread ends (a dialog closing over a running export: seconds at most); a kept
        thread, until its tasks are done."""
        if self._keep:
            self._idle.wait()
        elif self.thread is not None and self.thread.is_alive():
            self.thread.join()


def _in_background(target: Callable[[], None]) -> Callable[[], None]:
    """`target`, run at the background threads' priority (`priority.background`): the window's thread first."""

    def run() -> None:
        priority.background()
        target()

    return run
