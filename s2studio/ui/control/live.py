"""Play while rendering: the player starts on the first line of a render as soon as enough of it is there
that playback will not stall, and waits at the end of the timeline while the job runs, or, where scenes render
side by side, at the earliest line not finished yet (`Player.set_hold`), playing on in script order as it
lands. How much is enough comes from the render's measured pace (`Pace.lead_s`): a render faster than real
time starts at once, a slower one once the audio in hand covers what the render will lag behind by the end.
QtCore only."""

from __future__ import annotations

from PySide6.QtCore import QObject

from s2studio.engine import api
from s2studio.ui.control.player import Player, playable_end
from s2studio.ui.control.session import RenderSession

FAST_RTF = 0.9
"""Below this real-time factor the engine outruns the player: the first chunk is enough to start."""


class LivePlayback(QObject):
    def __init__(self, session: RenderSession, player: Player, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.session, self.player = session, player
        self.enabled = True
        """Play while rendering (tests and the screenshot tool turn it off)."""
        self._from: str | None = None
        """The first line of the running render, until playback has started from it."""
        self._rtf = 0.0
        self._single = False
        """The render is of one line: hearing it after the render plays that line alone."""
        session.busy_changed.connect(self._busy_changed)
        session.progress.connect(self._on_progress)
        session.audio_grew.connect(self._audio_grew)
        session.finished.connect(self._finished)
        session.failed.connect(lambda _message: self._stop_waiting())
        session.timeline_changed.connect(self._follow)
        session.rendering_changed.connect(lambda _lines: self._follow())
        self._hold_line: str | None = None
        """The earliest line of the running render not finished yet, while the playhead must wait before it."""

    def _follow(self) -> None:
        """Hold the whole timeline's play at the render's earliest unfinished line (its lines pend in script
        order), so that a later scene's lines rendered first are heard after it, never instead of it."""
        first = next(iter(self.session.pending), None)
        hold = None if first is None else self.session.timeline.wait_point(first)
        self._hold_line = None if hold is None else first
        self.player.set_hold(hold)

    def waiting_for(self) -> str:
        """'line N' (its row in the editor) while the playhead waits for a line that is not streaming in (it comes
        whole, rendered beside an earlier scene), else ''."""
        line_id = self._hold_line
        script = self.session.document.script
        i = None if line_id is None or self.player.ahead() > 0 else script.position(line_id)
        return "" if i is None else f"line {script.line_rows[i]}"

    def _busy_changed(self, busy: bool) -> None:
        self.player.set_wait_at_end(busy)
        self._follow()
        if busy and self.session.pending:
            self._from, self._rtf = next(iter(self.session.pending)), 0.0
            self._single = len(self.session.pending) == 1

    def _on_progress(self, event: api.Progress) -> None:
        self._rtf = event.rtf
        self.player.set_buffer_lead(self.session.pace.lead_s())

    def _audio_grew(self, _start: int) -> None:
        """Faster than real time (RTF < FAST_RTF), the first chunk is enough. Slower, playback waits for
        `Pace.lead_s` of audio (it never skips: running dry, the player buffers at the rendered end)."""
        if self._from is None or not self.enabled:
            return
        bounds = self.session.timeline.layout.bounds(self._from)
        if bounds is None:  # the first line is held (it has an old take): start when its new take is in
            return
        layout = self.session.timeline.layout
        ahead = (playable_end(layout, bounds[0], self.player.hold) - bounds[0]) / api.SAMPLE_RATE
        if self._rtf >= FAST_RTF and ahead < self.session.pace.lead_s():
            return
        self._start(bounds[0])

    def _finished(self, cancelled: bool) -> None:
        line_id, self._from = self._from, None
        if line_id is None or cancelled or not self.enabled or self.player.playing:
            return
        if self._single:  # a re-rendered line: hear the new take, not the rest of the script
            self.player.play_line(line_id)
            return
        bounds = self.session.timeline.layout.bounds(line_id)
        if bounds is not None:  # the render ended before enough audio was ahead to start earlier
            self._start(bounds[0])

    def _start(self, sample: int) -> None:
        self._from = None
        if not self.player.playing:
            self.player.seek(sample)
            self.player.play()

    def _stop_waiting(self) -> None:
        self._from = None
