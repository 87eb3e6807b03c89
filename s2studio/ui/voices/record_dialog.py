"""Record a reference clip from a microphone: choose the input, watch a real meter (level, peak, clip lamp),
stop, see the take's waveform and trim it, hear it, retake, then use it.

The sounddevice input callback only copies each block into a list and stores its level and peak; the GUI
polls with a timer (the callback never touches Qt). Recording stops by itself at `MAX_SECONDS`. The take
stays in memory (`take()` gives a `ClipDraft`): the new-voice dialog stores it, no temporary file is made.
Without PortAudio or without any input device the dialog says so in one line and Record stays off; a missing
*output* device only disables Preview (with the reason in its tooltip).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

import numpy as np
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QHBoxLayout, QLabel, QPlainTextEdit,
                               QPushButton, QVBoxLayout, QWidget)

from s2studio.audio.alsa_messages import route_to_log
from s2studio.audio import SAMPLE_RATE as RATE
from s2studio.audio.clip_prep import Span, cut
from s2studio.errors import printable
from s2studio.ui.voices.new_voice.clip_draft import ClipDraft
from s2studio.ui.voices.new_voice.clip_waveform import ClipWaveform
from s2studio.ui.voices.level_meter import LevelMeter
from s2studio.ui.control.one_shot import play_samples, stop_playing

logger = logging.getLogger(__name__)

MAX_SECONDS = 30.0
READ_ALOUD = ("The quick brown fox jumps over the lazy dog. I read this passage in my normal voice, at an easy "
              "pace, so that the studio can learn how I sound when I speak naturally.")
NO_MICROPHONE = ("No microphone found. Connect one (or allow access to it in the system's sound settings), "
                 "then press Refresh.")


def suggested_voice_name(taken: Collection[str]) -> str:
    """"My voice", or "My voice 2", "My voice 3" … when that name is taken."""
    folded = {t.casefold() for t in taken}
    name, n = "My voice", 2
    while name.casefold() in folded:
        name, n = f"My voice {n}", n + 1
    return name


def sounddevice_module() -> tuple[Any | None, str]:
    """sounddevice, or (None, why not) when PortAudio is missing."""
    route_to_log()  # ALSA's own messages to the log, before PortAudio loads it
    try:
        import sounddevice as sd  # noqa: PLC0415 - PortAudio is optional at run time
    except (OSError, ImportError) as exc:
        return None, (f"Recording is off: PortAudio is not installed ({printable(exc, 80)}). Install libportaudio2 "
                      "to record.")
    return sd, ""


def input_devices(sd: Any) -> list[tuple[int, str]]:
    """(index, name) of every device that can record."""
    try:
        return [(i, str(d["name"])) for i, d in enumerate(sd.query_devices()) if d.get("max_input_channels", 0) > 0]
    except Exception as exc:  # noqa: BLE001 - PortAudio without devices
        logger.warning("listing input devices: %s", exc)
        return []


def output_problem(sd: Any) -> str:
    try:
        sd.query_devices(kind="output")
    except Exception:  # noqa: BLE001 - no default output
        return "No audio output device: the take cannot be played here."
    return ""


class RecordDialog(QDialog):
    def __init__(self, parent: QWidget | None = None, taken_names: Collection[str] = ()) -> None:
        super().__init__(parent)
        self.setWindowTitle("Record a voice clip")
        self.setObjectName("recordDialog")
        self.setMinimumWidth(560)
        self.suggested_name = suggested_voice_name(taken_names)
        self._sd, reason = sounddevice_module()
        self._stream: Any = None
        self._blocks: list[np.ndarray] = []
        self._frames = 0
        self._level = (0.0, 0.0)
        self.rate = RATE
        self.span: Span | None = None
        self.trimmed = False
        self._playing = False
        layout = QVBoxLayout(self)
        layout.setSpacing(8)
        device_row = QHBoxLayout()
        device_row.addWidget(QLabel("Microphone"))
        self.device = QComboBox()
        self.device.setAccessibleName("Microphone")
        device_row.addWidget(self.device, 1)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setAccessibleName("Look for microphones again")
        self.refresh_button.setAutoDefault(False)
        self.refresh_button.clicked.connect(self.refresh_devices)
        device_row.addWidget(self.refresh_button)
        layout.addLayout(device_row)
        layout.addWidget(QLabel("Read this aloud (10–30 s works best). Said something else? Edit the text, or clear "
                                "it and the take is transcribed:"))
        self.transcript = QPlainTextEdit(READ_ALOUD)
        self.transcript.setAccessibleName("Transcript of the recording")
        self.transcript.setMaximumHeight(80)
        layout.addWidget(self.transcript)
        self.meter = LevelMeter()
        layout.addWidget(self.meter)
        self.waveform = ClipWaveform()
        self.waveform.setAccessibleName("Waveform and trim of the take")
        self.waveform.edited.connect(self._trimmed)
        layout.addWidget(self.waveform)
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
            b.setAutoDefault(False)
            row.addWidget(b)
        row.addStretch(1)
        layout.addLayout(row)
        self.reason = QLabel("")
        self.reason.setWordWrap(True)
        layout.addWidget(self.reason)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Use this take")
        self.buttons.accepted.connect(self._accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self.record_button.clicked.connect(self.start)
        self.stop_button.clicked.connect(self.stop)
        self.preview_button.clicked.connect(self.preview)
        self._timer = QTimer(self, interval=50)
        self._timer.timeout.connect(self._poll)
        self._play_timer = QTimer(self, interval=100, singleShot=True)
        self._play_timer.timeout.connect(self._played)
        self._output_problem = output_problem(self._sd) if self._sd is not None else reason
        self._say(reason)
        self.refresh_devices()

    @property
    def recording(self) -> bool:
        return self._stream is not None

    @property
    def seconds(self) -> float:
        return self._frames / self.rate

    def _say(self, text: str) -> None:
        self.reason.setText(text)
        self.reason.setVisible(bool(text))

    def refresh_devices(self) -> None:
        """List the inputs (PortAudio enumerates them once; Refresh asks it again)."""
        sd = self._sd
        self.device.clear()
        if sd is None:
            self.refresh_button.setEnabled(False)
            self._update_buttons()
            return
        if self.sender() is self.refresh_button:
            try:
                sd._terminate()
                sd._initialize()
            except Exception as exc:  # noqa: BLE001 - a PortAudio that cannot restart keeps its old list
                logger.warning("restarting PortAudio: %s", exc)
        devices = input_devices(sd)
        try:
            default = int(sd.default.device[0])
        except Exception:  # noqa: BLE001
            default = -1
        for index, name in devices:
            self.device.addItem(name + (" (default)" if index == default else ""), index)
        self.device.setCurrentIndex(max(0, self.device.findData(default)))
        self._say("" if devices else NO_MICROPHONE)
        self._output_problem = output_problem(sd)
        self._update_buttons()

    def start(self) -> None:
        """Start (or restart: a retake) recording."""
        self.stop()
        device = self.device.currentData()
        if self._sd is None or device is None:
            return
        self._blocks, self._frames, self._level = [], 0, (0.0, 0.0)
        self.span, self.trimmed = None, False
        self.meter.reset()
        stream = None
        for rate in dict.fromkeys((RATE, self._device_rate(device))):
            try:
                stream = self._sd.InputStream(samplerate=rate, device=device, channels=1, dtype="float32",
                                              callback=self._callback)
                stream.start()
                self.rate = rate
                break
            except Exception as exc:  # noqa: BLE001 - a busy device, a rate it refuses …
                logger.warning("opening %s at %s Hz: %s", self.device.currentText(), rate, exc)
                stream, error = None, exc
        if stream is None:
            self._say(f"Cannot record from {self.device.currentText()}: {printable(error, 120)}. Choose another "
                      "microphone or close the program that uses it.")
            return
        self._stream = stream
        self._say("")
        self.record_button.setText("● Retake")
        self._timer.start()
        self._update_buttons()

    def _device_rate(self, device: int) -> int:
        try:
            return int(self._sd.query_devices(device)["default_samplerate"])
        except Exception:  # noqa: BLE001
            return RATE

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
            self._show_take()
        self._update_buttons()

    def audio(self) -> np.ndarray:
        data = np.concatenate(self._blocks) if self._blocks else np.zeros(0, np.float32)
        return data[: int(MAX_SECONDS * self.rate)]

    def kept(self) -> np.ndarray:
        return cut(self.audio(), self.rate, self.span) if self.span is not None else self.audio()

    def take(self) -> ClipDraft:
        """The take as the new-voice dialog's clip: its audio and the trim chosen here."""
        audio = self.audio()
        span = self.span or Span(0.0, len(audio) / self.rate)
        return ClipDraft(0, "Recording", audio[:, None], self.rate, "PCM_24", span, touched=self.trimmed)

    def preview(self) -> None:
        if self._playing:
            stop_playing()
            self._played()
            return
        if self._output_problem:
            self._say(self._output_problem)
            return
        kept = self.kept()
        if not len(kept):
            return
        reason = play_samples(kept, self.rate)
        if reason:
            self._say(reason)
            return
        self._playing = True
        self.preview_button.setText("■ Stop")
        self._play_timer.start(int(len(kept) / self.rate * 1000) + 100)

    def _played(self) -> None:
        self._playing = False
        self.preview_button.setText("▶ Preview")

    def _callback(self, indata: Any, frames: int, time: Any, status: Any) -> None:
        # the last block is cut at the maximum, so that the take's length and `seconds` are the same number
        room = int(MAX_SECONDS * self.rate) - self._frames
        if room <= 0:
            return
        block = indata[:room, 0].copy()
        self._blocks.append(block)
        self._frames += len(block)
        if len(block):
            self._level = (float(np.sqrt(np.mean(block * block))), float(np.abs(block).max()))

    def _poll(self) -> None:
        rms, peak = self._level
        self.meter.show_block(rms, peak)
        self.time_label.setText(f"{self.seconds:.1f} s" + ("  (maximum reached)" if self.seconds >= MAX_SECONDS
                                                           else ""))
        if self.recording and len(self._blocks) % 5 == 0:
            self.waveform.set_audio(self.audio(), self.rate)
        if self.seconds >= MAX_SECONDS and self._stream is not None:
            self.stop()

    def _show_take(self) -> None:
        audio = self.audio()
        self.waveform.set_audio(audio, self.rate)
        self.span = Span(0.0, len(audio) / self.rate)
        if self.meter.clipped:
            self._say("⚠ The take clipped (the CLIP lamp): record it again a little quieter.")

    def _trimmed(self) -> None:
        self.span, self.trimmed = self.waveform.span, True
        self.time_label.setText(f"{self.seconds:.1f} s, keeping {self.span.length:.1f} s")

    def _update_buttons(self) -> None:
        has_device = self._sd is not None and self.device.count() > 0
        self.device.setEnabled(has_device and not self.recording)
        self.record_button.setEnabled(has_device)
        self.stop_button.setEnabled(self.recording)
        has_take = not self.recording and self._frames > 0
        self.preview_button.setEnabled(has_take and not self._output_problem)
        self.preview_button.setToolTip(self._output_problem or "Play the kept part of the take")
        self.waveform.setEnabled(has_take)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(has_take)

    def _accept(self) -> None:
        self.stop()
        if self._frames:
            self.accept()

    def done(self, code: int) -> None:  # noqa: D102 - recording and playing stop with the dialog
        self.stop()
        if self._playing:
            stop_playing()
        super().done(code)
