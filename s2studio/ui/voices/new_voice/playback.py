"""Playing one clip card of the new-voice dialog: the kept part, as the voice would store it, with a playhead
moving over the card's waveform; pressing Play again, or playing another card, stops it."""

from __future__ import annotations

from collections.abc import Callable
from time import monotonic

from PySide6.QtCore import QObject, QTimer, Signal

from s2studio.audio.clip_prep import prepared
from s2studio.ui.control.one_shot import play_samples, stop_playing
from s2studio.ui.voices.new_voice.clip_card import ClipCard

TICK_MS = 40
"""How often the playhead moves."""


class CardPlayback(QObject):
    """Plays the card that `card_of(key)` finds; `refused(reason)` when the device cannot play."""

    refused = Signal(str)

    def __init__(self, card_of: Callable[[int], ClipCard | None], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.card_of = card_of
        self.playing: int | None = None
        """The key of the card that plays (None: none)."""
        self._started = 0.0
        self._timer = QTimer(self, interval=TICK_MS)
        self._timer.timeout.connect(self._tick)

    def toggle(self, key: int, normalize: bool) -> None:
        """Play card `key` (loudness evened out when `normalize`), or stop it when it is the one playing."""
        card = self.card_of(key)
        if card is None:
            return
        if self.playing == key:
            self.stop()
            return
        self.stop()
        d = card.draft
        reason = play_samples(prepared(d.kept_mono(), d.rate, None, normalize), d.rate)
        if reason:
            self.refused.emit(reason)
            return
        self.playing, self._started = key, monotonic()
        card.play_button.setText("■ Stop")
        self._timer.start()

    def stop_if(self, key: int) -> None:
        """Stop when card `key` is the one playing (it is removed, or its kept part changed)."""
        if self.playing == key:
            self.stop()

    def stop(self, stop_device: bool = True) -> None:
        self._timer.stop()
        card = self.card_of(self.playing) if self.playing is not None else None
        if card is not None:
            card.play_button.setText("▶ Play")
            card.waveform.set_playhead(None)
        if self.playing is not None and stop_device:
            stop_playing()
        self.playing = None

    def _tick(self) -> None:
        card = self.card_of(self.playing) if self.playing is not None else None
        if card is None:
            self.stop()
            return
        at = card.draft.span.start + monotonic() - self._started
        if at >= card.draft.span.end:
            self.stop(stop_device=False)
            return
        card.waveform.set_playhead(at)
