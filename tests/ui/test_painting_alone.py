"""The window's thread paints alone: the application made for the studio starts no helper threads to paint
(Linux: the threads of Qt's pool counted, by their name). In a fresh process, since Qt decides it at a process's
first painting."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts the threads in /proc")

PAINT = """
import os, sys
from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor, QPainter, QPixmap
if sys.argv[1] == "studio":
    from s2studio import app
    app.make_application(["s2studio"])
else:
    from PySide6.QtWidgets import QApplication
    QApplication(["plain"])
pixmap = QPixmap(600, 300)
pixmap.fill(QColor("white"))
painter = QPainter(pixmap)
for x in range(0, 600, 3):  # tall translucent marks, as the waveform's over its lines are
    painter.fillRect(QRectF(x, 0, 2, 300), QColor(20, 40, x % 255, 128))
painter.end()
print(sum(open(f"/proc/self/task/{t}/comm").read().startswith("Thread (pooled)") for t in os.listdir("/proc/self/task")))
"""


def qt_pool_threads_after_painting(kind: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != "QT_NO_GUI_THREADPOOL"}
    env["QT_QPA_PLATFORM"] = "offscreen"
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", PAINT, kind], capture_output=True, text=True, env=env, cwd=root,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


def test_the_studio_paints_on_the_windows_thread_alone() -> None:
    assert qt_pool_threads_after_painting("studio") == 0


def test_qt_left_to_itself_paints_tall_translucent_fills_with_helper_threads() -> None:
    """What the studio turns off is there to turn off (were it not, the test above would prove nothing)."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: Qt paints alone anyway")
    assert qt_pool_threads_after_painting("plain") > 0
