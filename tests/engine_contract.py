"""The engine contract (design.md §3) as reusable checks: every Engine must pass `check_engine`.

Used by tests/test_engine_fake.py; the real engine's tests call `check_engine(S2Engine(...),
LoadRequest(job_id, tiny_model_dir), clip=..., junk=...)` with a tiny model. Requests use a small
`max_new_tokens` so a random tiny model finishes quickly.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from s2studio.engine.api import (
    FRAME_SAMPLES, NUM_CODEBOOKS, AudioChunk, ClipEncoded, ClipToEncode, EncodeRequest, Engine, Event, JobFailed, JobFinished,
    JobStarted, LineFinished, LineSpec, LineStarted, LoadRequest, ModelInfo, ModelLoading, ModelReady, Progress,
    Reference, SynthesisRequest,
)
from s2studio.settings import Sampling

MAX_FRAMES_BEFORE_FIRST_CHUNK = 4
"""A first chunk longer than 4 frames (of `FRAME_SAMPLES` each) of audio came too late."""
SAMPLING = Sampling(max_frames=12, seed_mode="fixed", seed=7)


def collect(events: Iterable[Event], cancel_after_first_chunk: threading.Event | None = None) -> list[Event]:
    out = []
    for ev in events:
        out.append(ev)
        if cancel_after_first_chunk is not None and isinstance(ev, AudioChunk):
            cancel_after_first_chunk.set()
    return out


def request(job_id: str, sampling: Sampling = SAMPLING, references: tuple[Reference, ...] | None = None,
            lines: tuple[LineSpec, ...] | None = None) -> SynthesisRequest:
    if references is None:
        codes = np.random.default_rng(0).integers(0, 32, size=(NUM_CODEBOOKS, 8))  # within every codec's codebooks
        references = (Reference(0, "A short reference.", codes), Reference(1, "Another one.", codes[:, :5]))
    if lines is None:
        lines = (LineSpec("l-a", 0, "Hello there."), LineSpec("l-b", 1, "[laughing] Hi!"),
                 LineSpec("l-c", 0, "Bye."))
    return SynthesisRequest(job_id, lines, references, sampling)


def check_load(engine: Engine, load: LoadRequest) -> ModelInfo:
    events = collect(engine.load(load, threading.Event()))
    check_job_shape(events, load.job_id)
    assert isinstance(events[-1], JobFinished) and not events[-1].cancelled, events[-1]
    assert isinstance(events[-2], ModelReady), events[-2]
    loading = [ev for ev in events[:-2] if isinstance(ev, ModelLoading)]
    assert len(loading) == len(events) - 2 >= 1
    progress = [ev.progress for ev in loading]
    assert progress == sorted(progress) and 0.0 <= progress[0] and progress[-1] <= 1.0
    return events[-2].info


def check_job_shape(events: list[Event], job_id: str) -> None:
    """One job: JobStarted first, exactly one terminal event (JobFinished/JobFailed) last."""
    assert all(ev.job_id == job_id for ev in events)
    terminal = [ev for ev in events if isinstance(ev, (JobFinished, JobFailed))]
    assert len(terminal) == 1 and events[-1] is terminal[0], events[-3:]


def check_lines(events: list[Event], req: SynthesisRequest) -> dict[str, LineFinished]:
    """Line order, streaming (first chunk after <= 4 frames), chunks == final audio, codes shape."""
    assert isinstance(events[0], JobStarted) and events[0].plan == tuple(ln.line_id for ln in req.lines)
    finished: dict[str, LineFinished] = {}
    current: str | None = None
    chunks: list[AudioChunk] = []
    frames_seen = 0
    for ev in events[1:-1]:
        if isinstance(ev, LineStarted):
            assert current is None, "a line started before the previous one finished"
            expected = req.lines[len(finished)].line_id
            assert ev.line_id == expected, (ev.line_id, expected)
            current, chunks, frames_seen = ev.line_id, [], 0
        elif isinstance(ev, Progress):
            assert ev.line_id == current and ev.frames >= frames_seen and ev.expected >= 1 and ev.rtf >= 0
            frames_seen = ev.frames
            if not chunks:
                assert ev.frames <= MAX_FRAMES_BEFORE_FIRST_CHUNK, f"{ev.frames} frames before the first chunk"
        elif isinstance(ev, AudioChunk):
            assert ev.line_id == current
            assert ev.start_sample == sum(len(c.samples) for c in chunks)
            assert ev.samples.dtype == np.float32 and ev.samples.ndim == 1 and len(ev.samples) > 0
            if not chunks:
                frames = len(ev.samples) / FRAME_SAMPLES
                assert frames <= MAX_FRAMES_BEFORE_FIRST_CHUNK, f"{frames:g} frames before the first chunk"
            chunks.append(ev)
        elif isinstance(ev, LineFinished):
            assert ev.line_id == current and chunks, "a line finished without streaming audio"
            assert ev.codes.dtype == np.int64 and ev.codes.ndim == 2
            assert ev.codes.shape[0] == NUM_CODEBOOKS and 1 <= ev.codes.shape[1] <= req.sampling.max_frames
            assert ev.audio.dtype == np.float32 and ev.audio.ndim == 1 and np.isfinite(ev.audio).all()
            streamed = np.concatenate([c.samples for c in chunks])
            assert len(streamed) == len(ev.audio)
            np.testing.assert_allclose(streamed, ev.audio, atol=1e-4)
            assert frames_seen <= ev.codes.shape[1] + 1
            assert isinstance(ev.seed, int) and ev.fingerprint and ev.take_id
            finished[ev.line_id] = ev
            current = None
        else:
            raise AssertionError(f"unexpected event inside a job: {ev}")
    assert current is None
    return finished


def check_generate(engine: Engine, job: str = "gen-1") -> dict[str, LineFinished]:
    req = request(job)
    events = collect(engine.generate(req, threading.Event()))
    check_job_shape(events, job)
    assert isinstance(events[-1], JobFinished) and not events[-1].cancelled, events[-1]
    finished = check_lines(events, req)
    assert list(finished) == [ln.line_id for ln in req.lines]
    assert len({f.take_id for f in finished.values()}) == len(finished)
    return finished


def check_determinism(engine: Engine, first: dict[str, LineFinished]) -> None:
    again = check_generate(engine, "gen-2")
    for line_id, take in first.items():
        np.testing.assert_array_equal(again[line_id].codes, take.codes)
        np.testing.assert_allclose(again[line_id].audio, take.audio, atol=1e-5)
        assert again[line_id].fingerprint == take.fingerprint


def check_reported_seed_reproduces(engine: Engine) -> None:
    line = (LineSpec("only", 0, "Seeded line."),)
    unseeded = Sampling(max_frames=12)
    first = collect(engine.generate(request("seed-1", unseeded, lines=line), threading.Event()))
    take = next(ev for ev in first if isinstance(ev, LineFinished))
    seeded = Sampling(max_frames=12, seed_mode="fixed", seed=take.seed)
    second = collect(engine.generate(request("seed-2", seeded, lines=line), threading.Event()))
    again = next(ev for ev in second if isinstance(ev, LineFinished))
    np.testing.assert_array_equal(again.codes, take.codes)


def check_unseeded_request_draws_one_base_seed(engine: Engine) -> None:
    """A random seed: the engine draws one base seed for the request and line i is drawn with base + i, each take
    reporting its own; the request seeded with that base renders every line again, code for code."""
    unseeded = collect(engine.generate(request("base-1", Sampling(max_frames=12)),
                                       threading.Event()))
    takes = [ev for ev in unseeded if isinstance(ev, LineFinished)]
    base = takes[0].seed
    assert [t.seed for t in takes] == [base + i for i in range(len(takes))] and len(takes) == 3
    seeded = collect(engine.generate(request("base-2", Sampling(max_frames=12, seed_mode="fixed", seed=base)),
                                     threading.Event()))
    again = [ev for ev in seeded if isinstance(ev, LineFinished)]
    assert [t.seed for t in again] == [t.seed for t in takes]
    for a, b in zip(again, takes, strict=True):
        np.testing.assert_array_equal(a.codes, b.codes)


def check_cancel(engine: Engine) -> None:
    cancel = threading.Event()
    req = request("cancel-1")
    events = collect(engine.generate(req, cancel), cancel_after_first_chunk=cancel)
    check_job_shape(events, "cancel-1")
    assert isinstance(events[-1], JobFinished) and events[-1].cancelled
    done = sum(isinstance(ev, LineFinished) for ev in events)
    assert done < len(req.lines), "cancel is checked between frames, not only between jobs"
    check_generate(engine, "after-cancel")  # still usable


def check_bad_request_fails_cleanly(engine: Engine) -> None:
    bad = request("bad-1", references=(Reference(0, "x", np.zeros((5, 3), np.int64)),))
    events = collect(engine.generate(bad, threading.Event()))
    check_job_shape(events, "bad-1")
    assert isinstance(events[-1], JobFailed) and events[-1].error and "\n" not in events[-1].error
    empty = SynthesisRequest("bad-2", ())
    events = collect(engine.generate(empty, threading.Event()))
    assert isinstance(events[-1], JobFailed) and len(events) == 1
    # codes no codec makes (negative, beyond every codebook) are refused before any work, naming the reference
    good = np.zeros((NUM_CODEBOOKS, 4), np.int64)
    for value in (-1, 5000):
        codes = good.copy()
        codes[3, 1] = value
        refs = (Reference(0, "Fine.", good), Reference(1, "Broken codes.", codes))
        events = collect(engine.generate(request(f"bad-range{value}", references=refs), threading.Event()))
        assert len(events) == 1 and isinstance(events[0], JobFailed), events
        assert "reference 2 ('Broken codes.')" in events[0].error and "\n" not in events[0].error
    check_generate(engine, "after-failure")


def check_encode(engine: Engine, info: ModelInfo, clip: Path, junk: Path) -> None:
    req = EncodeRequest("enc-1", (ClipToEncode("c1", clip), ClipToEncode("c2", clip)))
    events = collect(engine.encode(req, threading.Event()))
    check_job_shape(events, "enc-1")
    assert isinstance(events[0], JobStarted) and events[0].plan == ("c1", "c2")
    encoded = [ev for ev in events if isinstance(ev, ClipEncoded)]
    assert [ev.clip_id for ev in encoded] == ["c1", "c2"] and len(events) == 4
    for ev in encoded:
        assert ev.codes.dtype == np.int64 and ev.codes.shape[0] == NUM_CODEBOOKS and ev.codes.shape[1] >= 1
        assert ev.codec_fingerprint == info.codec_fingerprint
    np.testing.assert_array_equal(encoded[0].codes, encoded[1].codes)
    assert isinstance(events[-1], JobFinished) and not events[-1].cancelled
    bad = collect(engine.encode(EncodeRequest("enc-2", (ClipToEncode("j", junk),)), threading.Event()))
    check_job_shape(bad, "enc-2")
    assert isinstance(bad[-1], JobFailed) and "\n" not in bad[-1].error


def check_engine(engine: Engine, load: LoadRequest, clip: Path, junk: Path) -> None:
    """The whole contract, in an order that also checks the engine survives cancel and failure."""
    info = check_load(engine, load)
    first = check_generate(engine)
    check_determinism(engine, first)
    check_reported_seed_reproduces(engine)
    check_unseeded_request_draws_one_base_seed(engine)
    check_cancel(engine)
    check_bad_request_fails_cleanly(engine)
    check_encode(engine, info, clip, junk)
