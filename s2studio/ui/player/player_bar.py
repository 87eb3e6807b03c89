"""The player strip at the bottom: transport buttons, the time, the waveform with its scroll bar, zoom and
follow. The transport keys of a DAW (Space, Home, End, ←/→ by 5 s, +/−/0 to zoom, L to loop the line)
work while the player has the focus (a click on the waveform gives it)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QFontDatabase
from PySide6.QtWidgets import QHBoxLayout, QLabel, QScrollBar, QToolButton, QVBoxLayout, QWidget

from s2studio.audio.timeline import Timeline
from s2studio.ui.player.waveform import WaveformView


BUFFERING_TIP = "The render is slower than playback: playing on once enough is rendered ahead"


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
    def __init__(self, timeline: Timeline, actions: dict[str, QAction], parent: QWidget | None = None) -> None:
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
        buttons.addWidget(self.play_button)
        buttons.addWidget(self.from_cursor_button)
        self.time_label = QLabel("0:00.0 / 0:00.0")
        self.time_label.setAccessibleName("Playback time")
        self.time_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
        self.time_label.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.time_label.setToolTip("Playhead / length of the rendered timeline")
        buttons.addWidget(self.time_label)
        self.buffering = QLabel("Buffering…")
        self.buffering.setAccessibleName("Buffering")
        self.buffering.setToolTip(BUFFERING_TIP)
        self.buffering.setStyleSheet("color: #e0a030;")
        self.buffering.setVisible(False)
        buttons.addWidget(self.buffering)
        buttons.addStretch(1)
        outer.addLayout(buttons)
        centre = QVBoxLayout()
        centre.setSpacing(2)
        self.waveform = WaveformView(timeline)
        self.scrollbar = QScrollBar(Qt.Orientation.Horizontal)
        self.scrollbar.setAccessibleName("Scroll the timeline")
        self.scrollbar.valueChanged.connect(self._scrolled)
        self.waveform.view_changed.connect(self._sync_scrollbar)
        centre.addWidget(self.waveform, 1)
        centre.addWidget(self.scrollbar)
        outer.addLayout(centre, 1)
        view = QVBoxLayout()
        view.setSpacing(2)
        for name in ("loop_line", "follow_playhead", "zoom_in", "zoom_out", "zoom_fit"):
            button = tool_button(actions[name])
            button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
            view.addWidget(button)
        view.addStretch(1)
        outer.addLayout(view)
        self.notice = QLabel("")
        self.notice.setWordWrap(True)
        self.notice.setMaximumWidth(220)
        self.notice.setVisible(False)
        self.notice.setAccessibleName("Audio status")
        outer.addWidget(self.notice)
        self._syncing = False
        self._sync_scrollbar()

    def set_time(self, position_s: float, length_s: float) -> None:
        self.time_label.setText(f"{_clock(position_s)} / {_clock(length_s)}")

    def show_buffering(self, on: bool, waiting_for: str = "") -> None:
        """The playhead ran dry while a render runs: it buffers at the rendered end, or waits for `waiting_for` (a
        line that an earlier scene's render has not reached, while later scenes' lines are already here)."""
        if waiting_for:
            self.buffering.setText(f"Waiting for {waiting_for}…")
            self.buffering.setToolTip(f"Playback waits here until {waiting_for} is rendered, then plays on in order")
        else:
            self.buffering.setText("Buffering…")
            self.buffering.setToolTip(BUFFERING_TIP)
        self.buffering.setVisible(on)

    def set_notice(self, text: str) -> None:
        self.notice.setText(text)
        self.notice.setVisible(bool(text))

    def _scale(self) -> int:
        """Samples per step of the scroll bar: 1, or more where a book's hours would overflow its range."""
        return 1 + self.waveform.span() // (1 << 30)

    def _sync_scrollbar(self) -> None:
        w = self.waveform
        scale, lo = self._scale(), w.range()[0]
        self._syncing = True
        try:
            page = max(w.visible // scale, 1)
            self.scrollbar.setRange(0, max(0, w.span() // scale - page))
            self.scrollbar.setPageStep(page)
            self.scrollbar.setSingleStep(max(page // 10, 1))
            self.scrollbar.setValue((w.origin - lo) // scale)
            self.scrollbar.setEnabled(not w.fitted)
        finally:
            self._syncing = False

    def _scrolled(self, value: int) -> None:
        if not self._syncing:
            self.waveform.scroll_to(self.waveform.range()[0] + value * self._scale())
