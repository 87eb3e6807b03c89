"""The fake engine passes the engine contract; its injected failures and the contract's teeth."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from engine_contract import check_engine, check_generate, collect, request

from s2studio.engine.api import (
    FRAME_SAMPLES, AudioChunk, JobFailed, JobFinished, LineFinished, LineStarted, LoadRequest, ModelReady, Progress,
    )
from s2studio.engine.fake import FakeEngine
from s2studio.settings import Sampling


@pytest.fixture
def clip(tmp_path: Path) -> Path:
    path = tmp_path / "clip.wav"
    sf.write(str(path), 0.2 * np.sin(np.arange(22050) * 0.05).astype(np.float32), 22050)
    return path


@pytest.fixture
def junk(tmp_path: Path) -> Path:
    path = tmp_path / "junk.wav"
    path.write_bytes(b"not audio" * 50)
    return path


def test_fake_engine_passes_the_contract(tmp_path: Path, clip: Path, junk: Path) -> None:
    check_engine(FakeEngine(), LoadRequest("load-1", tmp_path), clip, junk)
    check_engine(FakeEngine(chunk_frames=4, require_load=True), LoadRequest("load-2", tmp_path), clip, junk)


def test_contract_catches_late_first_chunk(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="frames before the first chunk"):
        check_generate(FakeEngine(chunk_frames=5, min_frames=8))


def test_event_sequence_of_one_line() -> None:
    engine = FakeEngine(frames_per_char=0.0, min_frames=5)
    req = request("j", lines=request("j").lines[:1])
    events = collect(engine.generate(req, threading.Event()))
    kinds = [type(ev).__name__ for ev in events]
    assert kinds == ["JobStarted", "LineStarted", "AudioChunk", "Progress", "AudioChunk", "Progress",
                     "AudioChunk", "Progress", "LineFinished", "JobFinished"]
    chunks = [ev for ev in events if isinstance(ev, AudioChunk)]
    assert [(c.start_sample, len(c.samples)) for c in chunks] == [
        (0, 2 * FRAME_SAMPLES), (2 * FRAME_SAMPLES, 2 * FRAME_SAMPLES), (4 * FRAME_SAMPLES, FRAME_SAMPLES)]
    assert [ev.frames for ev in events if isinstance(ev, Progress)] == [2, 4, 5]
    done = next(ev for ev in events if isinstance(ev, LineFinished))
    assert done.codes.shape == (10, 5) and done.seed == 7 and len(done.audio) == 5 * FRAME_SAMPLES
    assert done.codes[0].max() < 4096 and done.codes[1:].max() < 1024


def test_seeds_change_takes_and_speakers_change_pitch() -> None:
    engine = FakeEngine()
    a = collect(engine.generate(request("a", Sampling(max_frames=12, seed_mode="fixed", seed=1)), threading.Event()))
    b = collect(engine.generate(request("b", Sampling(max_frames=12, seed_mode="fixed", seed=2)), threading.Event()))
    ta = [ev for ev in a if isinstance(ev, LineFinished)]
    tb = [ev for ev in b if isinstance(ev, LineFinished)]
    assert not np.array_equal(ta[0].codes, tb[0].codes)
    assert [t.seed for t in ta] == [1, 2, 3]  # seed + line index
    assert ta[0].fingerprint != tb[0].fingerprint


def test_injected_failures() -> None:
    engine = FakeEngine(fail_on_line="l-b", fail_after_frames=3)
    events = collect(engine.generate(request("f"), threading.Event()))
    assert isinstance(events[-1], JobFailed) and "l-b" in events[-1].error
    assert [ev.line_id for ev in events if isinstance(ev, LineFinished)] == ["l-a"]
    assert [ev.line_id for ev in events if isinstance(ev, LineStarted)] == ["l-a", "l-b"]
    bad_load = FakeEngine(fail_on_load=True, require_load=True)
    events = collect(bad_load.load(LoadRequest("l", Path("/models/x")), threading.Event()))
    assert isinstance(events[-1], JobFailed) and not any(isinstance(ev, ModelReady) for ev in events)
    events = collect(bad_load.generate(request("g"), threading.Event()))
    assert [type(ev) for ev in events] == [JobFailed] and "no model" in events[0].error
    assert bad_load.calls == ["load", "generate"]


def test_cancel_before_start_and_during_load(tmp_path: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    events = collect(FakeEngine().generate(request("c"), cancel))
    assert [type(ev).__name__ for ev in events] == ["JobStarted", "JobFinished"] and events[-1].cancelled
    events = collect(FakeEngine().load(LoadRequest("l", tmp_path), cancel))
    assert events == [JobFinished("l", cancelled=True)]
