"""Same request, same seed, same audio, whatever the engine did before: every cache the engine keeps (the fast
path's prefix and static caches, the codec's streaming state, LoRA voices merged and removed, int8/int4 weights,
the thread count) leaves a render equal, bit for bit, to the same render on a freshly loaded engine.

Hypothesis draws sequences of requests on the tiny model (repeats, other voices, a LoRA on and off, an earlier
line as context, several lines whose context window drops the oldest, a cancel after the first chunk) for the fast
path (bf16, int8 and int4 weights, and a bfloat16 model) and the exact loop; each result is compared with the
same request on a fresh engine (its codes, audio and seed; for a cancelled one, the audio it sent before)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from engine_contract import collect
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_voice_lora_render import random_lora

from s2studio.demo_model import write_demo_model
from s2studio.engine.api import (
    AudioChunk, ContextTurn, Event, JobFailed, JobFinished, LineFinished, LineSpec, LoadRequest, Reference,
    SynthesisRequest,
)
from s2studio.engine.s2 import S2Engine
from s2studio.settings import Sampling

CONFIGS = {"fast, bf16 weights": ("fp32", "none", "fast"), "fast, int8": ("fp32", "int8", "fast"),
           "fast, int4": ("fp32", "int4", "fast"), "fast, bf16 model": ("bf16", "none", "fast"),
           "exact": ("fp32", "none", "exact")}
TEXTS = ("Could you pass me the salt?", "Something else entirely.", "Yes.")


def _codes(frames: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 32, size=(10, frames)).astype(np.int64)


VOICES = ((Reference(0, "A short reference.", _codes(8, 0)),), (Reference(0, "Another voice speaks.", _codes(6, 1)),))
CONTEXT = (ContextTurn(0, "An earlier line.", _codes(5, 2)),)


@dataclass(frozen=True)
class Ask:
    """One request of a sequence: which text starts it, how many lines, the voice, its LoRA, an earlier line as
    context, and whether it is cancelled after its first chunk."""

    text: int
    lines: int
    voice: int
    lora: bool
    context: bool
    cancel: bool

    def key(self) -> tuple:
        return (self.text, self.lines, self.voice, self.lora, self.context)


asks = st.builds(Ask, st.integers(0, 2), st.integers(1, 3), st.integers(0, 1), st.booleans(), st.booleans(),
                 st.booleans())


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("history-engine")
    folder = write_demo_model(root / "tiny", seed=3)
    return folder, random_lora(folder, root / "lora.safetensors")


def load(folder: Path, config: str, threads: int = 0, engine: S2Engine | None = None) -> S2Engine:
    precision, quantize, speed = CONFIGS[config]
    engine = engine or S2Engine(context_lines=2)  # a third line drops the first from its context
    events = collect(engine.load(LoadRequest("load", folder, device="cpu", precision=precision, speed=speed,
                                             quantize=quantize, threads=threads), threading.Event()))
    assert isinstance(events[-1], JobFinished), events[-1]
    return engine


def synthesis(ask: Ask, lora: Path, frames: int = 9) -> SynthesisRequest:
    lines = tuple(LineSpec(f"l{i}", 0, TEXTS[(ask.text + i) % len(TEXTS)], lora if ask.lora else None)
                  for i in range(ask.lines))
    return SynthesisRequest(f"job-{ask.key()}", lines, VOICES[ask.voice],
                            Sampling(max_frames=frames, seed_mode="fixed", seed=7),
                            context=CONTEXT if ask.context else ())


def run(engine: S2Engine, request: SynthesisRequest, cancel_after_first_chunk: bool = False) -> list[Event]:
    cancel = threading.Event()
    events = collect(engine.generate(request, cancel), cancel if cancel_after_first_chunk else None)
    assert not any(isinstance(e, JobFailed) for e in events), events[-1]
    return events


def chunks(events: list[Event]) -> Iterator[tuple[str, int, np.ndarray]]:
    return ((e.line_id, e.start_sample, e.samples) for e in events if isinstance(e, AudioChunk))


def assert_same_render(ours: list[Event], fresh: list[Event], cancelled: bool) -> None:
    sent, expected = list(chunks(ours)), list(chunks(fresh))
    assert len(sent) >= 1 and len(sent) <= len(expected)
    for (line, start, samples), (line_f, start_f, samples_f) in zip(sent, expected):
        assert (line, start) == (line_f, start_f) and np.array_equal(samples, samples_f), (line, start)
    if cancelled:
        assert isinstance(ours[-1], JobFinished) and ours[-1].cancelled
        return
    takes = [e for e in ours if isinstance(e, LineFinished)]
    takes_f = [e for e in fresh if isinstance(e, LineFinished)]
    assert [t.line_id for t in takes] == [t.line_id for t in takes_f] and len(sent) == len(expected)
    for take, take_f in zip(takes, takes_f):
        assert take.seed == take_f.seed and take.fingerprint == take_f.fingerprint
        assert np.array_equal(take.codes, take_f.codes) and np.array_equal(take.audio, take_f.audio), take.line_id


class FreshRenders:
    """Each request's render on a freshly loaded engine, made once per request."""

    def __init__(self, folder: Path, config: str, lora: Path) -> None:
        self.folder, self.config, self.lora = folder, config, lora
        self.done: dict[tuple, list[Event]] = {}

    def __call__(self, ask: Ask, frames: int = 9) -> list[Event]:
        key = (*ask.key(), frames)
        if key not in self.done:
            self.done[key] = run(load(self.folder, self.config), synthesis(ask, self.lora, frames))
        return self.done[key]


@pytest.fixture(scope="module", params=list(CONFIGS))
def config(request: pytest.FixtureRequest, files: tuple[Path, Path]) -> tuple[S2Engine, FreshRenders]:
    torch.set_num_threads(1)
    folder, lora = files
    return load(folder, request.param), FreshRenders(folder, request.param, lora)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(asks, min_size=2, max_size=3))
def test_a_render_equals_a_fresh_engines_whatever_ran_before(config, files, sequence: list[Ask]) -> None:
    engine, fresh = config
    for ask in sequence:
        ours = run(engine, synthesis(ask, files[1]), ask.cancel)
        assert_same_render(ours, fresh(ask), ask.cancel)


def test_a_b_a_and_a_repeat_on_one_engine(config, files) -> None:
    """The server's report: A, A, B, A from one engine; every A the fresh engine's A (the bfloat16 model's 40
    frames: long enough for a difference in the last bits of its logits to change a draw, as it did before)."""
    engine, fresh = config
    frames = 40 if fresh.config == "fast, bf16 model" else 12
    a, b = Ask(2, 1, 1, False, False, False), Ask(0, 1, 0, False, False, False)
    for ask in (a, a, b, a):
        assert_same_render(run(engine, synthesis(ask, files[1], frames)), fresh(ask, frames), False)


def test_a_change_of_thread_count_leaves_no_trace(files) -> None:
    """Reloaded with another thread count, a render equals a fresh engine's at that count, and back again."""
    folder, lora = files
    ask = Ask(0, 1, 0, False, True, False)
    try:
        engine = load(folder, "fast, bf16 weights", threads=2)
        first = run(engine, synthesis(ask, lora))
        load(folder, "fast, bf16 weights", threads=1, engine=engine)
        assert_same_render(run(engine, synthesis(ask, lora)),
                           run(load(folder, "fast, bf16 weights", threads=1), synthesis(ask, lora)), False)
        load(folder, "fast, bf16 weights", threads=2, engine=engine)
        assert_same_render(run(engine, synthesis(ask, lora)), first, False)
    finally:
        torch.set_num_threads(1)


def weights(engine: S2Engine) -> dict[str, torch.Tensor]:
    """Every tensor the loaded model and the fast path's head compute with (narrowed layers' buffers included)."""
    runtime = engine._loaded
    assert runtime is not None
    out = dict(runtime.model.state_dict())
    head = getattr(runtime.decoder, "head", None)
    if head is not None:
        out.update({f"head.{k}": v for k, v in head.state_dict().items()})
    return out


def test_a_lora_switched_in_and_out_restores_every_weight_bit_for_bit(config, files) -> None:
    """Merging a LoRA and removing it gives the loaded weights back exactly (no drift from merge and unmerge
    rounding in bfloat16, int8 or int4), and merging it again gives what one merge on a fresh engine gives."""
    engine, fresh = config
    folder, lora = files
    runtime = engine._loaded
    runtime.use_lora(None)
    base = {k: v.clone() for k, v in weights(engine).items()}
    runtime.use_lora(lora)
    merged = weights(engine)
    assert any(not torch.equal(merged[k], base[k]) for k in base)
    runtime.use_lora(None)
    runtime.use_lora(lora)
    once = load(folder, fresh.config)
    once._loaded.use_lora(lora)
    for name, tensor in weights(once).items():
        assert torch.equal(weights(engine)[name], tensor), name
    runtime.use_lora(None)
    for name, tensor in weights(engine).items():
        assert torch.equal(base[name], tensor), name
    for name, tensor in weights(load(folder, fresh.config)).items():
        assert torch.equal(base[name], tensor), name
