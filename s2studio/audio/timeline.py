"""The rendered timeline: lines placed one after another with a gap, growing while they render.

The same object drives the live player (read what is rendered so far) and export (the finished
mix and each line's position), so what you hear is what you export (peers.md §3.8). Lines render
in plan order; a line's start is known once every line before it has finished. Re-rendering one
line later (a new take) replaces its audio and shifts the lines after it.

Not thread-safe for writers: the GUI thread appends; a reader on another thread may call `read`,
which only copies from the current buffer (a buffer that grows is replaced, never resized in place).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from s2studio.audio import SAMPLE_RATE

Audio = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Segment:
    """Where one line sits on the timeline, in samples."""

    line_id: str
    start: int
    length: int
    """Samples rendered so far (the whole line once `finished`)."""
    finished: bool

    @property
    def end(self) -> int:
        return self.start + self.length


class Timeline:
    def __init__(self, line_ids: Sequence[str] = (), gap_s: float = 0.4, sample_rate: int = SAMPLE_RATE) -> None:
        if gap_s < 0:
            raise ValueError(f"gap must be >= 0 s, got {gap_s}")
        self.sample_rate = sample_rate
        self.gap = round(gap_s * sample_rate)
        self._ids: list[str] = []
        self._audio: dict[str, list[Audio]] = {}
        self._lengths: dict[str, int] = {}
        self._finished: set[str] = set()
        self._buf: Audio = np.zeros(sample_rate, np.float32)
        self._rendered = 0
        self.set_plan(line_ids)

    # ------------------------------------------------------------------ plan and writes

    def set_plan(self, line_ids: Sequence[str]) -> None:
        """The lines in order; audio of lines still in the plan is kept, other lines forgotten."""
        if len(set(line_ids)) != len(line_ids):
            raise ValueError("line ids in a plan must be unique")
        self._ids = list(line_ids)
        self._audio = {k: v for k, v in self._audio.items() if k in self._ids}
        self._lengths = {k: v for k, v in self._lengths.items() if k in self._ids}
        self._finished &= set(self._ids)
        self._rebuild()

    @property
    def line_ids(self) -> tuple[str, ...]:
        return tuple(self._ids)

    def append(self, line_id: str, start_sample: int, samples: Audio) -> None:
        """Add an `AudioChunk`: `start_sample` is its offset within the line."""
        if line_id not in self._lengths and line_id in self._ids:
            self._lengths[line_id] = 0
            self._audio[line_id] = []
        if line_id not in self._ids or line_id in self._finished:
            raise ValueError(f"line {line_id!r} is not an unfinished line of this timeline")
        if start_sample != self._lengths[line_id]:
            raise ValueError(f"chunk of {line_id!r} starts at {start_sample}, expected {self._lengths[line_id]}")
        chunk = np.asarray(samples, dtype=np.float32).reshape(-1)
        self._audio[line_id].append(chunk)
        self._lengths[line_id] += len(chunk)
        seg = self._segment_start(line_id)
        if seg is not None:  # every earlier line is finished: it is on the contiguous timeline
            self._write(seg + start_sample, chunk)
            self._rendered = max(self._rendered, seg + self._lengths[line_id])

    def finish_line(self, line_id: str, audio: Audio) -> None:
        """A `LineFinished` (or a new take): the line's final audio replaces its chunks."""
        if line_id not in self._ids:
            raise ValueError(f"line {line_id!r} is not in this timeline")
        final = np.asarray(audio, dtype=np.float32).reshape(-1).copy()
        before = self._lengths.get(line_id, 0)
        later = self._ids[self._ids.index(line_id) + 1:]
        rewrite = (line_id in self._finished or 0 < before != len(final)
                   or any(self._lengths.get(k) for k in later))
        self._audio[line_id] = [final]
        self._lengths[line_id] = len(final)
        self._finished.add(line_id)
        if rewrite:  # a new take, a length change or audio waiting after it: lay out again
            self._rebuild()
            return
        start = self._segment_start(line_id)
        if start is not None:
            self._write(start, final)
        self._rendered = self._contiguous_end()

    def clear_line(self, line_id: str) -> None:
        """Forget a line's audio (it will render again)."""
        self._audio.pop(line_id, None)
        self._lengths.pop(line_id, None)
        self._finished.discard(line_id)
        self._rebuild()

    # ------------------------------------------------------------------ reads

    @property
    def rendered_until(self) -> int:
        """Samples from the start that are final or being rendered, with no hole before them."""
        return self._rendered

    @property
    def complete(self) -> bool:
        return bool(self._ids) and all(i in self._finished for i in self._ids)

    def segments(self) -> list[Segment]:
        """Lines on the contiguous timeline (those whose start is known), in order."""
        out = []
        pos = 0
        for i, line_id in enumerate(self._ids):
            if i:
                pos += self.gap
            length = self._lengths.get(line_id, 0)
            out.append(Segment(line_id, pos, length, line_id in self._finished))
            if line_id not in self._finished:
                break
            pos += length
        return out

    def line_start(self, line_id: str) -> int | None:
        return self._segment_start(line_id)

    def read(self, start: int, frames: int) -> Audio:
        """`frames` samples from `start`; zeros where nothing is rendered yet."""
        out = np.zeros(frames, np.float32)
        self.read_into(out, start)
        return out

    def read_into(self, out: Audio, start: int) -> int:
        """Copy into `out` (no allocation); returns how many samples were rendered audio."""
        end = self._rendered  # read before the buffer: a writer grows the buffer first
        buf = self._buf
        n = max(0, min(len(out), end - start, len(buf) - start))
        if n:
            out[:n] = buf[start:start + n]
        out[n:] = 0.0
        return n

    def line_audio(self, line_id: str) -> Audio:
        parts = self._audio.get(line_id, [])
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    def mix(self) -> Audio:
        """The contiguous rendered audio (the whole timeline once `complete`)."""
        return self.read(0, self._rendered)

    # ------------------------------------------------------------------ internals

    def _segment_start(self, line_id: str) -> int | None:
        return next((s.start for s in self.segments() if s.line_id == line_id), None)

    def _contiguous_end(self) -> int:
        segs = self.segments()
        if not segs:
            return 0
        last = segs[-1]
        end = last.end
        if last.finished and len(segs) < len(self._ids):
            end += self.gap  # the silence before the next line is decided already
        return end

    def _write(self, at: int, chunk: Audio) -> None:
        need = at + len(chunk)
        if need > len(self._buf):
            grown = np.zeros(max(need, 2 * len(self._buf)), np.float32)
            keep = min(self._rendered, len(self._buf))
            grown[:keep] = self._buf[:keep]
            self._buf = grown  # readers holding the old buffer keep valid data
        self._buf[self._rendered:at] = 0.0
        self._buf[at:need] = chunk

    def _rebuild(self) -> None:
        self._rendered = 0
        self._buf = np.zeros(max(self.sample_rate, len(self._buf)), np.float32)
        for seg in self.segments():
            if seg.length:
                self._write(seg.start, self.line_audio(seg.line_id))
            self._rendered = seg.end
        self._rendered = self._contiguous_end()
