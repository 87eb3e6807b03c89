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

    def __init__(self, name: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self.cancel = threading.Event()
        self.thread: threading.Thread | None = None
        self._active = False
        # connected first, so it runs before any slot connected later: those see `running` already False
        # (the thread is still alive when its queued `done` arrives, so is_alive() cannot tell)
        self.done.connect(self._on_done)

    def _on_done(self, _result: object, _error: str) -> None:
        self._active = False

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
            self.done.emit(result, error)
        except RuntimeError:  # the window that owned the task closed while it ran: nobody is told
            logger.debug("background task %s ended after its owner was deleted", self.name)

    def wait(self) -> None:
        """Block until the task's thread ends (a dialog closing over a running export: seconds at most)."""
        if self.thread is not None and self.thread.is_alive():
            self.thread.join()
