"""Live playback: a growing sample buffer and a sounddevice output stream that reads it.

The audio callback only copies from the buffer (design.md §2): no allocation, no locks, no Qt.
While a render is running the buffer grows behind the playhead; when the playhead catches up with
the rendered end the callback plays silence *without advancing*, so nothing is skipped and playback
resumes exactly where the audio continues. The GUI polls the position with a timer.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import numpy.typing as npt
from PySide6.QtCore import QObject, QTimer, Signal

from s2studio.engine.api import SAMPLE_RATE

logger = logging.getLogger(__name__)

Samples = npt.NDArray[np.float32]


def load_sounddevice() -> tuple[Any | None, str]:
    """Import sounddevice; without PortAudio return (None, reason) so the studio still starts."""
    try:
        import sounddevice as sd  # noqa: PLC0415 - PortAudio is optional at run time
    except (OSError, ImportError) as exc:
        return None, f"Audio is off: PortAudio is not installed ({exc}). Install libportaudio2 to play and record."
    try:
        sd.query_devices(kind="output")
    except Exception as exc:  # noqa: BLE001 - any PortAudio error means "no device"
        return sd, f"No audio output device ({exc})."
    return sd, ""


class PlaybackBuffer:
    """Float32 mono samples; `length` counts the valid ones. Written on the GUI thread only.

    Growth reallocates (doubling) and swaps the array in one assignment; the callback reads
    `length` first and `data` second, so it never reads samples that are not there yet.
    """

    def __init__(self, capacity: int = SAMPLE_RATE * 30) -> None:
        self.data: Samples = np.zeros(capacity, np.float32)
        self.length = 0
        self.growing = False
        """True while a render may still append; the playhead then waits at the end instead of stopping."""

    def reserve(self, n: int) -> None:
        if n > len(self.data):
            grown = np.zeros(max(n, 2 * len(self.data)), np.float32)
            grown[: self.length] = self.data[: self.length]
            self.data = grown

    def write(self, offset: int, samples: Samples) -> None:
        end = offset + len(samples)
        self.reserve(end)
        self.data[offset:end] = samples
        if end > self.length:
            self.length = end

    def set_length(self, n: int) -> None:
        """Extend with silence (gaps) or truncate."""
        self.reserve(n)
        if n > self.length:
            self.data[self.length:n] = 0.0
        self.length = n

    def view(self) -> Samples:
        return self.data[: self.length]


class Player(QObject):
    """Plays a `PlaybackBuffer` through the default output device."""

    position_changed = Signal(int)
    """Playhead in samples (polled about 30 times a second while playing, and on seek)."""
    state_changed = Signal(bool)
    """True when playing."""
    started_audio = Signal()
    """The first non-silent block of a play reached the device (the test hook for live playback)."""

    def __init__(self, buffer: PlaybackBuffer, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.buffer = buffer
        self._sd, self.unavailable_reason = load_sounddevice()
        self._stream: Any = None
        self._pos = 0
        self._playing = False
        self._audio_flag = False
        self._announced = False
        self._timer = QTimer(self)
        self._timer.setInterval(33)
        self._timer.timeout.connect(self._poll)

    @property
    def available(self) -> bool:
        return self._sd is not None and not self.unavailable_reason

    @property
    def playing(self) -> bool:
        return self._playing

    @property
    def position(self) -> int:
        return self._pos

    def seek(self, sample: int) -> None:
        self._pos = int(min(max(sample, 0), self.buffer.length))
        self.position_changed.emit(self._pos)

    def play(self) -> bool:
        """Start (or keep) playing from the current position. False (and nothing happens) without audio."""
        if self._playing:
            return True
        if not self.available:
            return False
        if self._pos >= self.buffer.length and not self.buffer.growing:
            self._pos = 0
        self._announced = self._audio_flag = False
        try:
            self._stream = self._sd.OutputStream(samplerate=SAMPLE_RATE, channels=1, dtype="float32",
                                                 callback=self._callback, finished_callback=None)
            self._stream.start()
        except Exception as exc:  # noqa: BLE001 - a device can vanish between runs
            logger.warning("cannot open the output stream: %s", exc)
            self.unavailable_reason = f"Cannot open the audio output ({exc})."
            self._stream = None
            return False
        self._playing = True
        self._timer.start()
        self.state_changed.emit(True)
        return True

    def pause(self) -> None:
        if not self._playing:
            return
        self._playing = False
        self._timer.stop()
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.abort()
                stream.close()
            except Exception as exc:  # noqa: BLE001
                logger.warning("closing the output stream: %s", exc)
        self.position_changed.emit(self._pos)
        self.state_changed.emit(False)

    def toggle(self) -> None:
        self.pause() if self._playing else self.play()

    def close(self) -> None:
        self.pause()

    # -- audio thread ---------------------------------------------------------------------------

    def _callback(self, outdata: Any, frames: int, time: Any, status: Any) -> None:
        length = self.buffer.length
        data = self.buffer.data
        pos = self._pos
        n = min(frames, max(0, length - pos))
        if n:
            outdata[:n, 0] = data[pos:pos + n]
            self._audio_flag = True
        outdata[n:, 0] = 0.0
        self._pos = pos + n

    # -- GUI thread -------------------------------------------------------------------------------

    def _poll(self) -> None:
        if self._audio_flag and not self._announced:
            self._announced = True
            self.started_audio.emit()
        self.position_changed.emit(self._pos)
        if self._pos >= self.buffer.length and not self.buffer.growing:
            self.pause()
