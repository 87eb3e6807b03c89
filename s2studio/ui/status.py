"""Status bar: model, device, live frames/s, real-time factor and ETA of the running render, and while a render runs
on several engines, a live line per engine (lines done, frames/s, failures)."""

from __future__ import annotations

import os
import sys

from collections.abc import Callable

from PySide6.QtCore import QTimer
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QLabel, QProgressBar, QSizePolicy, QStatusBar, QToolButton

from s2studio.engine import api
from s2studio.ui.control.pace import Pace

PROGRESS_MS = 100
ENGINES_MS = 1000
"""How often the per-engine line is read while a render runs (a server may send nothing until a line is done)."""


def resident_bytes() -> int:
    """Memory the process holds now (model weights included), 0 where it cannot be read."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        try:
            import resource  # noqa: PLC0415 - POSIX only

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            return peak if sys.platform == "darwin" else peak * 1024
        except (ImportError, OSError):
            return 0


class StatusPanel:
    """Fills the window's QStatusBar; `on_progress` is told after every `api.Progress` of a render."""

    def __init__(self, bar: QStatusBar, cancel_load: QAction | None = None) -> None:
        self.bar = bar
        self.model = QLabel("No model")
        self.model.setAccessibleName("Model")
        self.device = QLabel("")
        self.device.setAccessibleName("Device")
        self.speed = QLabel("")
        self.speed.setAccessibleName("Render speed")
        self.memory = QLabel("")
        self.memory.setAccessibleName("Memory used by the studio")
        self.progress = QProgressBar()
        self.progress.setAccessibleName("Render progress")
        self.progress.setMaximumWidth(180)
        self.progress.setVisible(False)
        self.engines = QLabel("")
        self.engines.setAccessibleName("Engines of the render")
        self.engines.setVisible(False)
        self.engines.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # never widens the window
        self.engine_lines: Callable[[], list[str]] | None = None
        """The live line of each engine of a render plan ([] when one engine renders); None: none to ask."""
        self._engines_timer = QTimer(bar, interval=ENGINES_MS)
        self._engines_timer.timeout.connect(self.show_engines)
        for w in (self.model, self.device):
            bar.addWidget(w)
        bar.addWidget(self.engines, 1)
        bar.addPermanentWidget(self.memory)
        bar.addPermanentWidget(self.speed)
        self._memory_timer = QTimer(bar)
        self._memory_timer.setInterval(2000)
        self._memory_timer.timeout.connect(self.update_memory)
        self._memory_timer.start()
        self.update_memory()
        bar.addPermanentWidget(self.progress)
        self.cancel_load = QToolButton()
        self.cancel_load.setAccessibleName("Cancel model loading")
        self.cancel_load.setAutoRaise(True)
        self.cancel_load.setVisible(False)
        if cancel_load is not None:
            self.cancel_load.setDefaultAction(cancel_load)
        bar.addPermanentWidget(self.cancel_load)
        self._pace: Pace | None = None
        self._shown = QTimer(bar, singleShot=True, interval=PROGRESS_MS)
        """A render reports ~20 times a line: the bar and the speed follow at most every PROGRESS_MS (a
        progress bar repaints at once when its value moves, and with it what else is waiting to paint)."""
        self._shown.timeout.connect(self._show_pace)

    def update_memory(self) -> None:
        rss = resident_bytes()
        self.memory.setText(f"RAM {rss / 2**30:.1f} GB" if rss else "")

    def set_model(self, info: api.ModelInfo | None, message: str = "") -> None:
        if info is None:
            self.model.setText(message or "No model")
            self.device.setText("")
            return
        self.model.setText(f"Model: {info.name}")
        at_once = f" · {info.max_batch} lines at once" if info.max_batch > 1 else ""
        self.device.setText(f"{info.device} · {info.settings_text().replace('; ', ' · ')}{at_once}")
        self.device.setToolTip(f"The CPU kernels are not used: {info.kernels_note}" if info.kernels_note else "")

    def model_loading(self, progress: float, message: str = "") -> None:
        """A model load started (progress 0) or went on; what the last render said goes (it is old news)."""
        self.set_model(None, f"Loading model… {message}".rstrip())
        if progress == 0.0:
            self.speed.setText("")
            self.bar.clearMessage()
        self.cancel_load.setVisible(True)
        if not self.progress.isVisible():
            self.progress.setRange(0, 100)
            self.progress.setVisible(True)
        self.progress.setValue(int(progress * 100))

    def model_ready(self, info: api.ModelInfo, demo: bool) -> None:
        self.progress.setVisible(False)
        self.cancel_load.setVisible(False)
        self.set_model(info)
        if info.kernels_note:  # for half a minute; the device label keeps the path, its tooltip the reason
            self.bar.showMessage(f"Rendering with {info.kernels}: {info.kernels_note}", 30_000)
        if demo:
            self.model.setText(f"Model: {info.name} (demo: random weights, produces noise)")

    def model_unloaded(self, reason: str, still_loaded: bool) -> None:
        """A load ended without a model (cancelled or failed); `still_loaded`: the model before it is still there."""
        self.progress.setVisible(False)
        self.cancel_load.setVisible(False)
        if not still_loaded:
            self.set_model(None, "No model (loading cancelled)" if "cancelled" in reason else "No model")

    def start(self) -> None:
        """A render started: progress from 0, the speed to come."""
        self.progress.setRange(0, 1000)
        self.progress.setValue(0)
        self.progress.setVisible(True)
        self.speed.setText("starting…")
        self._engines_timer.start()
        self.show_engines()

    def show_engines(self) -> None:
        """Each engine's line, while the render runs on several: one line in the bar, one per engine in its tip."""
        lines = self.engine_lines() if self.engine_lines is not None and self._engines_timer.isActive() else []
        self.engines.setText("  |  ".join(lines))
        self.engines.setToolTip("\n".join(lines))
        self.engines.setVisible(bool(lines))

    def on_progress(self, pace: Pace) -> None:
        """The running render went on (`pace` is the session's, updated with the engine's report)."""
        self._pace = pace
        if not self._shown.isActive():
            self._show_pace()
            self._shown.start()

    def _show_pace(self) -> None:
        pace, self._pace = self._pace, None
        if pace is None:
            return
        self.progress.setValue(int(1000 * pace.fraction))
        self.show_engines()
        if pace.fps <= 0:  # no speed measured yet: the first report's real-time factor counts the prefill alone
            self.speed.setText("starting…")
            return
        self.speed.setText(f"{pace.fps:5.1f} frames/s · RTF {pace.rtf:.2f} · {pace.eta_text()}")
        self._shown.start()

    def stop(self, message: str) -> None:
        self._shown.stop()
        self._engines_timer.stop()
        self.show_engines()
        self._pace = None
        self.progress.setVisible(False)
        self.speed.setText(message)
