"""A request whose cache would not fit in the memory left for streams waits for a running stream to leave, on the
real engine and its one scheduler, and then runs with the codes it has alone (never an out-of-memory crash)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from engine_contract import collect

from s2studio.demo_model import write_demo_model
from s2studio.engine.api import (
    AudioChunk, JobFailed, JobFinished, LineFinished, LineSpec, LoadRequest, Reference, SynthesisRequest,
)
from s2studio.engine.s2 import S2Engine, memory, setup
from s2studio.engine.s2.batch import SLOT_GRAIN
from s2studio.engine.scheduler import Job, Scheduler, synthesis
from s2studio.model.config import load_config
from s2studio.settings import Sampling


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_demo_model(tmp_path_factory.mktemp("tiny") / "tiny", seed=5)


def _engine(model_dir: Path, streams: float, monkeypatch: pytest.MonkeyPatch) -> S2Engine:
    """The fast path asked for 3 streams at once where the free memory holds the caches of `streams` short ones."""
    one = memory.stream_bytes(load_config(model_dir / "config.json"), SLOT_GRAIN, 4)
    with monkeypatch.context() as patch:
        patch.setattr(setup, "check_fits", lambda *args, **kwargs: None)  # the model itself is tiny: it fits
        patch.setattr(memory, "free_memory", lambda device: memory.STREAM_HEADROOM + int(streams * one))
        engine = S2Engine()
        events = collect(engine.load(LoadRequest("l", model_dir, device="cpu", precision="fp32", speed="fast",
                                                 max_batch=3), threading.Event()))
    assert isinstance(events[-1], JobFinished) and engine.max_batch == 3
    return engine


def _requests() -> list[SynthesisRequest]:
    codes = np.random.default_rng(0).integers(0, 32, size=(10, 6)).astype(np.int64)
    return [SynthesisRequest(name, (LineSpec(name, 0, f"Line {name} says a few words."),),
                             (Reference(0, "Reference words.", codes),),
                             Sampling(max_frames=12, seed_mode="fixed", seed=seed),
                             ignore_eos=True)
            for seed, name in enumerate("abc", 1)]


def _side_by_side(engine: S2Engine, requests: list[SynthesisRequest]) -> tuple[list[tuple[str, str]], dict]:
    """The three jobs on one scheduler: (event kind, job id) in the order they came, and each job's codes."""
    scheduler = Scheduler(lambda: engine)
    order: list[tuple[str, str]] = []
    codes: dict[str, np.ndarray] = {}

    def sink(event) -> None:
        if isinstance(event, AudioChunk) and ("audio", event.job_id) not in order:
            order.append(("audio", event.job_id))
        elif isinstance(event, LineFinished):
            codes[event.job_id] = event.codes
        elif isinstance(event, (JobFinished, JobFailed)):
            order.append((type(event).__name__, event.job_id))

    for request in requests:
        scheduler.submit(Job(request.job_id, lambda e, _job, cancel, r=request: synthesis(e, r, cancel), sink))
    scheduler.run_until_idle()
    return order, codes


def test_a_stream_that_would_not_fit_waits_for_one_to_leave(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    requests = _requests()
    engine = _engine(model_dir, 2.5, monkeypatch)  # three slots, memory for two caches
    order, codes = _side_by_side(engine, requests)
    assert sorted(e for e in order if e[0] != "audio") == [("JobFinished", j) for j in "abc"]
    first_end = min(order.index(("JobFinished", j)) for j in "ab")
    assert order.index(("audio", "c")) > first_end  # c was admitted only once a or b had left
    for request in requests:
        alone = [e.codes for e in collect(engine.generate(request, threading.Event())) if isinstance(e, LineFinished)]
        assert np.array_equal(codes[request.job_id], alone[0]), request.job_id

    roomy = _engine(model_dir, 3.5, monkeypatch)  # the same with memory for three: c runs beside a and b
    order, more = _side_by_side(roomy, requests)
    assert order.index(("audio", "c")) < min(order.index(("JobFinished", j)) for j in "ab")
    assert all(np.array_equal(more[j], codes[j]) for j in "abc")
