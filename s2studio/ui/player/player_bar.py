"""The player strip at the bottom: transport buttons, the waveform and the time."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QFontDatabase
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from s2studio.ui.control.player import PlaybackBuffer
from s2studio.ui.player.waveform import WaveformView


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{seconds % 60:04.1f}"


def tool_button(action: QAction) -> QToolButton:
    b = QToolButton()
    b.setDefaultAction(action)
    b.setAutoRaise(True)
    b.setAccessibleName(str(action.data() or action.text()))
    b.setObjectName("btn:" + action.objectName())
    return b


class PlayerBar(QWidget):
    def __init__(self, buffer: PlaybackBuffer, actions: dict[str, QAction], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("playerBar")
        self.setAccessibleName("Player")
        outer = QHBoxLayout(self)
        outer.setContentsMargins(8, 6, 8, 8)
        outer.setSpacing(8)
        buttons = QVBoxLayout()
        buttons.setSpacing(2)
        self.play_button = tool_button(actions["play_pause"])
        self.from_cursor_button = tool_button(actions["play_from_cursor"])
        for b in (self.play_button, self.from_cursor_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        outer.addLayout(buttons)
        self.time_label = QLabel("0:00.0\n0:00.0")
        self.time_label.setAccessibleName("Playback time")
        self.time_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self.time_label.setFont(mono)
        self.time_label.setMinimumWidth(70)
        buttons.insertWidget(2, self.time_label)
        self.waveform = WaveformView(buffer)
        outer.addWidget(self.waveform, 1)
        self.notice = QLabel("")
        self.notice.setWordWrap(True)
        self.notice.setMaximumWidth(220)
        self.notice.setVisible(False)
        self.notice.setAccessibleName("Audio status")
        outer.addWidget(self.notice)

    def set_time(self, position_s: float, length_s: float) -> None:
        self.time_label.setText(f"{_clock(position_s)}\n{_clock(length_s)}")

    def set_notice(self, text: str) -> None:
        self.notice.setText(text)
        self.notice.setVisible(bool(text))
