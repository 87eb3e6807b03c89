"""Starts the studio as `s2studio` does (the real engine, a fresh data folder, no model yet) in this process and
prints, as one JSON line, what its start-up did to the window: when the window first painted, when torch's import
began and ended and on which thread, and how the GUI thread's event loop ticked meanwhile (a 20 ms timer).
Run by test_new_user_startup.py in a process of its own, so that torch is not imported yet."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

home = Path(tempfile.mkdtemp(prefix="s2studio-startup-"))
for var, sub in (("S2STUDIO_DATA_DIR", "data"), ("XDG_CONFIG_HOME", "config"), ("XDG_CACHE_HOME", "cache")):
    os.environ[var] = str(home / sub)
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
T0 = time.perf_counter()
seen: dict[str, object] = {}


class TorchWatch:
    """Notes where and when `import torch` begins (a finder that finds nothing, asked first)."""

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001, ANN201
        if name == "torch" and "torch_began" not in seen:
            seen["torch_began"] = time.perf_counter() - T0
            seen["torch_thread"] = threading.current_thread().name
        return None


sys.meta_path.insert(0, TorchWatch())

from PySide6.QtCore import QEvent, QObject, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from s2studio import app as studio  # noqa: E402
from s2studio.threads import prepare_threads  # noqa: E402

prepare_threads()
qapp = studio.make_application(["s2studio"])
ticks: list[float] = []


class PaintWatch(QObject):
    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802
        if (event.type() == QEvent.Type.Paint and "painted" not in seen and hasattr(obj, "window")
                and obj.window().objectName() == "mainWindow"):
            seen["painted"] = time.perf_counter() - T0
            seen["torch_at_paint"] = "torch" in sys.modules
        return False


def tick() -> None:
    now = time.perf_counter() - T0
    ticks.append(now)
    torch = sys.modules.get("torch")
    if torch is not None and "torch_ended" not in seen and not getattr(torch.__spec__, "_initializing", False) \
            and hasattr(torch, "Tensor"):
        seen["torch_ended"] = now
        QTimer.singleShot(500, finish)
    if now > 240:
        finish()


def finish() -> None:
    began, ended = seen.get("torch_began"), seen.get("torch_ended")
    during = [t for t in ticks if began is not None and ended is not None and began <= t <= ended]
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    seen.update(ticks_during_import=len(during), longest_gap=max(gaps, default=0.0))
    print(json.dumps(seen), flush=True)
    for w in QApplication.topLevelWidgets():
        if w.objectName() == "mainWindow":
            studio.close_all(w)
    QApplication.quit()


watch = PaintWatch()
qapp.installEventFilter(watch)
timer = QTimer()
timer.setInterval(20)
timer.timeout.connect(tick)
timer.start()
sys.exit(studio.main(["s2studio"]))
