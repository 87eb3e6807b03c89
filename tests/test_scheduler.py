"""The one engine loop (engine/scheduler.py) on the fake engine, torch-free: jobs run side by side up to the
engine's batch and the others wait in order, a job cancelled while queued never starts, cancelling one stream leaves
the others' events untouched, a load runs alone, every job ends with exactly one terminal event, a bounded queue
says QueueFull, and a job's exception is its JobFailed while the loop goes on."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from s2studio.engine.api import (
    AudioChunk, JobFailed, JobFinished, JobStarted, LineFinished, LineSpec, LoadRequest, SynthesisRequest,
)
from s2studio.engine.fake import FakeEngine
from s2studio.engine.scheduler import Job, QueueFull, Scheduler, synthesis
from s2studio.settings import Sampling


def request(job_id: str, text: str = "A line of some length to speak.") -> SynthesisRequest:
    return SynthesisRequest(job_id, (LineSpec(f"{job_id}-l", 0, text),), sampling=Sampling(seed_mode="fixed", seed=1))


def job(events: list, job_id: str, text: str = "A line of some length to speak.") -> Job:
    r = request(job_id, text)
    return Job(job_id, lambda engine, _id, cancel: synthesis(engine, r, cancel), events.append)


def test_jobs_run_side_by_side_up_to_the_batch_and_cancel_one_leaves_the_others() -> None:
    alone: list = []
    engine = FakeEngine(max_batch=2)
    solo = Scheduler(lambda: engine)
    solo.submit(job(alone, "b"))
    solo.run_until_idle()
    events: list = []
    scheduler = Scheduler(lambda: engine)
    for name in "abc":
        scheduler.submit(job(events, name))

    def cancel_a_at_its_first_chunk(event) -> None:
        events.append(event)
        if isinstance(event, AudioChunk) and event.job_id == "a":
            scheduler.cancel("a")

    scheduler._queue[0].sink = cancel_a_at_its_first_chunk
    scheduler.run_until_idle()
    started = [e.job_id for e in events if isinstance(e, JobStarted)]
    assert started == ["a", "b", "c"]
    # c waited for a place: it started only after a left the batch
    assert events.index(JobFinished("a", cancelled=True)) < events.index(next(e for e in events
                                                                             if isinstance(e, JobStarted)
                                                                             and e.job_id == "c"))
    ends = [e for e in events if isinstance(e, (JobFinished, JobFailed))]
    assert ends.count(JobFinished("b")) == 1 and ends.count(JobFinished("c")) == 1 and len(ends) == 3
    b_events = [e for e in events if e.job_id == "b"]
    assert [type(e) for e in b_events] == [type(e) for e in alone]  # beside others as alone
    b_take = next(e for e in b_events if isinstance(e, LineFinished))
    alone_take = next(e for e in alone if isinstance(e, LineFinished))
    assert (b_take.codes == alone_take.codes).all() and (b_take.audio == alone_take.audio).all()
    assert dict(scheduler.stats().outcomes) == {"a": "cancelled", "b": "finished", "c": "finished"}


def test_a_queued_cancel_never_starts_and_a_load_runs_alone() -> None:
    events: list = []
    engine = FakeEngine(max_batch=4)
    scheduler = Scheduler(lambda: engine)
    scheduler.submit(job(events, "a"))
    load = LoadRequest("load", Path("fake"), max_batch=3)
    scheduler.submit(Job("load", lambda e, _id, cancel: e.load(load, cancel), events.append, exclusive=True))
    scheduler.submit(job(events, "b"))
    gone = scheduler.submit(job(events, "gone"))
    gone.cancel.set()
    scheduler.run_until_idle()
    kinds = [(type(e).__name__, e.job_id) for e in events if isinstance(e, (JobStarted, JobFinished))]
    assert kinds.index(("JobFinished", "a")) < kinds.index(("JobFinished", "load")) < kinds.index(("JobStarted", "b"))
    assert ("JobStarted", "gone") not in kinds and JobFinished("gone", cancelled=True) in events
    assert engine.calls.count("generate") == 2 and scheduler.max_batch == 3


def test_a_bounded_queue_and_a_failing_job() -> None:
    scheduler = Scheduler(lambda: FakeEngine(), queue_size=1)
    events: list = []
    scheduler.submit(job(events, "a"))
    with pytest.raises(QueueFull, match=r"^the server is busy; try again in \d+ s$"):
        scheduler.submit(job(events, "b"))

    def boom(_engine, _id, _cancel):
        raise RuntimeError("boom")
        yield

    scheduler.run_until_idle()
    scheduler.submit(Job("x", boom, events.append))
    scheduler.run_until_idle()
    scheduler.submit(job(events, "after"))
    scheduler.run_until_idle()
    assert JobFailed("x", "internal error (RuntimeError: boom); details are in the log") in events
    assert JobFinished("after") in events


def test_a_job_stopped_while_its_voices_are_encoded_ends_cancelled_not_failed(tmp_path: Path) -> None:
    """Stop pressed while a first render encodes its voices: the encoder finds no codes, and the job ends as
    cancelled (the studio says nothing), not as a failure (the studio's "Render failed" box)."""
    import numpy as np
    import soundfile as sf

    from s2studio.engine.plan import engine_encoder

    clip = tmp_path / "a.wav"
    sf.write(str(clip), np.zeros(4410, np.float32), 44100)
    scheduler = Scheduler(lambda: FakeEngine(), queue_size=4)
    events: list = []

    def encoding(engine, _id, cancel):  # noqa: ANN001, ANN202
        cancel.set()  # the person's Stop, while the clip is encoded
        engine_encoder(engine, cancel)(clip)
        yield from synthesis(engine, request("never"), cancel)

    scheduler.submit(Job("e", encoding, events.append))
    scheduler.run_until_idle()
    assert events == [JobFinished("e", cancelled=True)]


def test_stop_ends_the_loop_of_another_thread() -> None:
    scheduler = Scheduler(lambda: FakeEngine(frame_latency_s=0.01))
    events: list = []
    thread = threading.Thread(target=scheduler.run)
    thread.start()
    scheduler.submit(job(events, "a", "A long line " * 20))
    scheduler.stop()
    thread.join(10)
    assert not thread.is_alive()
    assert [e for e in events if isinstance(e, (JobFinished, JobFailed))] == [JobFinished("a", cancelled=True)]
