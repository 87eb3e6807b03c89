"""The selected voice's details under the voice list: its name and source note, and every reference
clip as a row (number, duration, transcript, the warnings of `check_clip`) that plays when activated.

Playing goes through `play_file` (sounddevice's one-shot `sd.play`), the same path as the preview
buttons of the new-voice dialog; it reports a reason instead of raising, so a missing PortAudio or a
vanished device becomes a status-bar message.
"""

from __future__ import annotations

import html

import logging
from pathlib import Path

import numpy as np
from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QKeyEvent, QResizeEvent
from PySide6.QtWidgets import (QAbstractItemView, QHBoxLayout, QLabel, QListWidget, QListWidgetItem,
                               QPushButton, QSizePolicy, QStyle, QVBoxLayout, QWidget)

from s2studio.errors import UserError, printable
from s2studio.state.clips import MAX_RECORDING_SECONDS, read_audio
from s2studio.state.voices import Clip, Voice, VoiceLibrary, check_clip
from s2studio.ui.control.player import load_sounddevice

EMPTY_HINT = "Drop a WAV here, browse for one or record from the microphone to clone a voice."


def play_file(path: Path) -> str:
    """Play an audio file through the default device; returns a reason when it cannot (the reference
    reader's one line for a file that is not audio)."""
    try:
        data, sr, _ = read_audio(Path(path), MAX_RECORDING_SECONDS, voice_clip=False)
    except UserError as exc:
        return f"Cannot play it: {exc}"
    return play_samples(data.mean(axis=1), sr)


def play_samples(samples: np.ndarray, rate: int) -> str:
    """Play mono samples through the default device (replacing what plays); returns a reason when it cannot."""
    sd, reason = load_sounddevice()
    if sd is None or reason:
        return reason
    try:
        sd.play(np.asarray(samples, dtype=np.float32), rate)
    except Exception as exc:  # noqa: BLE001 - a vanished device
        return f"Cannot play: the sound device failed ({printable(exc, 120)})."
    return ""


def stop_playing() -> None:
    """Stop what `play_samples` started (nothing happens when nothing plays)."""
    sd, reason = load_sounddevice()
    if sd is not None and not reason:
        try:
            sd.stop()
        except Exception as exc:  # noqa: BLE001
            logging.getLogger(__name__).warning("stopping playback: %s", exc)


def clip_warnings(path: Path) -> list[str]:
    """`check_clip`, with an unreadable file shown as one more warning rather than an error dialog."""
    try:
        return check_clip(path)
    except UserError as exc:
        return [str(exc)]


class ClipList(QListWidget):
    """The clip rows. Enter (Qt's item activation) and double-click play a row; so does Space, which
    a list would otherwise spend on toggling the selection that is already there."""

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        item = self.currentItem()
        if event.key() == Qt.Key.Key_Space and event.modifiers() == Qt.KeyboardModifier.NoModifier and item:
            self.itemActivated.emit(item)
            return
        super().keyPressEvent(event)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        """Tall enough for every row as wrapped at the current width (a voice has at most 4 clips), so
        the list does not scroll while the voice list above takes the panel's spare height."""
        hint = super().sizeHint()
        if self.count() == 0:
            return hint
        self.doItemsLayout()
        bottom = self.visualItemRect(self.item(self.count() - 1)).bottom() + self.verticalOffset()
        return QSize(hint.width(), bottom + self.spacing() + 2 * self.frameWidth() + 2)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        """A scroll area's usual minimum would leave blank space under a single clip."""
        least = super().minimumSizeHint()
        return QSize(least.width(), min(least.height(), self.sizeHint().height()))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self.updateGeometry()  # rows wrap differently: the height they need changed


class VoiceDetails(QWidget):
    message = Signal(str)
    """A one-line notice for the status bar (why a clip could not be played)."""
    preview_requested = Signal()
    """"Preview voice": hear the shown voice say the test sentence."""

    def __init__(self, library: VoiceLibrary, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("voiceDetails")
        self.library = library
        self.voice: Voice | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        self.header = QLabel(EMPTY_HINT)
        self.header.setWordWrap(True)
        self.header.setAccessibleName("Voice details")
        self.header.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.header)
        self.clips = ClipList()
        self.clips.setAccessibleName("Clips of the selected voice")
        self.clips.setToolTip("Enter, Space or double-click plays a clip")
        self.clips.setWordWrap(True)
        self.clips.setTextElideMode(Qt.TextElideMode.ElideNone)
        self.clips.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.clips.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.clips.setSpacing(2)
        self.clips.setIconSize(QSize(16, 16))
        self.clips.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)
        self.clips.itemActivated.connect(lambda item: self.play(self.clips.row(item)))
        self.clips.currentRowChanged.connect(lambda row: self.play_button.setEnabled(row >= 0))
        layout.addWidget(self.clips)
        self.play_button = QPushButton(self.style().standardIcon(QStyle.StandardPixmap.SP_MediaPlay), "Play clip")
        self.play_button.setAccessibleName("Play the selected clip")
        self.play_button.clicked.connect(lambda: self.play(self.clips.currentRow()))
        self.preview_button = QPushButton("Preview voice")
        self.preview_button.setAccessibleName("Hear the voice say a test sentence")
        self.preview_button.setToolTip("Renders a test sentence with this voice (once per voice and model)")
        self.preview_button.clicked.connect(self.preview_requested)
        buttons = QHBoxLayout()
        buttons.addWidget(self.play_button)
        buttons.addWidget(self.preview_button)
        layout.addLayout(buttons)
        self.show_voice(None)

    def show_voice(self, voice: Voice | None, error: str = "") -> None:
        """Show `voice` (None: nothing selected, with `error` when the selection could not be read)."""
        keep = self.clips.currentRow() if voice is not None and self.voice is not None and voice.id == self.voice.id \
            else 0
        self.voice = voice
        self.clips.clear()
        if voice is None:
            self.header.setText(error or EMPTY_HINT)
            self.clips.setVisible(False)
            self.play_button.setVisible(False)
            self.preview_button.setEnabled(False)
            return
        source = f"<br><small>Source: {voice.consent}</small>" if voice.consent else ""
        tuned = (f"<br><small>Fine-tuned: {html.escape(voice.lora.note or 'with a LoRA')}</small>"
                 if voice.lora is not None else "")
        self.header.setText(f"<b>{voice.name}</b>{source}{tuned}")
        icon = self.style().standardIcon(QStyle.StandardPixmap.SP_MediaPlay)
        for clip in voice.clips:
            self.clips.addItem(self._row(voice, clip, icon))
        self.clips.setVisible(True)
        self.play_button.setVisible(True)
        self.preview_button.setEnabled(True)
        self.clips.setCurrentRow(min(max(keep, 0), self.clips.count() - 1))
        self.clips.updateGeometry()

    def _row(self, voice: Voice, clip: Clip, icon) -> QListWidgetItem:  # noqa: ANN001
        number = clip.id.lstrip("c")
        warnings = clip_warnings(self.library.clip_path(voice, clip))
        lines = [f"Clip {number} · {clip.duration_s:.1f} s", f"“{clip.transcript}”"]
        lines += [f"⚠ {w}" for w in warnings]
        item = QListWidgetItem(icon, "\n".join(lines))
        item.setData(Qt.ItemDataRole.UserRole, clip.id)
        item.setData(Qt.ItemDataRole.AccessibleTextRole,
                     f"Clip {number}, {clip.duration_s:.1f} seconds: {clip.transcript}"
                     + "".join(f". Warning: {w}" for w in warnings))
        item.setToolTip("\n".join(["Enter, Space or double-click plays it."] + [f"⚠ {w}" for w in warnings]))
        return item

    def play(self, row: int | None = None) -> None:
        """Play clip `row` of the shown voice (the selected row when None)."""
        row = self.clips.currentRow() if row is None else row
        if self.voice is None or not 0 <= row < len(self.voice.clips):
            return
        reason = play_file(self.library.clip_path(self.voice, self.voice.clips[row]))
        if reason:
            self.message.emit(reason)
