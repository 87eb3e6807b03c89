"""Shared helpers of the UI tests: an engine for the window, a test WAV, and modal-dialog drivers."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import soundfile as sf
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QTimer, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QWidget

from s2studio.engine import api

CHUNK = 2048


class ToneEngine:
    """Deterministic tones with latency, used until/unless `engine.fake.FakeEngine` is importable.

    Each line is `frames` chunks of CHUNK samples at 200 Hz + 100 Hz per speaker index."""

    def __init__(self, frames: int = 12, delay_s: float = 0.02) -> None:
        self.frames, self.delay_s = frames, delay_s
        self._takes = 0

    def load(self, request, cancel):
        yield api.ModelLoading(request.job_id, 0.5, "loading")
        yield api.ModelReady(request.job_id, api.ModelInfo("tones", "cpu", "fp32", api.SAMPLE_RATE, "tone-1", 4096))
        yield api.JobFinished(request.job_id)

    def encode(self, request, cancel):
        for clip in request.clips:
            yield api.ClipEncoded(request.job_id, clip.clip_id, np.ones((10, 4), np.int64), "tone-1")
        yield api.JobFinished(request.job_id)

    def generate(self, request, cancel):
        yield api.JobStarted(request.job_id, tuple(line.line_id for line in request.lines))
        for line in request.lines:
            if cancel.is_set():
                yield api.JobFinished(request.job_id, cancelled=True)
                return
            yield api.LineStarted(request.job_id, line.line_id)
            t = np.arange(CHUNK * self.frames) / api.SAMPLE_RATE
            audio = (0.3 * np.sin(2 * np.pi * (200 + 100 * line.speaker) * t)).astype(np.float32)
            self._takes += 1
            audio *= np.float32(1.0 - 0.05 * (self._takes % 5))  # takes differ
            for k in range(self.frames):
                time.sleep(self.delay_s)
                if cancel.is_set():  # between frames, as the real engine does
                    yield api.JobFinished(request.job_id, cancelled=True)
                    return
                yield api.AudioChunk(request.job_id, line.line_id, k * CHUNK, audio[k * CHUNK:(k + 1) * CHUNK].copy())
                yield api.Progress(request.job_id, line.line_id, k + 1, self.frames, 0.5)
            yield api.LineFinished(request.job_id, line.line_id, f"take{self._takes}", np.zeros((10, self.frames),
                                   np.int64), audio, 7, "fp")
        yield api.JobFinished(request.job_id)


def write_wav(path: Path, seconds: float = 4.0, hz: float = 220.0, rate: int = 44100) -> Path:
    t = np.arange(int(seconds * rate)) / rate
    sf.write(path, (0.4 * np.sin(2 * np.pi * hz * t)).astype(np.float32), rate, subtype="PCM_16")
    return path


def playback_raw() -> Path:
    """What the file-backed ALSA 'speaker' of tests/conftest.py received (16 kHz s16le mono)."""
    return Path(os.environ["ALSA_CONFIG_PATH"]).parent / "playback_s16le_16k_mono.raw"


def on_modal(qtbot, kind: type, handler: Callable[[QWidget], None], timeout_ms: int = 5000) -> None:
    """Run `handler(dialog)` once a modal dialog of `kind` is open (dialogs run their own event loop)."""
    deadline = time.monotonic() + timeout_ms / 1000

    def poll() -> None:
        w = QApplication.activeModalWidget()
        if isinstance(w, kind):
            handler(w)
        elif time.monotonic() < deadline:
            QTimer.singleShot(20, poll)

    QTimer.singleShot(20, poll)


def drop_files(w: QWidget, paths: list[Path]) -> None:
    """Drop `paths` onto `w` as a file manager would."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    # Qt routes a drop to the target of the drag-enter before it, so enter first, as a real drag does
    enter = QDragEnterEvent(QPoint(100, 100), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(w, enter)
    assert enter.isAccepted()
    event = QDropEvent(QPointF(100, 100), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(w, event)
