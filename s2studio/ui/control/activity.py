"""What the studio's log says of the person's work, so that Help ▸ Open Log Folder answers "what happened": the
devices this computer has, and each render (started, finished, cancelled or failed, with its lines and speed).
Saves, opens, restores, exports, fine-tuning runs and a server's lost connection are logged where they happen;
the start line is the composition root's. The script's text is never logged at INFO. QtCore only."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from PySide6.QtCore import QObject

from s2studio.ui.control.session import RenderSession

logger = logging.getLogger("s2studio.activity")


def describe_devices(options: Sequence[object]) -> str:
    """"cpu; cuda: no NVIDIA GPU found; mps: not a Mac" from the engine's `api.DeviceOption`s."""
    parts = []
    for option in options:
        name, reason = getattr(option, "name", "?"), getattr(option, "reason", "")
        if name == "auto":  # a choice of the settings, not a device
            continue
        parts.append(name if getattr(option, "available", True) else f"{name}: {reason or 'not available'}")
    return "; ".join(parts)


class ActivityLog(QObject):
    def __init__(self, session: RenderSession, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.session = session
        self._started = 0.0
        self._lines = 0
        session.busy_changed.connect(self._busy)
        session.finished.connect(self._finished)
        session.failed.connect(self._failed)

    def devices(self, options: Sequence[object]) -> None:
        logger.info("devices: %s", describe_devices(options))

    def _busy(self, busy: bool) -> None:
        if busy:
            self._started, self._lines = time.monotonic(), len(self.session.pending)
            logger.info("render started: %d line%s (%s)", self._lines, "s" * (self._lines != 1),
                        self.session.job_id)

    def _summary(self) -> str:
        pace = self.session.pace
        seconds = time.monotonic() - self._started
        speed = f", {pace.frames / seconds:.1f} frames/s" if seconds > 0 and pace.frames else ""
        return f"{self.session.done_lines} of {self._lines} lines in {seconds:.1f} s{speed}"

    def _finished(self, cancelled: bool) -> None:
        logger.info("render %s: %s", "cancelled" if cancelled else "finished", self._summary())

    def _failed(self, error: str) -> None:
        logger.warning("render failed after %s: %s", self._summary(), error)
