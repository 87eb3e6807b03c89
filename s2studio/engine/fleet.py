"""The render plan: one request fanned out over several engines (this computer and servers), one timeline back.

`FleetEngine` is itself an `Engine`, so the studio and the CLI drive it as they drive one engine. Its `generate`
splits the request into scenes (a heading starts one: `SynthesisRequest.scene_starts`), queues them longest first,
keeps each member's number of requests in flight (`Member.slots`), and passes every event on under the one job id:
each line gets exactly one take, placed by its line id, so the timeline fills in script order wherever a scene ran.

Failures move work, never lose it: when a member refuses, breaks, goes quiet, sends garbage audio or is slower than
its deadline, the scene's finished lines are kept and the rest goes back to the queue for any member (the remainder
hears the kept lines as context where their codes exist); a scene fails, with one message naming the server and
the reason, after `retries` tries. A server answering 503 with Retry-After is paused that long and its scene goes
back without counting a try. A member that failed twice in a row is dropped for the rest of the render. The deadline
of a line is `pace_factor` times the member's measured seconds per second of audio (`first_deadline_s` until one
line has finished there). Every take carries its backend (`LineFinished.backend`). Torch-free.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from typing import TYPE_CHECKING

from s2studio.engine.api import (
    SAMPLE_RATE, AudioChunk, Backend, ContextTurn, EncodeRequest, Engine, Event, JobFailed, JobFinished, JobStarted,
    LineFinished, LineSpec, LineStarted, LoadRequest, ModelReady, Progress, SynthesisRequest, line_seed,
)

if TYPE_CHECKING:
    from s2studio.engine.remote import RemoteSettings

log = logging.getLogger(__name__)

BUSY_PER_TRY = 10
CHARS_PER_SECOND = 14.0
"""Rough speaking rate, for a line's expected length before it is rendered (deadlines, longest first)."""


@dataclass(frozen=True)
class FleetConfig:
    retries: int = 3
    first_deadline_s: float = 600.0
    pace_factor: float = 4.0
    min_deadline_s: float = 20.0


@dataclass(frozen=True)
class FleetSettings:
    """Where a render goes: this computer (its slots; 0: not at all) and servers with their requests in flight."""

    servers: tuple["RemoteSettings", ...]
    slots: tuple[int, ...]
    local_slots: int = 1


@dataclass
class Member:
    """One engine of the fleet and its live status line."""

    engine: Engine
    slots: int
    label: str
    backend: Backend = field(default_factory=lambda: Backend("local"))
    done: int = 0
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
        self.done = self.failures = self.in_a_row = 0
        self.audio_s = self.busy_s = 0.0
        self.dropped = self.dropped if self.unusable else ""

    def pace(self) -> float | None:
        """Wall seconds per second of audio, once a line has finished here."""
        return self.busy_s / self.audio_s if self.audio_s > 0 else None

    def status(self) -> str:
        speed = f", {self.audio_s / self.busy_s:.2f}x real time" if self.busy_s > 0 and self.audio_s > 0 else ""
        state = f" — dropped: {self.dropped}" if self.dropped else ""
        return f"{self.label}: {self.done} lines, {self.failures} failures{speed}{state}"


@dataclass
class _Scene:
    index: int
    lines: list[LineSpec]
    offset: int
    """Index of the scene's first line in the request (its seed is base + offset, as in a single render)."""
    tries: int = 0
    bounces: int = 0
    """Times a busy server gave it back (every `BUSY_PER_TRY` of them count as one try: never an endless loop)."""
    last_error: str = ""
    kept: list[LineFinished] = field(default_factory=list)

    @property
    def expected_s(self) -> float:
        return sum(len(ln.text) for ln in self.lines) / CHARS_PER_SECOND


def split_scenes(request: SynthesisRequest) -> list[_Scene]:
    scenes: list[_Scene] = []
    for i, line in enumerate(request.lines):
        if not scenes or line.line_id in request.scene_starts:
            scenes.append(_Scene(len(scenes), [], i))
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


class FleetEngine:
    """An `Engine` made of members; `load` loads each, `encode` uses the first that can, `generate` fans out."""

    def __init__(self, members: list[Member], config: FleetConfig | None = None,
                 settings: FleetSettings | None = None) -> None:
        if not members:
            raise ValueError("no engine to render on: add a server, or this computer, in Settings ▸ Render on")
        self.members, self.config, self.settings = members, config or FleetConfig(), settings
        self.notices: list[str] = []
        """Failures that moved work (garbage audio, a lost server): the render's report reads them."""
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ load, encode

    def load(self, request: LoadRequest, cancel: threading.Event) -> Iterator[Event]:
        ready: ModelReady | None = None
        self.notices = []
        for member in self.members:
            member.dropped, member.unusable = "", False
            for event in member.engine.load(replace(request, job_id=f"{request.job_id}:{member.label}"), cancel):
                if isinstance(event, ModelReady):
                    ready = ready or ModelReady(request.job_id, event.info)
                    remote = getattr(member.engine, "backend", None)
                    member.backend = remote if isinstance(remote, Backend) else Backend("local",
                                                                                         model=event.info.name)
                elif isinstance(event, JobFailed):
                    member.dropped, member.unusable = event.error, True
                    self.notices.append(f"{member.label}: {event.error}")
        if ready is None:
            yield JobFailed(request.job_id, "no engine of the fleet could start: " + "; ".join(self.notices))
            return
        yield ready
        yield JobFinished(request.job_id)

    def encode(self, request: EncodeRequest, cancel: threading.Event) -> Iterator[Event]:
        usable = [m for m in self.members if not m.dropped]
        return usable[0].engine.encode(request, cancel) if usable else iter([JobFailed(request.job_id, "no engine")])

    # ------------------------------------------------------------------ generate

    def generate(self, request: SynthesisRequest, cancel: threading.Event) -> Iterator[Event]:
        job = request.job_id
        for member in self.members:
            member.fresh()
        self.notices = [f"{m.label}: {m.dropped}" for m in self.members if m.unusable]
        yield JobStarted(job, tuple(ln.line_id for ln in request.lines))
        base_seed = request.sampling.base_seed()
        scenes = sorted(split_scenes(request), key=lambda s: -s.expected_s)
        pending: list[_Scene] = list(scenes)
        out: queue.Queue[Event | None] = queue.Queue()
        done: set[str] = set()
        failed: list[str] = []
        state = threading.Condition()
        remaining = [len(scenes)]

        lora_ok = [m for m in self.members if not m.dropped and m.backend.kind == "local"]
        for scene in list(pending):
            if not lora_ok and any(ln.lora is not None for ln in scene.lines):
                pending.remove(scene)
                remaining[0] -= 1
                failed.append(f"scene {scene.index + 1} failed: a voice in it carries a LoRA, which only this "
                              "computer can apply; add this computer to the engines (--local-slots 1)")

        def take(member: Member) -> _Scene | None:
            local = member.backend.kind == "local"
            with state:
                while True:
                    if remaining[0] == 0 or cancel.is_set():
                        return None
                    for scene in pending:
                        if local or not any(ln.lora is not None for ln in scene.lines):
                            pending.remove(scene)
                            return scene
                    state.wait(0.1)

        def give_back(scene: _Scene, count: bool, error: str) -> None:
            with state:
                scene.bounces += not count
                scene.tries += count or scene.bounces % BUSY_PER_TRY == 0
                scene.last_error = error or scene.last_error
                if scene.tries >= self.config.retries:
                    failed.append(f"scene {scene.index + 1} failed: {scene.last_error}")
                    remaining[0] -= 1
                else:
                    pending.append(scene)
                state.notify_all()

        def finish(scene: _Scene) -> None:
            with state:
                remaining[0] -= 1
                state.notify_all()

        def worker(member: Member) -> None:
            while not member.dropped:
                wait = member.paused_until - time.monotonic()
                if wait > 0:
                    time.sleep(min(wait, 0.2))
                    continue
                scene = take(member)
                if scene is None:
                    return
                if member.paused_until > time.monotonic():
                    give_back(scene, False, "")
                    continue
                self._run_scene(member, scene, request, base_seed, cancel, out, done, give_back, finish)

        threads = [threading.Thread(target=worker, args=(m,), name=f"fleet-{m.label}", daemon=True)
                   for m in self.members if not m.dropped for _ in range(max(1, m.slots))]
        for thread in threads:
            thread.start()

        def closer() -> None:
            for thread in threads:
                thread.join()
            with state:  # every member dropped with scenes left: they fail with the last reason
                for scene in pending:
                    failed.append(f"scene {scene.index + 1} failed: {scene.last_error or 'no engine left'}")
                pending.clear()
            out.put(None)

        threading.Thread(target=closer, name="fleet-closer", daemon=True).start()
        while (event := out.get()) is not None:
            yield event
        if cancel.is_set():
            yield JobFinished(job, cancelled=True)
        elif failed:
            yield JobFailed(job, "; ".join(failed) + f" ({len(done)} of {len(request.lines)} lines were kept)")
        else:
            yield JobFinished(job)

    def _run_scene(self, member: Member, scene: _Scene, request: SynthesisRequest, base_seed: int,
                   cancel: threading.Event, out: queue.Queue, done: set[str], give_back, finish) -> None:  # noqa: ANN001
        job = request.job_id
        lines = [ln for ln in scene.lines if ln.line_id not in done]
        if not lines:
            finish(scene)
            return
        offset = scene.offset + scene.lines.index(lines[0])
        context = request.context if lines[0] is scene.lines[0] and scene.index == 0 else ()
        kept = tuple(ContextTurn(ln.speaker, ln.text, t.codes) for ln, t in zip(scene.lines, scene.kept)
                     if t.codes.shape[1] > 0)
        sub = replace(request, job_id=f"{job}:s{scene.index}:{member.label}:{scene.tries}", lines=tuple(lines),
                      sampling=replace(request.sampling, seed=line_seed(base_seed, offset)), context=context + kept,
                      scene_starts=frozenset())
        stop = threading.Event()
        watch = _Deadline(stop, cancel)
        error, busy, started = "", None, time.perf_counter()
        watch.arm(self._deadline(member, lines[0]))
        try:
            for event in member.engine.generate(sub, stop):
                if isinstance(event, LineFinished):
                    why = garbage(event.audio)
                    if why:
                        error = f"{member.label} sent {why} for a line; it was not kept"
                        self.notices.append(error)
                        stop.set()
                        break
                    with self._lock:
                        first = event.line_id not in done
                        done.add(event.line_id)
                    if first:
                        scene.kept.append(event)
                        member.done += 1
                        member.in_a_row = 0
                        member.audio_s += len(event.audio) / SAMPLE_RATE
                        member.busy_s += time.perf_counter() - started
                        started = time.perf_counter()
                        out.put(replace(event, job_id=job, backend=event.backend or member.backend))
                    nxt = next((ln for ln in lines if ln.line_id not in done), None)
                    if nxt is not None:
                        watch.arm(self._deadline(member, nxt))
                elif isinstance(event, JobFailed):
                    error = f"{member.label}: {event.error}"
                    busy = getattr(member.engine, "retry_after", None)
                    break
                elif isinstance(event, JobFinished):
                    if event.cancelled and not cancel.is_set():
                        error = (f"{member.label} was slower than its deadline"
                                 if watch.fired else f"{member.label} stopped the job")
                    break
                elif isinstance(event, LineStarted | AudioChunk | Progress):
                    if event.line_id not in done:
                        out.put(replace(event, job_id=job))
        except Exception as exc:  # noqa: BLE001 - an engine's bug moves the work, it does not end the render
            log.exception("fleet member %s failed", member.label)
            error = f"{member.label}: {exc}"
        finally:
            watch.cancel()
        if cancel.is_set():
            finish(scene)
            return
        if not error and all(ln.line_id in done for ln in scene.lines):
            finish(scene)
            return
        error = error or f"{member.label} ended the scene early"
        if busy is not None:
            member.paused_until = time.monotonic() + busy
            give_back(scene, False, error)
            return
        member.failures += 1
        member.in_a_row += 1
        if member.in_a_row >= 2:
            member.dropped = error
            self.notices.append(f"{member.label} was dropped from this render: {error}")
        give_back(scene, True, error)

    def _deadline(self, member: Member, line: LineSpec) -> float:
        pace = member.pace()
        if pace is None:
            return self.config.first_deadline_s
        return max(self.config.min_deadline_s, self.config.pace_factor * pace * len(line.text) / CHARS_PER_SECOND)

    def status(self) -> list[str]:
        return [m.status() for m in self.members]

    def cannot_travel(self, request: SynthesisRequest | None) -> list[str]:
        """What a render of `request` loses on which engine, for the person to read before it starts."""
        notes = [f"{m.label} does not take seeds ({m.backend.kind}): its takes cannot be re-rendered from their seed"
                 for m in self.members if not m.dropped and not m.backend.seed_reproduces]
        if request is not None and any(ln.lora is not None for ln in request.lines):
            notes.append("scenes whose voices carry a LoRA render on this computer only")
        return notes


class _Deadline:
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
