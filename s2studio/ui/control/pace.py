"""How fast a render goes and how long it has left, steadied (pure Python: the status bar and live playback read it).

The engine reports, for the line it renders, the frames made so far and an estimate of the line's length
(`api.Progress`). Dividing by the time since the job started swings (348 → 197 → 117 → 57 s on a slow CPU):
each line starts with its prompt's prefill, seconds without a frame. So the pace keeps the two apart:

- the speed is frames per second *within* lines (between two reports of the same line);
- the start-up is the average time from one line's last report (or the job's start) to the next line's
  first one, and each line not started yet costs one;
- the frames left are forecast from the lines' text: frames per character of the finished lines times
  the characters left (before a line has finished, the engine's estimate for the line it renders); the
  current line counts at least a tenth of what it has made so far more, since a line that outgrows its
  estimate is not "done" (the engine then says "one frame left");
- the ETA shown counts down with the clock and moves toward the new forecast by half the gap per second
  of render time at most, so it neither swings nor reads 0 while work remains.

`lead_s` says how much audio live playback should hold before it starts (or resumes after running dry) so
that it does not run dry again: at a real-time factor r > 1 the render makes 1/r s of audio per second, so
playing the `remaining` seconds left needs `remaining × (1 − 1/r)` seconds in hand.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from s2studio.units import FRAMES_PER_SECOND

MIN_LEAD_S = 0.5
"""Audio in hand before playing even when the render outruns playback: absorbs a slow frame."""
MAX_LEAD_S = 60.0


@dataclass
class Pace:
    chars: dict[str, int] = field(default_factory=dict)
    """Each line of the job (its id) and the characters of its text, in render order."""
    started: float = 0.0
    """When the job was handed to the engine (the clock of `update`)."""
    rtf: float = 0.0
    """The engine's last real-time factor (wall seconds per second of audio)."""
    eta_s: float | None = None
    """Seconds left, steadied; None until there is a speed to divide by."""
    _done_frames: int = 0
    _done_chars: int = 0
    _done_lines: int = 0
    _line_id: str = ""
    _line_frames: int = 0
    _line_expected: int = 1
    _last: float | None = None
    """Time of the previous report."""
    _in_line: tuple[float, int] = (0.0, 0)
    """(seconds, frames) measured between reports of the same line: the speed."""
    _start_up: tuple[float, int] = (0.0, 0)
    """(seconds, lines) from a line's end (or the job's start) to the next line's first report."""
    _order: dict[str, int] = field(default_factory=dict, repr=False)
    """Each line's place in `chars`."""
    _chars_after: list[int] = field(default_factory=list, repr=False)
    """Characters (at least 1 a line) of the lines after each place: what is left is one lookup, however long
    the job (a report comes some 20 times a line)."""

    def __post_init__(self) -> None:
        self._order = dict(zip(self.chars, itertools.count()))
        counts = map(max, reversed(self.chars.values()), itertools.repeat(1))
        self._chars_after = list(itertools.accumulate(counts, initial=0))[::-1]

    @property
    def lines(self) -> int:
        return max(len(self.chars), 1)

    @property
    def frames(self) -> int:
        """Frames made in the job so far."""
        return self._done_frames + self._line_frames

    @property
    def fps(self) -> float:
        """Frames per second while a line renders (0 until measured)."""
        seconds, frames = self._in_line
        return frames / seconds if seconds > 0 else 0.0

    def update(self, now: float, line_id: str, frames: int, expected: int, rtf: float) -> None:
        """One `api.Progress` of the job at time `now` (seconds, the clock of `started`)."""
        previous = self._last if self._last is not None else self.started
        dt = max(now - previous, 0.0)
        if line_id != self._line_id:
            if self._line_id:  # the line before finished
                self._done_frames += self._line_frames
                self._done_chars += self._chars_of(self._line_id)
                self._done_lines += 1
            self._line_id, self._line_frames = line_id, 0
            seconds, lines = self._start_up
            self._start_up = (seconds + dt, lines + 1)
        else:
            seconds, made = self._in_line
            self._in_line = (seconds + dt, made + max(frames - self._line_frames, 0))
        self._line_frames, self._line_expected, self.rtf = frames, max(expected, 1), rtf
        self._last = now
        if self.fps > 0:
            self._steady(self.forecast_s(), dt)

    def _chars_of(self, line_id: str) -> int:
        return max(self.chars.get(line_id, 1), 1)

    def _place(self) -> int:
        """The place of the line being rendered (before the first report: the first line)."""
        place = self._order.get(self._line_id)
        return place if place is not None else self._done_lines

    def _later_lines(self) -> int:
        return max(len(self.chars) - self._place() - 1, 0)

    def _later_chars(self) -> int:
        return self._chars_after[min(self._place() + 1, len(self.chars))]

    def remaining_frames(self) -> float:
        if self._done_chars:
            per_char = self._done_frames / self._done_chars
            estimate = per_char * self._chars_of(self._line_id)
        else:
            per_char = self._line_expected / self._chars_of(self._line_id)
            estimate = self._line_expected
        current = max(estimate - self._line_frames, 0.1 * self._line_frames, 1.0)
        return current + per_char * self._later_chars()

    def remaining_audio_s(self) -> float:
        return self.remaining_frames() / FRAMES_PER_SECOND

    def forecast_s(self) -> float:
        """Render time left: the frames left at the measured speed, and a start-up per line not started."""
        seconds, lines = self._start_up
        start_up = seconds / lines if lines else 0.0
        return self.remaining_frames() / self.fps + start_up * self._later_lines()

    def _steady(self, target: float, dt: float) -> None:
        """Count down by `dt`, then move toward `target` by at most half the gap per second."""
        if self.eta_s is None:
            self.eta_s = target
            return
        counted = self.eta_s - dt
        self.eta_s = max(counted + min(0.5, 0.5 * dt) * (target - counted), 1.0)

    @property
    def fraction(self) -> float:
        """0..1 of the job, by lines (the current one by its frames against its estimate)."""
        line = min(self._line_frames / max(self._line_expected, self._line_frames, 1), 1.0)
        return min((self._done_lines + line) / self.lines, 1.0)

    def lead_s(self) -> float:
        """Audio live playback should have in hand before it plays (module docstring)."""
        if self.rtf <= 1.0 or not math.isfinite(self.rtf):
            return MIN_LEAD_S
        return min(max(self.remaining_audio_s() * (1 - 1 / self.rtf), MIN_LEAD_S), MAX_LEAD_S)

    def eta_text(self) -> str:
        if self.eta_s is None:
            return "ETA …"
        s = self.eta_s
        if s < 60:
            return f"ETA {max(round(s), 1)} s"
        return f"ETA {int(s // 60)} min {int(s % 60):02d} s"
