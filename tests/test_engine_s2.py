"""The real engine on a tiny random model: the engine contract, streaming equal to a full decode,
upstream batching equal to `generate_long`, and context turns that condition a line (the window over them:
test_context_window.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from engine_contract import check_engine, collect

from s2studio.demo_model import write_demo_model
from s2studio.engine.api import (
    AudioChunk, ContextTurn, JobFailed, JobFinished, JobStarted, LineFinished, LineSpec, LoadRequest, Reference,
    SynthesisRequest,
)
from s2studio.engine.s2 import S2Engine
from s2studio.settings import Sampling


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_demo_model(tmp_path_factory.mktemp("tiny") / "tiny", seed=3)


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> S2Engine:
    engine = S2Engine()
    events = collect(engine.load(LoadRequest("load", model_dir, device="cpu", precision="fp32"), threading.Event()))
    assert isinstance(events[-1], JobFinished), events[-1]
    return engine


def _codes(frames: int, seed: int = 0) -> np.ndarray:
    """Codes the tiny codec could make (its codebooks hold 64 and 32 codes): the engine refuses any other."""
    return np.random.default_rng(seed).integers(0, 32, size=(10, frames)).astype(np.int64)


def test_real_engine_passes_the_contract(tmp_path: Path, model_dir: Path) -> None:
    clip, junk = tmp_path / "clip.wav", tmp_path / "junk.wav"
    sf.write(str(clip), 0.2 * np.sin(np.arange(24000) * 0.05).astype(np.float32), 24000)
    junk.write_bytes(b"not audio" * 50)
    check_engine(S2Engine(), LoadRequest("load-1", model_dir, device="cpu", precision="fp32"), clip, junk)


def test_generate_before_load_fails_with_a_reason() -> None:
    events = collect(S2Engine().generate(SynthesisRequest("j", (LineSpec("a", 0, "Hi."),)), threading.Event()))
    assert events == [JobFailed("j", "no model is loaded; choose a model folder first")]


def test_loading_a_folder_that_is_not_a_model_fails_cleanly(tmp_path: Path) -> None:
    events = collect(S2Engine().load(LoadRequest("l", tmp_path), threading.Event()))
    assert isinstance(events[-1], JobFailed)
    assert "tokenizer.json is missing" in events[-1].error


def test_streamed_chunks_equal_a_full_decode_of_the_codes(engine: S2Engine) -> None:
    request = SynthesisRequest("s", (LineSpec("a", 0, "A somewhat longer line to speak out loud."),),
                               (Reference(0, "Reference words.", _codes(6)),), Sampling(max_frames=20, seed_mode="fixed", seed=6))
    events = collect(engine.generate(request, threading.Event()))
    chunks = [ev for ev in events if isinstance(ev, AudioChunk)]
    take = next(ev for ev in events if isinstance(ev, LineFinished))
    assert len(chunks) >= 3 and len(chunks[0].samples) == 2048  # the first frame goes out on its own
    streamed = np.concatenate([c.samples for c in chunks])
    np.testing.assert_array_equal(streamed, take.audio)
    with torch.inference_mode():
        full = engine._loaded.codec.decode(torch.from_numpy(take.codes)[None]).reshape(-1).numpy()
    assert len(full) == len(streamed) == 2048 * take.codes.shape[1]
    assert np.abs(full - streamed).max() < 1e-5


def test_upstream_batching_gives_generate_long_codes(engine: S2Engine) -> None:
    from s2studio.engine.s2.generate import generate_codes
    from s2studio.text.prompt import Reference as PromptReference

    lines = (LineSpec("a", 0, "First turn here."), LineSpec("b", 1, "[laughing] Second."),
             LineSpec("c", 0, "Third and last turn."))
    refs = (Reference(0, "Zero speaks.", _codes(5, 1)), Reference(1, "One speaks.", _codes(4, 2)))
    sampling = Sampling(temperature=0.8, top_p=0.8, max_frames=9, seed_mode="fixed", seed=11, batching="upstream")
    request = SynthesisRequest("u", lines, refs, sampling, chunk_length=40)
    events = collect(engine.generate(request, threading.Event()))
    assert isinstance(events[-1], JobFinished) and not events[-1].cancelled
    started = next(ev for ev in events if isinstance(ev, JobStarted))
    takes = [ev for ev in events if isinstance(ev, LineFinished)]
    assert tuple(t.line_id for t in takes) == started.plan and started.plan[0] == "a"

    loaded = engine._loaded
    text = "\n".join(f"<|speaker:{ln.speaker}|>{ln.text}" for ln in lines)
    expected = generate_codes(loaded.decoder, loaded.tokenizer, text,
                              references=[PromptReference(f"<|speaker:{r.speaker}|>{r.transcript}", r.codes) for r in refs],
                              sampling=sampling, batching="upstream", chunk_length=40)
    assert len(expected) == len(takes) >= 2
    for want, take in zip(expected, takes):
        np.testing.assert_array_equal(take.codes, want)


def test_context_turns_condition_the_line(engine: S2Engine) -> None:
    line = (LineSpec("a", 0, "Same words."),)
    sampling = Sampling(max_frames=10, seed_mode="fixed", seed=2)
    plain = collect(engine.generate(SynthesisRequest("p", line, sampling=sampling), threading.Event()))
    ctx = (ContextTurn(0, "Before.", _codes(30, 9)),)
    with_ctx = collect(engine.generate(SynthesisRequest("c", line, sampling=sampling, context=ctx), threading.Event()))
    a = next(ev for ev in plain if isinstance(ev, LineFinished))
    b = next(ev for ev in with_ctx if isinstance(ev, LineFinished))
    assert a.codes.shape != b.codes.shape or not np.array_equal(a.codes, b.codes)


def test_reference_codes_outside_the_codecs_codebooks_are_refused(engine: S2Engine) -> None:
    """The engine's own defence (the voice library checks its cache too): shape, sign and each codebook's size of
    the loaded codec (the tiny one: 64 semantic codes, 32 residual ones), with the reference named."""
    line = (LineSpec("a", 0, "Hello."),)
    good = _codes(4)
    cases = {"semantic": (0, 64, "code 64 is beyond the codec's semantic codebook of 64"),
             "residual": (5, 32, "code 32 is beyond the codec's residual codebook of 32"),
             "negative": (2, -3, "codes must not be negative (found -3)")}
    for what, (row, value, message) in cases.items():
        codes = good.copy()
        codes[row, 1] = value
        refs = (Reference(0, "Fine words.", good), Reference(1, "A voice with damaged codes", codes))
        events = collect(engine.generate(SynthesisRequest(what, line, refs,
                                                          Sampling(max_frames=3, seed_mode="fixed", seed=1)),
                                         threading.Event()))
        assert len(events) == 1 and isinstance(events[0], JobFailed), events
        assert events[0].error == (f"reference 2 ('A voice with damaged codes'): {message}; re-encode the voice "
                                   "(delete its codes.safetensors)")
    for bad in (good[:5], good[:, :0], good.astype(np.float32)):
        events = collect(engine.generate(SynthesisRequest("shape", line, (Reference(0, "Odd.", bad),),
                                                          Sampling(max_frames=3, seed_mode="fixed", seed=1)), threading.Event()))
        assert isinstance(events[-1], JobFailed) and events[-1].error.startswith("reference 1 ('Odd.'): codes must")
    # codes of a context line are the model's own (up to its 4096), checked against the model
    ctx = (ContextTurn(0, "Before.", np.full((10, 3), 4096)),)
    events = collect(engine.generate(SynthesisRequest("ctx", line,
                                                      sampling=Sampling(max_frames=3, seed_mode="fixed", seed=1),
                                                      context=ctx), threading.Event()))
    assert isinstance(events[-1], JobFailed)
    assert events[-1].error == ("context line 1 ('Before.') holds code 4096, beyond the codebook size 4096; "
                                "render that line again")


@pytest.mark.parametrize("speed", ["exact", "fast"])
def test_a_lines_first_audio_leaves_after_its_first_frame(model_dir: Path, speed: str) -> None:
    """The first chunk of every line is the prompt's frame alone, decoded before the model takes its next slow
    step: time to first audio is one prefill, one frame and one codec push, never two frames."""
    engine = S2Engine()
    collect(engine.load(LoadRequest("l", model_dir, device="cpu", precision="fp32", speed=speed), threading.Event()))
    loaded = engine._loaded
    slow_calls: list[int] = []

    def counted(fn):
        def call(*args, **kwargs):
            slow_calls.append(args[0].shape[-1])  # the columns of this slow pass
            return fn(*args, **kwargs)
        return call

    if speed == "exact":  # one `model.forward_slow` per prefill and per step
        loaded.model.forward_slow = counted(loaded.model.forward_slow)
    else:  # the batch's prefill (a piece at a time) and its slow steps (one for every stream going on)
        prefill, slow_step = loaded.decoder.prefill, loaded.decoder._slow_step
        loaded.decoder.prefill = lambda: (slow_calls.append(2), prefill())[1]
        loaded.decoder._slow_step = lambda going: (slow_calls.append(1), slow_step(going))[1]
    lines = (LineSpec("a", 0, "The first line here."), LineSpec("b", 0, "And a second one."))
    request = SynthesisRequest("t", lines, (Reference(0, "Reference words.", _codes(6)),),
                               Sampling(max_frames=12, seed_mode="fixed", seed=4))
    at_first_chunk: dict[str, list[int]] = {}
    for event in engine.generate(request, threading.Event()):
        if isinstance(event, AudioChunk) and event.line_id not in at_first_chunk:
            assert event.start_sample == 0 and len(event.samples) == 2048
            at_first_chunk[event.line_id] = list(slow_calls)
        elif isinstance(event, LineFinished):
            assert event.codes.shape[1] > 2  # the line went on after its first chunk
            slow_calls.clear()
    assert set(at_first_chunk) == {"a", "b"}
    for calls in at_first_chunk.values():
        # the prefill of the prompt (in pieces on the batch), and no step yet
        assert calls and 1 not in calls and (speed == "fast" or len(calls) == 1), calls


def test_line_mode_tokenizes_each_earlier_line_once_for_its_context(engine: S2Engine) -> None:
    """Fitting a line's context adds up lengths kept for the request: an earlier line's text is tokenized once
    for the fitting, plus once in each later line's prompt, and the context kept is the same as building every
    candidate prompt would give."""
    tokenizer = engine._loaded.tokenizer
    seen: list[str] = []
    encode = tokenizer.encode
    lines = tuple(LineSpec(f"l{i}", 0, f"Line {i} has its words.") for i in range(4))
    request = SynthesisRequest("t", lines, (Reference(0, "Reference words.", _codes(6)),),
                               Sampling(max_frames=5, seed_mode="fixed", seed=4))
    tokenizer.encode = lambda text: (seen.append(text), encode(text))[1]
    try:
        events = collect(engine.generate(request, threading.Event()))
    finally:
        del tokenizer.encode
    assert isinstance(events[-1], JobFinished) and not events[-1].cancelled
    first = "<|speaker:0|>Line 0 has its words."
    # line 1's own length and prompt, the fitting of line 2's context (kept for lines 3 and 4), then the prompts of
    # lines 2, 3 and 4 (building every candidate prompt tokenized it once more for each of lines 3 and 4)
    assert seen.count(first) == 2 + 1 + 3


def test_scenes_side_by_side_on_the_scheduler_equal_the_whole_request(model_dir: Path) -> None:
    """The fast path: a request whose second scene starts at line c (its first line hears no earlier line) gives the
    same codes whole, one line after another, as split into its scenes run side by side on the scheduler beside a
    third job that is cancelled after its first audio."""
    from s2studio.engine.plan import split_request
    from s2studio.engine.scheduler import Job, Scheduler, synthesis

    engine = S2Engine()
    events = collect(engine.load(LoadRequest("l", model_dir, device="cpu", precision="fp32", speed="fast",
                                             max_batch=3), threading.Event()))
    assert isinstance(events[-1], JobFinished) and engine.max_batch == 3
    lines = (LineSpec("a", 0, "One line here."), LineSpec("b", 0, "And its answer."), LineSpec("c", 0, "A new scene."),
             LineSpec("d", 0, "Its second line."))
    request = SynthesisRequest("w", lines, (Reference(0, "Reference words.", _codes(6)),),
                               Sampling(max_frames=10, seed_mode="fixed", seed=3), scene_starts=frozenset({"c"}))
    whole = {e.line_id: e.codes for e in collect(engine.generate(request, threading.Event()))
             if isinstance(e, LineFinished)}
    scheduler = Scheduler(lambda: engine)
    got: dict[str, np.ndarray] = {}
    ends: list[object] = []

    def sink(event) -> None:
        if isinstance(event, LineFinished):
            got[event.line_id] = event.codes
        elif isinstance(event, (JobFinished, JobFailed)):
            ends.append(event)

    def cancel_at_first_audio(event) -> None:
        if isinstance(event, AudioChunk):
            scheduler.cancel("x")
        elif isinstance(event, (JobFinished, JobFailed)):
            ends.append(event)

    other = SynthesisRequest("x", (LineSpec("x", 0, "Someone else talks for a while."),), request.references,
                             Sampling(max_frames=10, seed_mode="fixed", seed=9))
    scheduler.submit(Job("x", lambda e, _j, cancel: synthesis(e, other, cancel), cancel_at_first_audio))
    for piece in split_request(request):
        scheduler.submit(Job(piece.job_id, lambda e, _j, cancel, p=piece: synthesis(e, p, cancel), sink))
    scheduler.run_until_idle()
    assert JobFinished("x", cancelled=True) in ends and sum(isinstance(e, JobFinished) for e in ends) == 3
    assert set(got) == set(whole) and all(np.array_equal(got[k], whole[k]) for k in whole)
    # the second scene alone (seeded as in the whole request: base + 2) is what it was there: it heard nothing before
    from dataclasses import replace

    alone = replace(request, lines=lines[2:], sampling=Sampling(max_frames=10, seed_mode="fixed", seed=5))
    codes = [e.codes for e in collect(engine.generate(alone, threading.Event())) if isinstance(e, LineFinished)]
    assert np.array_equal(codes[0], whole["c"]) and np.array_equal(codes[1], whole["d"])
