"""The transport as the window offers it: play and pause, play one line alone, loop the selected line, A/B
inside the loop, step by seconds; and the playhead shown where it is heard (the waveform, the time, the
editor's 'now playing' band). Composed by the window over the player, the timeline and the widgets."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QStyle

from s2studio.audio.timeline import Timeline
from s2studio.engine.api import SAMPLE_RATE
from s2studio.state.script import Line
from s2studio.ui.control.document import Document
from s2studio.ui.control.player import Player
from s2studio.ui.player.player_bar import PlayerBar
from s2studio.ui.script.editor import ScriptEditor


class Transport(QObject):
    loop_changed = Signal()
    """A line started or stopped looping (the takes panel shows it)."""

    def __init__(self, player: Player, timeline: Timeline, bar: PlayerBar, editor: ScriptEditor, document: Document,
                 actions: dict[str, QAction], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.player, self.timeline, self.bar, self.editor, self.document = player, timeline, bar, editor, document
        self.waveform = bar.waveform
        self._loop_action = actions["loop_line"]
        self._play_action = actions["play_pause"]
        player.position_changed.connect(self._position)
        player.state_changed.connect(self._play_state)
        self.waveform.seek_requested.connect(player.seek)

    def selected(self) -> Line | None:
        return self.editor.line_at_cursor(self.document.script)

    # -- commands --------------------------------------------------------------------------------

    def play_pause(self) -> None:
        if self.player.playing:
            self.player.pause()
        elif not self.player.play() and self.player.unavailable_reason:
            self.bar.set_notice(self.player.unavailable_reason)

    def play_line(self, line_id: str) -> None:
        """Play one line alone: it stops at the line's end."""
        self._check_loop(False)
        self.player.play_line(line_id)

    def play_from_cursor(self) -> None:
        """Play the timeline on from the start of the selected line."""
        line = self.selected()
        bounds = self.timeline.layout.bounds(line.line_id) if line else None
        if bounds is not None:
            self.player.seek(bounds[0])
            self.player.play()

    def set_looping(self, on: bool) -> None:
        """Loop the selected line (the Loop action, L, the takes panel's Loop), or stop looping."""
        line = self.selected()
        if on and line is not None and self.timeline.layout.bounds(line.line_id) is not None:
            if self.player.playing:
                self.player.set_loop(line.line_id)
            else:
                self.player.play_line(line.line_id, loop=True)
            self.waveform.set_loop_line(line.line_id)
        else:
            self._check_loop(False)
            self.player.set_loop(None)
            self.waveform.set_loop_line(None)
        self.loop_changed.emit()

    def request_loop(self, on: bool) -> None:
        """The takes panel's Loop button (for the selected line, the one it shows)."""
        self._check_loop(on)

    def compare(self, line_id: str) -> None:
        """A/B: the pick was switched; the line loops from its start with the new take."""
        self.player.play_line(line_id, loop=True)
        self.waveform.set_loop_line(line_id)
        self._check_loop(True, apply=False)
        self.loop_changed.emit()

    def step(self, seconds: float) -> None:
        self.player.seek(self.player.position + int(seconds * SAMPLE_RATE))

    def to_end(self) -> None:
        self.player.seek(self.timeline.layout.end)

    def timeline_changed(self, lines_moved: bool = True) -> None:
        """Lines moved (or a take swapped), or only the streaming line grew (`lines_moved=False`)."""
        self.waveform.refresh(lines_moved)
        end = self.timeline.layout.end
        if self.player.position > end and not self.player.playing:  # lines went: no playhead past the end
            self.player.seek(end)
        self._show_time()

    # -- what the player says ---------------------------------------------------------------------

    def _check_loop(self, on: bool, apply: bool = True) -> None:
        """Check the Loop action; `apply=False`: only show it (the player loops already)."""
        if self._loop_action.isChecked() == on:
            return
        if apply:
            self._loop_action.setChecked(on)
        else:
            self._loop_action.blockSignals(True)
            self._loop_action.setChecked(on)
            self._loop_action.blockSignals(False)

    def _show_time(self) -> None:
        self.bar.set_time(self.player.position / SAMPLE_RATE, self.timeline.layout.end / SAMPLE_RATE)

    def _position(self, sample: int) -> None:
        self.waveform.set_playhead(sample, moving=self.player.playing)
        self._show_time()
        line_id = self.timeline.layout.line_at(sample) if self.player.playing else None
        self.waveform.set_current_line(line_id)
        line = self.document.script.line(line_id) if line_id else None
        self.editor.set_playing_block(line.source_line - 1 if line else -1)

    def _play_state(self, playing: bool) -> None:
        icon = QStyle.StandardPixmap.SP_MediaPause if playing else QStyle.StandardPixmap.SP_MediaPlay
        self._play_action.setIcon(self.bar.style().standardIcon(icon))
        if not playing:
            self.editor.set_playing_block(-1)
            self.waveform.set_current_line(None)
            if self._loop_action.isChecked():
                self._check_loop(False, apply=False)
                self.waveform.set_loop_line(None)
                self.loop_changed.emit()
