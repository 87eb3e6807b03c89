"""The render plan: one request fanned out over several engines (this computer and servers), one timeline back.

`FleetEngine` is itself an `Engine`, so the studio and the CLI drive it as they drive one engine. Its `generate`
splits the request into scenes (a heading starts one: `SynthesisRequest.scene_starts`), queues them longest first,
keeps each member's number of requests in flight (`Member.slots`), and passes every event on under the one job id:
each line gets exactly one take, placed by its line id, so the timeline fills in script order wherever a scene ran.

Failures move work, never lose it: when a member refuses, breaks, goes quiet, sends garbage audio or is slower than
its deadline, the scene's finished lines are kept and the rest goes back to the front of the queue for any member (the remainder
hears the kept lines as context where their codes exist); a scene fails, with one message naming the server and
the reason, after `retries` tries. A server answering 503 with Retry-After is paused that long and its scene goes
back without counting a try. A member that failed twice in a row is dropped for the rest of the render. The deadline
of a line is `pace_factor` times the member's measured seconds per second of audio (`first_deadline_s` until one
line has finished there). Every take carries its backend (`LineFinished.backend`). Torch-free.

Run by a scheduler (`stream`; the scheduler tells it how to submit jobs: `attach_scheduler`), the plan's job yields
to the scheduler's loop while it waits, and this computer's scenes are jobs of that scheduler (`fleet_local`): as many
in flight as the engine's batch slots (a member of 0 slots), not one. Run alone (`generate`), this computer takes one
scene at a time on a thread of the plan.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace

from s2studio.engine.api import (
    FRAME_SAMPLES, SAMPLE_RATE, WAIT, AudioChunk, Backend, ContextTurn, EncodeRequest, Engine, Event, JobFailed,
    JobFinished, JobStarted, LineFinished, LineSpec, LineStarted, LoadRequest, ModelReady, Progress, Step,
    SynthesisRequest, line_seed, request_seed,
)
from s2studio.engine.fleet_local import ScheduledEngine, Submit
from s2studio.engine.fleet_members import FleetConfig, FleetSettings, Member, no_seed_note
from s2studio.engine.fleet_scenes import CHARS_PER_SECOND, Deadline, Scene, garbage, split_scenes

log = logging.getLogger(__name__)

BUSY_PER_TRY = 10
"""Times a busy server may give a scene back before that counts as one of its tries."""
IDLE_WAIT_S = 0.02
"""Longest the plan's job holds the scheduler's loop waiting for a server's event while this computer runs nothing."""


class FleetEngine:
    """An `Engine` made of members; `load` loads each, `encode` uses the first that can, `generate` fans out."""

    plans_scenes = True
    """It takes a render whole and shares its scenes out itself (a caller does not split it)."""

    def __init__(self, members: list[Member], config: FleetConfig | None = None,
                 settings: FleetSettings | None = None) -> None:
        if not members:
            raise ValueError("no engine to render on: add a server, or this computer, in Settings ▸ Render on")
        self.members, self.config, self.settings = members, config or FleetConfig(), settings
        self.notices: list[str] = []
        """Failures that moved work (garbage audio, a lost server): the render's report reads them."""
        self._lock = threading.Lock()
        self._submit: Submit | None = None
        self._scheduled: dict[int, ScheduledEngine] = {}
        """id(member) -> this computer's engine as the scheduler runs it (once a scheduler is attached)."""

    # ------------------------------------------------------------------ the scheduler that runs the plan

    def attach_scheduler(self, submit: Submit) -> None:
        """The scheduler that runs this plan's job: this computer's scenes become jobs beside it."""
        self._submit = submit
        self._scheduled = {}

    def _local(self, member: Member) -> ScheduledEngine | None:
        if self._submit is None or member.backend.kind != "local":
            return None
        if id(member) not in self._scheduled:
            self._scheduled[id(member)] = ScheduledEngine(member.engine, self._submit)
        return self._scheduled[id(member)]

    def slots(self, member: Member) -> int:
        """Requests `member` keeps in flight: a server's setting; this computer's batch slots (at most `slots`)
        when a scheduler runs the plan, else one (its engine is not for two threads at once)."""
        if member.backend.kind != "local":
            return max(1, member.slots)
        local = self._local(member)
        if local is None:
            return 1
        return min(local.slots, member.slots) if member.slots > 0 else local.slots

    @property
    def max_batch(self) -> int:
        """Jobs the scheduler runs at once for a render: the plan's own and this computer's scenes."""
        return 1 + sum(self.slots(m) for m in self.members if self._local(m) is not None and not m.dropped)

    def step(self) -> None:
        """The scheduler's step: this computer's engine's, while its scenes run."""
        for local in self._scheduled.values():
            if local.running:
                local.step()

    # ------------------------------------------------------------------ load, encode

    def load(self, request: LoadRequest, cancel: threading.Event) -> Iterator[Event]:
        ready: ModelReady | None = None
        self.notices = []
        for member in self.members:
            member.dropped, member.unusable = "", False
            for event in member.engine.load(replace(request, job_id=f"{request.job_id}:{member.label}"), cancel):
                if isinstance(event, ModelReady):  # one request at a time: the plan shares out the scenes itself
                    ready = ready or ModelReady(request.job_id, replace(event.info, max_batch=1))
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
        """The plan alone: its events as they come (this computer, if a member, takes one scene at a time)."""
        return self._plan(request, cancel, scheduled=False)  # type: ignore[return-value]

    def stream(self, request: SynthesisRequest, cancel: threading.Event) -> Iterator[Step]:
        """The plan as a scheduler's job (`attach_scheduler`): `WAIT` while no event is there, so the loop runs
        this computer's scenes (and anything else) meanwhile."""
        return self._plan(request, cancel, scheduled=self._submit is not None)

    def _plan(self, request: SynthesisRequest, cancel: threading.Event, scheduled: bool) -> Iterator[Step]:
        job = request.job_id
        for member in self.members:
            member.fresh()
        self.notices = [f"{m.label}: {m.dropped}" for m in self.members if m.unusable]
        yield JobStarted(job, tuple(ln.line_id for ln in request.lines))
        base_seed = request_seed(request.sampling)
        scenes = sorted(split_scenes(request), key=lambda s: -s.expected_s)
        pending: list[Scene] = list(scenes)
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

        def take(member: Member) -> Scene | None:
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

        def give_back(scene: Scene, count: bool, error: str) -> None:
            with state:
                scene.bounces += not count
                scene.tries += count or scene.bounces % BUSY_PER_TRY == 0
                scene.last_error = error or scene.last_error
                if scene.tries >= self.config.retries:
                    failed.append(f"scene {scene.index + 1} failed: {scene.last_error}")
                    remaining[0] -= 1
                else:
                    pending.insert(0, scene)  # begun first: its lines are the earliest still missing
                state.notify_all()

        def finish(scene: Scene) -> None:
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
                engine = (self._local(member) if scheduled else None) or member.engine
                self._run_scene(member, engine, scene, request, base_seed, cancel, out, done, give_back, finish)

        def slots(member: Member) -> int:
            return self.slots(member) if scheduled else 1 if member.backend.kind == "local" else max(1, member.slots)

        threads = [threading.Thread(target=worker, args=(m,), name=f"fleet-{m.label}", daemon=True)
                   for m in self.members if not m.dropped for _ in range(slots(m))]
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
        locals_ = [local for m in self.members if (local := self._local(m)) is not None] if scheduled else []
        while True:
            try:  # scheduled: wait here only while this computer runs nothing (else its frames wait on this)
                event = out.get(timeout=None if not scheduled else 0 if any(x.running for x in locals_)
                                else IDLE_WAIT_S)
            except queue.Empty:
                yield WAIT
                continue
            if event is None:
                break
            yield event
        for member in self.members:
            member.ended = time.monotonic()
        if cancel.is_set():
            yield JobFinished(job, cancelled=True)
        elif failed:
            yield JobFailed(job, "; ".join(failed) + f" ({len(done)} of {len(request.lines)} lines were kept)")
        else:
            yield JobFinished(job)

    def _run_scene(self, member: Member, engine: Engine | ScheduledEngine, scene: Scene, request: SynthesisRequest,
                   base_seed: int, cancel: threading.Event, out: queue.Queue, done: set[str], give_back,  # noqa: ANN001
                   finish) -> None:  # noqa: ANN001
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
                      sampling=replace(request.sampling, seed_mode="fixed", seed=line_seed(base_seed, offset)),
                      context=context + kept,
                      scene_starts=frozenset())
        stop = threading.Event()
        watch = Deadline(stop, cancel)
        error, busy, started = "", None, time.perf_counter()
        watch.arm(self._deadline(member, lines[0]))
        try:
            for event in engine.generate(sub, stop):
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
                        member.frames += round(len(event.audio) / FRAME_SAMPLES)
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

    def cannot_travel(self, lora_voices: Sequence[str] = ()) -> list[str]:
        """What a render loses on which engine, per server and per voice (`lora_voices`: the names of the render's
        voices that carry a LoRA), for the person to read before it starts."""
        notes = [no_seed_note(m.label, m.backend.kind) for m in self.members
                 if not m.dropped and not m.backend.seed_reproduces]
        here = any(not m.dropped and m.backend.kind == "local" for m in self.members)
        servers = [m for m in self.members if not m.dropped and m.backend.kind != "local"]
        for name in lora_voices if servers else ():
            notes.append(f"voice {name!r} carries a LoRA, which only this computer applies: its scenes render here, "
                         "not on the servers" if here else
                         f"voice {name!r} carries a LoRA, which no server applies: its scenes cannot render; add this "
                         "computer to the engines")
        return notes
