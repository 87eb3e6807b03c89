"""Playback half of the main window: play/pause, play a line or from the cursor, follow the playhead
in the waveform and the editor, and start playing as soon as a render's first audio arrives."""

from __future__ import annotations

from s2studio.engine import api
from s2studio.ui.colors import is_dark, speaker_color


AUTOPLAY_LEAD_S = 2.0
"""Audio buffered before live playback starts when the engine is slower than real time."""


class PlaybackMixin:
    """Mixed into MainWindow; uses its player, buffer, session, script, editor, waveform and player bar."""

    def _audio_grew(self, start: int) -> None:
        """Follow the render; start playing once enough audio is ahead that playback will not stall.

        Faster than real time (RTF < 0.9), the first chunk is enough. Slower, playback waits for
        AUTOPLAY_LEAD_S of audio so that short stalls are absorbed (it never skips: an underrun only
        pauses the playhead at the rendered end)."""
        self.waveform.refresh(start)
        self._update_time()
        line_id = getattr(self, "_autoplay_from", None)
        if line_id is None or not self.session.busy or not getattr(self, "autoplay", True):
            return
        origin = self.session.start_of(line_id) or 0
        ahead = (self.buffer.length - origin) / api.SAMPLE_RATE
        rtf = getattr(self, "_last_rtf", 0.0)
        if rtf >= 0.9 and ahead < AUTOPLAY_LEAD_S:
            return
        self._autoplay_from = None
        if not self.player.playing:
            self.player.seek(origin)
            self.player.play()

    def _timeline_changed(self) -> None:
        dark = is_dark(self.palette())
        self.waveform.set_labels({ln.line_id: (ln.speaker, speaker_color(ln.speaker, dark)) for ln in self.script.lines})
        self.waveform.set_boundaries(self.session.boundaries)
        self.waveform.refresh(0)
        self._update_time()

    def play_pause(self) -> None:
        if self.player.playing:
            self.player.pause()
        elif not self.player.play() and self.player.unavailable_reason:
            self.player_bar.set_notice(self.player.unavailable_reason)

    def play_line(self, line_id: str) -> None:
        start = self.session.start_of(line_id)
        if start is not None:
            self.player.seek(start)
            self.player.play()

    def play_from_cursor(self) -> None:
        line = self.cursor_line()
        if line is not None:
            self.play_line(line.line_id)

    def _update_time(self) -> None:
        self.player_bar.set_time(self.player.position / api.SAMPLE_RATE, self.buffer.length / api.SAMPLE_RATE)

    def _position(self, sample: int) -> None:
        self.waveform.set_playhead(sample)
        self._update_time()
        line_id = self.session.line_at(sample) if self.player.playing else None
        self.waveform.set_current_line(line_id)
        line = self.script.line(line_id) if line_id else None
        self.editor.set_playing_block(line.source_line - 1 if line else -1)

    def _play_state(self, playing: bool) -> None:
        self.actions_by_name["play_pause"].setIcon(self.style().standardIcon(
            self.style().StandardPixmap.SP_MediaPause if playing else self.style().StandardPixmap.SP_MediaPlay))
        if not playing:
            self.editor.set_playing_block(-1)
            self.waveform.set_current_line(None)
