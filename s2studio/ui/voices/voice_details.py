"""The selected voice's details under the voice list: its name and source note, every reference clip as a row
(number, duration, transcript, the warnings of `check_clip`) that plays when activated, and Preview voice.

A clip plays through `ui.control.one_shot.play_file`, which reports a reason instead of raising: a missing
PortAudio or a vanished device becomes a status-bar message. Preview voice asks the window's `VoicePreview`
(on the engine host) for the voice's test sentence and plays it when it is ready.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QKeyEvent, QResizeEvent
from PySide6.QtWidgets import (QAbstractItemView, QHBoxLayout, QLabel, QListWidget, QListWidgetItem,
                               QPushButton, QSizePolicy, QStyle, QVBoxLayout, QWidget)

from s2studio.errors import UserError
from s2studio.state.voices import Clip, Voice, VoiceLibrary, check_clip
from s2studio.ui.control.one_shot import play_file

if TYPE_CHECKING:
    from s2studio.ui.control.preview import VoicePreview

EMPTY_HINT = "Drop a WAV here, browse for one or record from the microphone to clone a voice."


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
    """A one-line notice for the status bar (why a clip or the preview could not be played)."""

    def __init__(self, library: VoiceLibrary, preview: VoicePreview | None = None,
                 parent: QWidget | None = None) -> None:
        """`preview`: the window's voice preview (None: no engine, no Preview voice button)."""
        super().__init__(parent)
        self.setObjectName("voiceDetails")
        self.library = library
        self.preview = preview
        self.voice: Voice | None = None
        if preview is not None:
            preview.message.connect(self.message)
            preview.ready.connect(self._preview_ready)
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
        self.preview_button.clicked.connect(self.preview_voice)
        self.preview_button.setVisible(preview is not None)
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

    def preview_voice(self) -> None:
        """Hear the shown voice say the test sentence (rendered once per voice and model, then cached)."""
        if self.voice is None or self.preview is None:
            return
        try:
            voice = self.library.get(self.voice.id)
        except UserError as exc:
            self.message.emit(str(exc))
            return
        self.preview.preview(voice)

    def _preview_ready(self, voice_id: str, path: Path) -> None:
        reason = play_file(path)
        if reason:
            self.message.emit(reason)
        elif self.voice is not None and voice_id == self.voice.id:
            self.message.emit("Playing the preview.")
