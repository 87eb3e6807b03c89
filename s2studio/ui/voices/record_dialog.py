"""Record a reference clip from the microphone: level meter, stop, retake, preview, then use it.

The sounddevice input callback only copies each block into a list and stores its peak; the GUI
polls with a timer (the callback never touches Qt). Recording stops by itself at `MAX_SECONDS`.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QHBoxLayout, QLabel, QPlainTextEdit, QProgressBar,
                               QPushButton, QVBoxLayout, QWidget)

from s2studio.engine.api import SAMPLE_RATE as RATE
from s2studio.ui.control.player import load_sounddevice

logger = logging.getLogger(__name__)

MAX_SECONDS = 30.0
READ_ALOUD = ("The quick brown fox jumps over the lazy dog. I read this passage in my normal voice, at an easy "
              "pace, so that the studio can learn how I sound when I speak naturally.")


class RecordDialog(QDialog):
    recorded = Signal(Path, str)
    """(wav file, transcript) when the user accepts a take."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Record a voice clip")
        self.setObjectName("recordDialog")
        self.setMinimumWidth(480)
        self._sd, reason = load_sounddevice()
        self._stream: Any = None
        self._blocks: list[np.ndarray] = []
        self._frames = 0
        self._peak = 0.0
        self.path: Path | None = None
        layout = QVBoxLayout(self)
        layout.setSpacing(10)
        layout.addWidget(QLabel("Read this aloud (10–30 s works best). Edit the text if you say something else:"))
        self.transcript = QPlainTextEdit(READ_ALOUD)
        self.transcript.setAccessibleName("Transcript of the recording")
        self.transcript.setMaximumHeight(90)
        layout.addWidget(self.transcript)
        self.meter = QProgressBar()
        self.meter.setRange(0, 100)
        self.meter.setTextVisible(False)
        self.meter.setAccessibleName("Input level")
        self.meter.setMaximumHeight(10)
        layout.addWidget(self.meter)
        self.time_label = QLabel("0.0 s")
        self.time_label.setAccessibleName("Recorded length")
        layout.addWidget(self.time_label)
        row = QHBoxLayout()
        self.record_button = QPushButton("● Record")
        self.record_button.setAccessibleName("Start recording")
        self.stop_button = QPushButton("■ Stop")
        self.stop_button.setAccessibleName("Stop recording")
        self.preview_button = QPushButton("▶ Preview")
        self.preview_button.setAccessibleName("Play the recording")
        for b in (self.record_button, self.stop_button, self.preview_button):
            row.addWidget(b)
        layout.addLayout(row)
        self.reason = QLabel(reason or "")
        self.reason.setWordWrap(True)
        self.reason.setVisible(bool(reason))
        layout.addWidget(self.reason)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Use this take")
        self.buttons.accepted.connect(self._accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self.record_button.clicked.connect(self.start)
        self.stop_button.clicked.connect(self.stop)
        self.preview_button.clicked.connect(self.preview)
        self._timer = QTimer(self)
        self._timer.setInterval(50)
        self._timer.timeout.connect(self._poll)
        self.record_button.setEnabled(self._sd is not None and not reason.startswith("Audio is off"))
        self._update_buttons()

    @property
    def recording(self) -> bool:
        return self._stream is not None

    @property
    def seconds(self) -> float:
        return self._frames / RATE

    def start(self) -> None:
        """Start (or restart: a retake) recording."""
        self.stop()
        self._blocks, self._frames, self._peak = [], 0, 0.0
        try:
            self._stream = self._sd.InputStream(samplerate=RATE, channels=1, dtype="float32", callback=self._callback)
            self._stream.start()
        except Exception as exc:  # noqa: BLE001 - no microphone, busy device …
            self._stream = None
            self.reason.setText(f"Cannot open the microphone ({exc}).")
            self.reason.setVisible(True)
            return
        self.record_button.setText("● Retake")
        self._timer.start()
        self._update_buttons()

    def stop(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.stop()
                stream.close()
            except Exception as exc:  # noqa: BLE001
                logger.warning("closing the input stream: %s", exc)
            self._timer.stop()
            self._poll()
        self._update_buttons()

    def audio(self) -> np.ndarray:
        data = np.concatenate(self._blocks) if self._blocks else np.zeros(0, np.float32)
        return data[: int(MAX_SECONDS * RATE)]

    def preview(self) -> None:
        if self._sd is not None and self._frames:
            try:
                self._sd.play(self.audio(), RATE)
            except Exception as exc:  # noqa: BLE001
                self.reason.setText(f"Cannot play ({exc}).")
                self.reason.setVisible(True)

    def _callback(self, indata: Any, frames: int, time: Any, status: Any) -> None:
        if self._frames >= MAX_SECONDS * RATE:
            return
        block = indata[:, 0].copy()
        self._blocks.append(block)
        self._frames += frames
        self._peak = float(np.abs(block).max()) if frames else 0.0

    def _poll(self) -> None:
        self.meter.setValue(int(min(self._peak, 1.0) * 100))
        self.time_label.setText(f"{self.seconds:.1f} s" + ("  (maximum reached)" if self.seconds >= MAX_SECONDS
                                                           else ""))
        if self.seconds >= MAX_SECONDS and self._stream is not None:
            self.stop()

    def _update_buttons(self) -> None:
        self.stop_button.setEnabled(self.recording)
        self.preview_button.setEnabled(not self.recording and self._frames > 0)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(not self.recording and self._frames > 0)

    def _accept(self) -> None:
        self.stop()
        if not self._frames:
            return
        fd, name = tempfile.mkstemp(prefix="s2studio-rec-", suffix=".wav")
        os.close(fd)
        self.path = Path(name)
        sf.write(self.path, self.audio(), RATE, subtype="PCM_16")
        self.recorded.emit(self.path, self.transcript.toPlainText().strip())
        self.accept()

    def reject(self) -> None:
        self.stop()
        super().reject()
