"""Many streams at once (engine/s2/batch.py: `BatchDecoder`), driven as a scheduler drives it.

What must hold: on the CPU fast path (bf16, int8 and int4 weights through the C++ kernels) every stream's codes
equal the same request run alone (`generate_frames_fast` on a fresh `FastDecoder` of the same length and piece),
bit for bit, at 2, 4 and 8 streams, whatever joined or left beside it: staggered joins, a long prompt prefilled in
pieces while others run, a cancel in the middle (of a stream's frames, or between the pieces of its prompt), requests
that end early, slots that served other requests before.
The torch route (CUDA's; here on a float64 model) gives the same codes. Admission waits instead of overfilling the
slots or the memory planned for streams.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from s2studio.demo_model import write_demo_model
from s2studio.engine.s2 import memory
from s2studio.engine.s2.batch import SLOT_GRAIN, BatchDecoder
from s2studio.engine.s2.fast import FastDecoder, generate_frames_fast
from s2studio.engine.s2.generate import make_generator
from s2studio.engine.weights.bf16 import Bf16Linear
from s2studio.engine.weights.checkpoints import load_dual_ar
from s2studio.engine.weights.cpu_step import CpuStepOps
from s2studio.engine.weights.narrow import linear_slots
from s2studio.errors import UserError
from s2studio.settings import Sampling
from s2studio.text.prompt import Reference, build_prompt
from s2studio.text.tokenizer import S2Tokenizer

LENGTH = 256
PIECE = 16
"""Small pieces: the prompts with a reference are prefilled in several, between other streams' steps."""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_demo_model(tmp_path_factory.mktemp("batch") / "tiny", seed=2, codec=False)


@pytest.fixture(scope="module")
def tok(folder: Path) -> S2Tokenizer:
    return S2Tokenizer.from_file(folder / "tokenizer.json")


def load(folder: Path, tok: S2Tokenizer, narrow: str, dtype: torch.dtype = torch.float32):
    model = load_dual_ar(folder, device="cpu", dtype=dtype, narrow=narrow, im_end_id=tok.im_end_id,
                         semantic_range=(tok.semantic_begin_id, tok.semantic_end_id))
    if narrow == "bf16":  # the tiny model's layers are below bf16's size threshold: narrow every one of them
        for parent, name in linear_slots(model):
            layer = getattr(parent, name)
            if isinstance(layer, torch.nn.Linear):
                setattr(parent, name, Bf16Linear(layer.weight, layer.bias))
    return model


@dataclass(frozen=True)
class Request:
    prompt: torch.Tensor
    sampling: Sampling
    seed: int


def requests(tok: S2Tokenizer, count: int = 10) -> list[Request]:
    """Prompts of 12-70 columns (some with a reference: several pieces), other settings each, and two that end
    early (a low frame limit)."""
    rng = np.random.default_rng(7)
    reference = Reference("<|speaker:0|>The reference clip says these words.", rng.integers(0, 32, (10, 40)))
    words = ["The cat sat.", "Did you hear that?", "It is only the wind, nothing more.", "Run!",
             "Once upon a time there was a very long sentence.", "Yes.", "Where are we going tonight?"]
    out = []
    for i in range(count):
        refs = [reference] if i % 3 == 1 else []
        prompt = torch.as_tensor(build_prompt(tok, refs, [], f"<|speaker:{i % 2}|>{words[i % len(words)]}"))
        sampling = Sampling(temperature=(0.7, 0.9, 1.0)[i % 3], top_p=(0.8, 0.95)[i % 2], top_k=(30, 10, 4)[i % 3],
                            max_frames=4 if i in (2, 7) else 12)
        out.append(Request(prompt, sampling, 1000 + i))
    return out


def alone(model, tok: S2Tokenizer, request: Request) -> list[list[int]]:
    decoder = FastDecoder(model, tok.im_end_id, length=LENGTH, piece=PIECE)
    sampler = decoder.sampler(request.sampling, make_generator(request.seed))
    return [f.tolist() for f in generate_frames_fast(decoder, request.prompt, sampler,
                                                     request.sampling.max_frames)]


def run_batch(decoder: BatchDecoder, pool: list[Request], cancel: int | None = None, stagger: int = 2,
              cancel_after: int = 3) -> tuple[dict[int, list[list[int]]], set[int], dict[int, str]]:
    """Drive `decoder` as a scheduler would: a new request tried every `stagger` steps (waiting while none fits),
    one prefill piece per step, request `cancel` cancelled after `cancel_after` frames. Returns every request's
    frames, the cancelled ones and how each finished."""
    frames: dict[int, list[list[int]]] = {i: [] for i in range(len(pool))}
    owner: dict[int, int] = {}
    cancelled, finished = set(), {}
    queue = list(range(len(pool)))
    step = 0
    while queue or decoder.streams:
        if queue and step % stagger == 0:
            r = pool[queue[0]]
            slot = decoder.admit(r.prompt, r.sampling, make_generator(r.seed), r.sampling.max_frames)
            if slot is not None:
                owner[slot] = queue.pop(0)
        decoder.prefill()
        for frame in decoder.step():
            i = owner[frame.slot]
            if frame.codes is not None:
                frames[i].append(frame.codes.tolist())
            if frame.finished:
                finished[i] = frame.finished
            if i == cancel and len(frames[i]) == cancel_after and not frame.finished:
                decoder.cancel(frame.slot)
                cancelled.add(i)
        step += 1
        assert step < 2000, "the batch never drained"
    return frames, cancelled, finished


@pytest.fixture(scope="module", params=["bf16", "int8", "int4"])
def case(request: pytest.FixtureRequest, folder: Path, tok: S2Tokenizer):
    torch.set_num_threads(1)
    model = load(folder, tok, request.param)
    pool = requests(tok)
    return model, pool, [alone(model, tok, r) for r in pool]


@pytest.mark.parametrize("streams", [2, 4, 8])
def test_every_stream_gives_the_codes_of_its_request_alone(case, tok: S2Tokenizer, streams: int,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    model, pool, expected = case
    calls = {"streams_step": 0, "fast_codes_streams": 0}
    for name in calls:  # a silent fallback to the torch route would keep the codes and lose the speed
        original = getattr(CpuStepOps, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(CpuStepOps, name, counted)
    decoder = BatchDecoder(model, tok.im_end_id, length=LENGTH, max_batch=streams, piece=PIECE)
    frames, cancelled, finished = run_batch(decoder, pool, cancel=5)
    assert cancelled == {5} and 5 not in finished and len(frames[5]) == 3
    assert calls["streams_step"] > 0 and calls["fast_codes_streams"] > 0
    for i, want in enumerate(expected):
        if i in cancelled:
            assert frames[i] == want[:len(frames[i])], i
        else:
            assert frames[i] == want, (i, len(frames[i]), len(want))
            assert finished[i] in ("end", "limit")
    assert len(frames[2]) == len(expected[2]) <= 3 and len(frames[0]) > 3  # one ended early; others ran on
    # every slot served several requests: the ones after the first found its caches used
    assert len({len(f) for f in frames.values()}) > 1


def test_a_stream_cancelled_while_its_prompt_is_prefilled_leaves_its_slot_sound(folder: Path,
                                                                                    tok: S2Tokenizer) -> None:
    """A request dropped between two pieces of its prefill (a client that hung up while its long prompt went in):
    the stream beside it runs on unchanged, and the slot's settled piece serves the same prompt again (asked for
    while the other runs, so it takes that slot), whose codes are still its own alone; then other requests."""
    model = load(folder, tok, "int8")
    pool = requests(tok, 5)
    long = pool[1]  # with a reference: several pieces
    decoder = BatchDecoder(model, tok.im_end_id, length=LENGTH, max_batch=2, piece=PIECE)
    beside = decoder.admit(pool[0].prompt, pool[0].sampling, make_generator(pool[0].seed))
    while decoder.waiting:
        decoder.prefill()
    frames: dict[int, list] = {beside: [decoder.step()[0].codes.tolist()]}
    slot = decoder.admit(long.prompt, long.sampling, make_generator(long.seed))
    assert slot != beside and decoder.prefill() is None and decoder.waiting  # one piece of several in
    frames[beside] += [decoder.step()[0].codes.tolist()]
    decoder.cancel(slot)
    assert not decoder.waiting and decoder.running == [beside]
    frames[beside] += [decoder.step()[0].codes.tolist()]
    assert decoder.admit(long.prompt, long.sampling, make_generator(long.seed)) == slot
    before = decoder.slots[slot].prefilled
    frames[slot] = []
    while decoder.streams:
        decoder.prefill()
        for frame in decoder.step():
            if frame.codes is not None:
                frames[frame.slot].append(frame.codes.tolist())
    assert 0 < decoder.slots[slot].prefilled - before < long.prompt.shape[1]  # the settled piece not run again
    assert frames[beside] == alone(model, tok, pool[0]) and frames[slot] == alone(model, tok, long)
    after, _, finished = run_batch(decoder, [pool[4], pool[2]], stagger=1)
    for i, request in enumerate([pool[4], pool[2]]):
        assert after[i] == alone(model, tok, request), i
        assert finished[i] in ("end", "limit")


def test_the_torch_route_gives_the_same_codes(folder: Path, tok: S2Tokenizer) -> None:
    """CUDA's route (torch's ops, one product per layer for all streams), here on a float64 model, where the C++
    steps do not apply: the same codes as each request alone."""
    model = load(folder, tok, "none", torch.float64)
    pool = requests(tok, 5)
    decoder = BatchDecoder(model, tok.im_end_id, length=LENGTH, max_batch=3, piece=PIECE)
    frames, cancelled, _ = run_batch(decoder, pool, cancel=3, stagger=1)
    assert not any(isinstance(d.caches.ops, CpuStepOps) for d in decoder.slots if d is not None)
    for i, request in enumerate(pool):
        want = alone(model, tok, request)
        assert frames[i] == (want[:len(frames[i])] if i in cancelled else want), i


def test_admission_waits_for_a_slot_and_for_memory(folder: Path, tok: S2Tokenizer) -> None:
    """A stream's cache is sized to its request (prompt and frame limit, `SLOT_GRAIN` positions at a time): two
    requests that may fill the whole context take the memory of two contexts; short ones take less."""
    model = load(folder, tok, "int8")
    pool = requests(tok, 4)
    context = 4 * SLOT_GRAIN
    one = memory.stream_bytes(model.config, context, 4)
    decoder = BatchDecoder(model, tok.im_end_id, length=context, max_batch=3, piece=PIECE, memory_bytes=2 * one)
    first = decoder.admit(pool[0].prompt, pool[0].sampling, make_generator(1), 0)  # the rest of the context each
    second = decoder.admit(pool[1].prompt, pool[1].sampling, make_generator(2), 0)
    assert {first, second} == {0, 1} and decoder.waiting and decoder.running == []
    assert decoder.admit(pool[2].prompt, pool[2].sampling, make_generator(3), 0) is None  # no memory left
    decoder.cancel(second)
    assert decoder.admit(pool[2].prompt, pool[2].sampling, make_generator(3), 0) is not None
    small = BatchDecoder(model, tok.im_end_id, length=context, max_batch=3, piece=PIECE, memory_bytes=2 * one)
    slots = [small.admit(r.prompt, r.sampling, make_generator(i), 4) for i, r in enumerate(pool[:3])]
    assert sorted(slots) == [0, 1, 2] and all(d.length == SLOT_GRAIN for d in small.slots)
    assert small.admit(pool[3].prompt, pool[3].sampling, make_generator(9), 4) is None  # every slot busy
    with pytest.raises(UserError, match=f"does not fit the fast path's context of {context}"):
        small.admit(torch.zeros((11, context + 1), dtype=torch.long), pool[0].sampling, make_generator(1), 4)
    tight = BatchDecoder(model, tok.im_end_id, length=context, max_batch=2, piece=PIECE, memory_bytes=one // 4)
    with pytest.raises(UserError, match="needs .* GB for its cache .* use a shorter text"):
        tight.admit(pool[0].prompt, pool[0].sampling, make_generator(1), 0)


def test_a_prompt_returns_to_the_slot_holding_its_prefix_and_idle_prefixes_give_way(folder: Path,
                                                                                       tok: S2Tokenizer) -> None:
    model = load(folder, tok, "int8")
    pool = requests(tok, 3)
    size = lambda positions: memory.stream_bytes(model.config, positions, 4)  # noqa: E731
    decoder = BatchDecoder(model, tok.im_end_id, length=4 * SLOT_GRAIN, max_batch=3, piece=PIECE,
                           memory_bytes=size(2 * SLOT_GRAIN) + size(SLOT_GRAIN) // 2)
    short = [Request(r.prompt, Sampling(max_frames=4), r.seed) for r in pool[:2]]
    run_batch(decoder, short, stagger=1)  # two short streams side by side: two slots keep their prompts
    kept = [d for d in decoder.slots if d is not None]
    assert len(kept) == 2 and all(d.length == SLOT_GRAIN for d in kept)
    # the second prompt again: back to the slot that holds it, whose settled pieces it reuses
    holder = next(slot for slot, d in enumerate(decoder.slots) if d is not None
                  and d.settled == short[1].prompt.shape[1] and torch.equal(d.tokens[:, :d.settled], short[1].prompt))
    before = decoder.slots[holder].prefilled
    assert decoder.admit(short[1].prompt, short[1].sampling, make_generator(5), 4) == holder
    while decoder.waiting:
        decoder.prefill()
    assert 0 < decoder.slots[holder].prefilled - before < short[1].prompt.shape[1]
    decoder.cancel(holder)
    # a longer request: its slot grows, and the other idle slot gives up its prefix for the memory
    slot = decoder.admit(pool[2].prompt, Sampling(max_frames=300), make_generator(6), 300)
    assert slot is not None and decoder.slots[slot].length == 2 * SLOT_GRAIN
    assert [d is not None for d in decoder.slots].count(True) == 1


def test_memory_planner_counts_each_streams_cache() -> None:
    """S2 Pro's shape: weights + B caches of the streams' length + codec + buffers; one stream's cache is its KV
    caches and a little more (its columns' record, its sampler's vectors)."""
    from test_model_config import S2_CONFIG

    from s2studio.model.config import parse_config

    config = parse_config(S2_CONFIG)
    per = memory.stream_bytes(config, 2048, 4)
    kv = memory.kv_cache_bytes(config, 2048, 4)
    assert kv < per < 1.01 * kv
    base = memory.footprint(config, precision="fp32", context=2048, streams=0).total
    assert memory.footprint(config, precision="fp32", context=2048, streams=3).total == base + 3 * per
    assert memory.max_batch(config, free=base + 3 * per + per // 2, precision="fp32", positions=2048) == 3
    assert memory.max_batch(config, free=base - 1, precision="fp32", positions=2048) == 0
    assert memory.max_streams(config, free=5 * per, positions=2048, dtype_bytes=4) == 5
