"""This computer in a render plan counts its batch slots: run by a scheduler (the studio's engine thread, the command
line's), the plan submits this computer's scenes to that scheduler as jobs beside its own, as many at once as the
engine's `max_batch`, and the model runs on the scheduler's thread only, never on a thread of the plan. Run alone,
the plan keeps one scene at a time there. The studio's engine switch attaches its fleet to the engine thread's
scheduler the same way."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from s2studio.engine.api import (
    Event, JobFailed, JobFinished, LineFinished, LineSpec, LoadRequest, Step, SynthesisRequest,
)
from s2studio.engine.fake import FakeEngine
from s2studio.engine.fleet import FleetEngine
from s2studio.engine.fleet_members import FleetSettings, Member
from s2studio.engine.scheduler import Job, Scheduler, synthesis
from s2studio.engine.switch import EngineSwitch
from s2studio.settings import Sampling


@dataclass
class CountingEngine(FakeEngine):
    """The fake engine, counting the streams it runs at once and the threads that run them."""

    in_flight: int = 0
    most: int = 0
    threads: set[str] = field(default_factory=set)

    def stream(self, request: SynthesisRequest, cancel: threading.Event) -> Iterator[Step]:
        self.threads.add(threading.current_thread().name)
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            yield from super().stream(request, cancel)
        finally:
            self.in_flight -= 1


def book(scenes: int = 6) -> SynthesisRequest:
    lines = tuple(LineSpec(f"s{s}l{i}", 0, f"Scene {s}, line {i} of it.") for s in range(scenes) for i in range(2))
    return SynthesisRequest("book", lines, sampling=Sampling(seed_mode="fixed", seed=5),
                            scene_starts=frozenset(f"s{s}l0" for s in range(scenes)))


def run_on_scheduler(engine, request: SynthesisRequest) -> list[Event]:  # noqa: ANN001
    """Load, then render `request`, on a scheduler whose loop runs on a thread named "engine"."""
    events: list[Event] = []
    scheduler = Scheduler(lambda: engine)
    scheduler.submit(Job("load", lambda e, _j, c: e.load(LoadRequest("load", "fake"), c), events.append,
                         exclusive=True))
    scheduler.submit(Job(request.job_id, lambda e, _j, c: synthesis(e, request, c), events.append))
    thread = threading.Thread(target=scheduler.run_until_idle, name="engine")
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    return events


def takes(events: list[Event]) -> list[str]:
    assert not [e for e in events if isinstance(e, JobFailed)]
    assert [e.job_id for e in events if isinstance(e, JobFinished)] == ["load", "book"]
    return sorted(e.line_id for e in events if isinstance(e, LineFinished))


def test_a_plan_run_by_a_scheduler_fills_this_computers_batch_slots_on_the_schedulers_thread() -> None:
    local = CountingEngine(frame_latency_s=0.002, max_batch=3)
    fleet = FleetEngine([Member(local, 0, "this computer")])
    events = run_on_scheduler(fleet, book())
    assert takes(events) == sorted(ln.line_id for ln in book().lines)  # every line once
    assert local.most == 3 and fleet.max_batch == 4  # three scenes at once, beside the plan's own job
    assert local.threads == {"engine"}  # never on a thread of the plan

    capped = CountingEngine(frame_latency_s=0.002, max_batch=3)
    run_on_scheduler(FleetEngine([Member(capped, 2, "this computer")]), book())
    assert capped.most == 2  # at most the member's slots


def test_a_plan_run_alone_keeps_one_scene_at_a_time_on_this_computer() -> None:
    local = CountingEngine(frame_latency_s=0.002, max_batch=3)
    fleet = FleetEngine([Member(local, 0, "this computer")])
    list(fleet.load(LoadRequest("load", "fake"), threading.Event()))
    events = list(fleet.generate(book(), threading.Event()))
    assert isinstance(events[-1], JobFinished) and not events[-1].cancelled
    assert len([e for e in events if isinstance(e, LineFinished)]) == 12
    assert local.most == 1 and local.threads != {"engine"}


def test_the_studios_engine_switch_runs_its_fleets_local_scenes_on_the_engine_threads_scheduler() -> None:
    local = CountingEngine(frame_latency_s=0.002, max_batch=4)
    switch = EngineSwitch(lambda: local)
    switch.choose(FleetSettings(servers=(), slots=()))
    events = run_on_scheduler(switch, book(5))
    assert len(takes(events)) == 10
    assert local.most == 4 and local.threads == {"engine"}
    ready = next(e for e in events if type(e).__name__ == "ModelReady")
    assert ready.info.max_batch == 1  # the studio hands a plan the render whole: it shares the scenes out itself
