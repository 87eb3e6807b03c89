"""The `--events` log and the progress bar of `synth --script` (see `script_render.py`).

The log is JSON lines, one per engine event, with counts instead of sample or code data, so a
render can be checked (first audio after how many frames, chunk sizes, timing) without the audio.
It is kept in memory (a few hundred bytes per line) and staged with the render's other outputs, so it
appears only when the whole render succeeded, together with the audio.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from s2studio.engine.api import (
    SAMPLE_RATE, AudioChunk, ClipEncoded, Engine, Event, JobFailed, JobFinished, JobStarted, LineFinished,
    LineStarted, ModelLoading, ModelReady, Progress,
)
from s2studio.state.atomic import OutputSet


def event_record(event: Event, wall_s: float, frames: int | None = None) -> dict[str, Any]:
    """One `--events` line: what happened, without sample or code data."""
    rec: dict[str, Any] = {"kind": type(event).__name__, "job_id": event.job_id}
    if hasattr(event, "line_id"):
        rec["line_id"] = event.line_id
    if isinstance(event, AudioChunk):
        rec.update(frames=frames, start_sample=event.start_sample, samples=int(len(event.samples)))
    elif isinstance(event, Progress):
        rec.update(frames=event.frames, expected=event.expected, rtf=round(event.rtf, 4))
    elif isinstance(event, LineStarted):
        rec["frames"] = 0
    elif isinstance(event, LineFinished):
        rec.update(frames=int(event.codes.shape[1]), samples=int(len(event.audio)), seed=event.seed,
                   take_id=event.take_id, fingerprint=event.fingerprint)
    elif isinstance(event, JobStarted):
        rec["plan"] = list(event.plan)
    elif isinstance(event, ModelLoading):
        rec.update(progress=event.progress, message=event.message)
    elif isinstance(event, ModelReady):
        i = event.info
        rec["info"] = {"name": i.name, "device": i.device, "precision": i.precision, "sample_rate": i.sample_rate,
                       "codec_fingerprint": i.codec_fingerprint, "max_context": i.max_context}
    elif isinstance(event, ClipEncoded):
        rec.update(clip_id=event.clip_id, frames=int(event.codes.shape[1]), codec_fingerprint=event.codec_fingerprint)
    elif isinstance(event, JobFinished):
        rec["cancelled"] = event.cancelled
    elif isinstance(event, JobFailed):
        rec["error"] = event.error
    rec["wall_s"] = round(wall_s, 6)
    return rec


@dataclass
class EventLog:
    """The `--events` records (kept until `stage`) and the clock every record is timed by."""

    target: Path | None
    started: float = field(default_factory=time.perf_counter)
    _lines: list[str] = field(default_factory=list)

    def write(self, event: Event, frames: int | None = None) -> None:
        if self.target is not None:
            rec = event_record(event, time.perf_counter() - self.started, frames)
            self._lines.append(json.dumps(rec, ensure_ascii=False) + "\n")

    def relay(self, events: Iterable[Event]) -> Iterator[Event]:
        for ev in events:
            self.write(ev)
            yield ev

    def stage(self, files: OutputSet) -> None:
        """Add the log to the outputs committed together."""
        if self.target is not None:
            files.add(self.target, "".join(self._lines).encode("utf-8", "backslashreplace"))


class LoggedEncoder:
    """The engine as the render's jobs see it, with its encode events copied to the events log (the rest is the
    engine's own)."""

    def __init__(self, engine: Engine, log: EventLog) -> None:
        self.engine, self.log = engine, log

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def encode(self, request: Any, cancel: threading.Event) -> Iterator[Event]:
        return self.log.relay(self.engine.encode(request, cancel))


class ProgressBar:
    """`[#####.....] 3/7 lines  120 frames  RTF 0.42` on stderr, redrawn with `\\r` (TTY only)."""

    WIDTH = 24

    def __init__(self, stream: IO[str], enabled: bool) -> None:
        self.stream, self.enabled = stream, enabled
        self.total = self.done = self.frames_done = self.frames_line = self.samples = 0
        self.started = time.perf_counter()
        self._last = 0.0
        self._shown = False

    def rtf(self) -> float:
        seconds = self.samples / SAMPLE_RATE
        return (time.perf_counter() - self.started) / seconds if seconds else 0.0

    def update(self, force: bool = False) -> None:
        now = time.perf_counter()
        if not self.enabled or (not force and now - self._last < 0.1):
            return
        self._last = now
        filled = round(self.WIDTH * self.done / self.total) if self.total else 0
        bar = "#" * filled + "." * (self.WIDTH - filled)
        self.stream.write(f"\r[{bar}] {self.done}/{self.total} lines  {self.frames_done + self.frames_line} frames"
                          f"  RTF {self.rtf():.2f} ")
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self.update(force=True)
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False
