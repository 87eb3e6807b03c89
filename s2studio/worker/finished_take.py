"""A finished line as the window receives it: the take's audio already held as its file will hold it.

Rounding a take's samples to its 24-bit file (`TakeSound.of`) is a few passes over seconds of audio. Done where the
event is put in the outbox, on the engine thread, it is off the window's thread, which then only files the take:
in a book's render the window's thread is the busiest, and takes arrive many a second.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from s2studio.engine import api
from s2studio.state.take_audio import TakeSound


@dataclass(frozen=True)
class FinishedTake(api.LineFinished):
    sound: TakeSound | None = None
    """`TakeSound.of(audio)`, made on the thread that put the event."""


def with_sound(event: api.LineFinished) -> FinishedTake:
    """The event with its take's sound made here (its other fields as they are)."""
    fields = {f.name: getattr(event, f.name) for f in dataclasses.fields(api.LineFinished)}
    return FinishedTake(**fields, sound=TakeSound.of(event.audio))
