"""The one way the window runs work off the GUI thread (hashing clips, exports, downloads): a plain thread
per task whose `progress` and `done` arrive on the GUI thread as queued signals. QtCore only.

Engine work never goes here: it belongs to the engine thread (`worker.EngineHost`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from s2studio.errors import Cancelled, UserError

__all__ = ["Background", "Cancelled"]
"""`Cancelled` (from `s2studio.errors`) raised inside a task ends it with the message "Cancelled."."""

logger = logging.getLogger(__name__)


class Background(QObject):
    """Runs one function at a time on a plain thread."""

    progress = Signal(float, str)
    done = Signal(object, str)
    """(result or None, error message or ""): a UserError's message, "Cancelled.", or the exception's
    type and message (the traceback goes to the log)."""

    _ended = Signal(object, str)
    """From the task's thread; `done` is emitted from it on the GUI thread."""

    def __init__(self, name: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self.cancel = threading.Event()
        self.thread: threading.Thread | None = None
        self._active = False
        self._ended.connect(self._on_ended)

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

        def run() -> None:
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

        self.thread = threading.Thread(target=run, name=self.name, daemon=True)
        self.thread.start()

    def _report(self, result: object, error: str) -> None:
        try:
            self._ended.emit(result, error)
        except RuntimeError:  # the window that owned the task closed while it ran: nobody is told
            logger.debug("background task %s ended after its owner was deleted", self.name)

    def wait(self) -> None:
        """Block until the task's thread ends (a dialog closing over a running export: seconds at most)."""
        if self.thread is not None and self.thread.is_alive():
            self.thread.join()
