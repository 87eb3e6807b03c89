"""The fleet's parts and settings: who renders (`Member`: an engine, its requests in flight, its live figures and
status line) and how patiently (`FleetConfig`: tries, deadlines), and where a render goes (`FleetSettings`). The
plan that shares a render out over them is `fleet.py`. Torch-free."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from s2studio.engine.api import Backend, Engine

if TYPE_CHECKING:
    from s2studio.engine.remote import RemoteSettings


@dataclass(frozen=True)
class FleetConfig:
    """How patient the plan is: tries of a scene before it fails, and each line's deadline: `pace_factor` times the
    member's measured seconds per second of audio for the line's expected length, at least `min_deadline_s`
    (`first_deadline_s` until a line has finished there)."""

    retries: int = 3
    first_deadline_s: float = 600.0
    pace_factor: float = 4.0
    min_deadline_s: float = 20.0


@dataclass(frozen=True)
class FleetSettings:
    """Where a render goes: this computer (0: not at all; None: as many scenes at once as its batch slots; N: at
    most N of them) and servers with their requests in flight."""

    servers: tuple["RemoteSettings", ...]
    slots: tuple[int, ...]
    local_slots: int | None = None


@dataclass
class Member:
    """One engine of the fleet and its live status line."""

    engine: Engine
    slots: int
    """Requests in flight; this computer's: at most this many of its batch slots (0: all of them)."""
    label: str
    backend: Backend = field(default_factory=lambda: Backend("local"))
    done: int = 0
    frames: int = 0
    """Frames of audio (`FRAME_SAMPLES` each) of the lines finished here."""
    started: float = 0.0
    """When the render began (`time.monotonic`): its frames/s are over the render's time, all slots together."""
    ended: float = 0.0
    """When it ended (0 while it runs)."""
    failures: int = 0
    in_a_row: int = 0
    audio_s: float = 0.0
    busy_s: float = 0.0
    paused_until: float = 0.0
    dropped: str = ""
    unusable: bool = False
    """It did not load: left out of every render (a member dropped during a render gets the next one)."""

    def fresh(self) -> None:
        """A new render: its own figures, and a chance for a member dropped during the last one."""
        self.done = self.frames = self.failures = self.in_a_row = 0
        self.audio_s = self.busy_s = 0.0
        self.started, self.ended = time.monotonic(), 0.0
        self.dropped = self.dropped if self.unusable else ""

    def pace(self) -> float | None:
        """Wall seconds per second of audio, once a line has finished here."""
        return self.busy_s / self.audio_s if self.audio_s > 0 else None

    def status(self) -> str:
        """The live line: lines done, frames/s since the render began, failures (and why it was dropped)."""
        elapsed = (self.ended or time.monotonic()) - self.started
        fps = self.frames / elapsed if self.frames and elapsed > 0 else 0.0
        state = f" — dropped: {self.dropped}" if self.dropped else ""
        return f"{self.label}: {self.done} lines · {fps:.1f} frames/s · {self.failures} failures{state}"


def no_seed_note(label: str, kind: str) -> str:
    return f"{label} does not take seeds ({kind}): its takes cannot be re-rendered from their seed"

