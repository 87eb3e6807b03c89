"""The pieces of a render plan (`fleet.py`): its scenes (a heading starts one) with what each has kept, the check
that audio from a server can be speech, and the deadline that stops a member slower than its pace. Torch-free."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from s2studio.engine.api import LineFinished, LineSpec, SynthesisRequest

CHARS_PER_SECOND = 14.0
"""Rough speaking rate, for a line's expected length before it is rendered (deadlines, longest first)."""


@dataclass
class Scene:
    index: int
    lines: list[LineSpec]
    offset: int
    """Index of the scene's first line in the request (its seed is base + offset, as in a single render)."""
    tries: int = 0
    bounces: int = 0
    """Times a busy server gave it back (every `fleet.BUSY_PER_TRY` of them count as one try: never an endless loop)."""
    last_error: str = ""
    kept: list[LineFinished] = field(default_factory=list)

    @property
    def expected_s(self) -> float:
        return sum(len(ln.text) for ln in self.lines) / CHARS_PER_SECOND


def split_scenes(request: SynthesisRequest) -> list[Scene]:
    scenes: list[Scene] = []
    for i, line in enumerate(request.lines):
        if not scenes or line.line_id in request.scene_starts:
            scenes.append(Scene(len(scenes), [], i))
        scenes[-1].lines.append(line)
    return scenes


def garbage(audio: np.ndarray) -> str:
    """Why `audio` cannot be speech (empty, not finite, louder than any voice), or ""."""
    if not len(audio):
        return "no audio"
    if not np.isfinite(audio).all():
        return "samples that are not numbers"
    rms = float(np.sqrt(np.mean(np.square(audio, dtype=np.float64))))
    if rms > 0.5 or float(np.max(np.abs(audio))) > 1.5:
        return f"noise, not speech (RMS {rms:.2f})"
    return ""


class Deadline:
    """Sets `stop` when a line takes longer than its deadline (or when the whole render is cancelled)."""

    def __init__(self, stop: threading.Event, cancel: threading.Event) -> None:
        self._stop, self._cancel = stop, cancel
        self._timer: threading.Timer | None = None
        self.fired = False
        self._relay = threading.Thread(target=self._follow, daemon=True)
        self._done = threading.Event()
        self._relay.start()

    def _follow(self) -> None:
        while not self._done.wait(0.1):
            if self._cancel.is_set():
                self._stop.set()
                return

    def _fire(self) -> None:
        self.fired = True
        self._stop.set()

    def arm(self, seconds: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        self._done.set()
        if self._timer is not None:
            self._timer.cancel()
