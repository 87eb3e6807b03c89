"""Records with the studio's record dialog in a process of its own (its ALSA device is PulseAudio's, which the
test process, bound at start to the file-backed device of conftest.py, cannot switch to): presses Record, says
RECORDING on stdout, records until a line arrives on stdin, presses Stop and writes the take it kept to argv[1]."""

from __future__ import annotations

import os
import sys
import threading

import soundfile as sf

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from s2studio.ui.voices.record_dialog import RecordDialog  # noqa: E402

app = QApplication([])
dialog = RecordDialog()
dialog.show()
told = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), told.set()), daemon=True).start()
said = {"recording": False}


def poll() -> None:
    if dialog.recording and not said["recording"] and dialog.seconds > 0.2:
        said["recording"] = True
        print("RECORDING", dialog.device.currentText(), flush=True)
    if told.is_set():
        dialog.stop_button.click()
        sf.write(sys.argv[1], dialog.kept(), dialog.rate)
        print("DONE", dialog.rate, round(dialog.seconds, 2), flush=True)
        dialog.done(0)
        app.quit()
        return
    QTimer.singleShot(20, poll)


dialog.record_button.click()
QTimer.singleShot(20, poll)
app.exec()
