"""The generation loop's rules (spec §6.6, §7): positions, the stop rule and its first-frame
exception, max_new_tokens, the dropped last frame, cancel, the prompt-length check, conversation
growth across batches with one never-reseeded generator, and the line mode's context hook.

A scripted stand-in model makes the main token of every step certain, so the rules are checked
exactly; the last tests run the real tiny DualAR end to end."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_tokenizer import write_tokenizer
from torch import nn

from s2studio.engine.s2.generate import (
    BatchFinished, BatchStarted, ExactDecoder, FrameReady, generate_batches, generate_codes, generate_frames,
    generate_long, make_generator, make_sampler, plan_batches,
)
from s2studio.errors import UserError
from s2studio.settings import Sampling
from s2studio.text.prompt import Exchange, Reference, build_prompt
from s2studio.text.tokenizer import S2Tokenizer

C = 16
UPSTREAM = Sampling(temperature=1.0, top_p=0.9, max_frames=0, seed_mode="fixed", seed=42)
"""Upstream's command line: temperature 1.0, top-p 0.9, no frame limit, seed 42."""


class Scripted(nn.Module):
    """A model whose slow step puts all the probability on `mains[step]`; records every call."""

    def __init__(self, mains: list[int], *, begin: int, end: int, im_end: int, vocab: int, seq_len: int) -> None:
        super().__init__()
        self.config = SimpleNamespace(vocab_size=vocab, codebook_size=C, num_codebooks=10, semantic_begin_id=begin,
                                      semantic_end_id=end, im_end_id=im_end, slow=SimpleNamespace(max_seq_len=seq_len))
        self.mains = mains
        self.fast_embeddings = nn.Embedding(C, 4)
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.caches: list[tuple[int, torch.dtype]] = []

    def setup_caches(self, max_seq_len: int, dtype: torch.dtype) -> None:
        self.caches.append((max_seq_len, dtype))

    def forward_slow(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls.append((tokens.clone(), input_pos.clone()))
        logits = torch.full((1, 1, self.config.vocab_size), -30.0)
        logits[0, 0, self.mains[len(self.calls) - 1]] = 30.0
        return logits, torch.zeros(1, 1, 4)

    def forward_fast(self, x: torch.Tensor, pos: int) -> torch.Tensor:
        return torch.zeros(1, 1, C)


BEGIN, END_SEM, IM_END, V = 40, 55, 7, 64
S1, S2, S3 = BEGIN + 1, BEGIN + 2, BEGIN + 3


def scripted(mains: list[int], seq_len: int = 4096) -> Scripted:
    return Scripted(mains, begin=BEGIN, end=END_SEM, im_end=IM_END, vocab=V, seq_len=seq_len)


def run(model: Scripted, prompt_len: int = 5, max_new: int = 0, seed: int = 0,
        cancel: threading.Event | None = None) -> tuple[list[torch.Tensor], torch.Generator]:
    g = make_generator(seed)
    sampler = make_sampler(model, Sampling(temperature=0.7, top_p=0.8), g)
    prompt = np.zeros((11, prompt_len), dtype=np.int64)
    prompt[0] = np.arange(prompt_len)
    return list(generate_frames(model, prompt, sampler, max_new, cancel)), g


def draws(frames: int, seed: int = 0) -> torch.Generator:
    g = torch.Generator().manual_seed(seed)
    for _ in range(frames):
        for n in [V, V] + [C] * 9:
            torch.rand(n, generator=g)
    return g


def test_stops_after_im_end_and_drops_it() -> None:
    model = scripted([S1, S2, S3, IM_END, S1, S1])
    frames, g = run(model)
    assert len(frames) == 3
    assert [int(f[0]) for f in frames] == [1, 2, 3]  # code 0 = main - semantic_begin
    assert all(f.dtype == torch.int64 and f.shape == (10,) for f in frames)
    # prefill at 0..T-1 in one call, then one call per frame at T, T+1, T+2
    assert [p.tolist() for _, p in model.calls] == [[0, 1, 2, 3, 4], [5], [6], [7]]
    assert model.calls[0][0].shape == (1, 11, 5)
    # each step is fed the previous frame: main token and all ten codes
    fed = model.calls[1][0][0, :, 0]
    assert int(fed[0]) == S1 and torch.equal(fed[1:], frames[0])
    assert torch.equal(g.get_state(), draws(4).get_state())  # the dropped frame's draws were made


def test_im_end_on_the_prompt_frame_does_not_stop() -> None:
    model = scripted([IM_END, S1, IM_END])
    frames, _ = run(model)
    assert len(frames) == 2
    assert int(frames[0][0]) == 0  # <|im_end|> clamps to code 0
    assert int(model.calls[1][0][0, 0, 0]) == IM_END  # and is fed back as the next input


def test_max_new_tokens_counts_the_dropped_frame() -> None:
    model = scripted([S1] * 10)
    frames, g = run(model, max_new=3)
    assert len(frames) == 2 and len(model.calls) == 3
    assert torch.equal(g.get_state(), draws(3).get_state())


def test_max_new_tokens_one_gives_no_frame_but_draws_one() -> None:
    model = scripted([S1] * 3)
    frames, g = run(model, max_new=1)
    assert frames == [] and len(model.calls) == 1
    assert torch.equal(g.get_state(), draws(1).get_state())


def test_context_bounds_the_frames() -> None:
    # max_new 0 = the rest of the context; a larger request is cut to it too
    for max_new in (0, 100):
        model = scripted([S1] * 10, seq_len=9)
        frames, _ = run(model, prompt_len=5, max_new=max_new)
        assert len(model.calls) == 4 and len(frames) == 3
    with pytest.raises(UserError, match="does not fit the model's context of 5"):
        run(scripted([S1], seq_len=5), prompt_len=5)


def test_caches_are_set_up_for_the_full_context_in_model_dtype() -> None:
    model = scripted([S1, IM_END], seq_len=1234)
    run(model)
    assert model.caches == [(1234, torch.float32)]


def test_cancel_is_checked_between_frames() -> None:
    model = scripted([S1] * 20)
    cancel = threading.Event()
    cancel.set()
    assert run(model, cancel=cancel)[0] == [] and model.calls == []

    model = scripted([S1] * 20)
    cancel = threading.Event()
    g = make_generator(0)
    sampler = make_sampler(model, UPSTREAM, g)
    got = []
    for frame in generate_frames(model, np.zeros((11, 4), dtype=np.int64), sampler, 0, cancel):
        got.append(frame)
        if len(got) == 2:
            cancel.set()
    assert len(got) == 2 and len(model.calls) == 2


# ----------------------------------------------------------------------------- batches


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> S2Tokenizer:
    return S2Tokenizer.from_file(write_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json"))


def tok_scripted(tok: S2Tokenizer, mains: list[int], seq_len: int = 4096) -> Scripted:
    vocab = (tok.vocab_size + 7) // 8 * 8
    return Scripted(mains, begin=tok.semantic_begin_id, end=tok.semantic_end_id, im_end=tok.im_end_id,
                    vocab=vocab, seq_len=seq_len)


def test_conversation_grows_and_the_generator_is_never_reseeded(tok: S2Tokenizer) -> None:
    b, e = tok.semantic_begin_id, tok.im_end_id
    # batch 1: 2 kept frames; batch 2: 1 kept frame; batch 3: 3 kept frames
    mains = [b + 1, b + 2, e, b + 3, e, b + 4, b + 5, b + 6, e]
    model = tok_scripted(tok, mains)
    text = "<|speaker:0|>one two <|speaker:1|>three four <|speaker:0|>five"
    ref = Reference("hello", np.arange(30).reshape(10, 3) % 16)
    events = list(generate_long(ExactDecoder(model), tok, text, references=[ref],
                                sampling=replace(UPSTREAM, seed=9), chunk_length=12))
    finished = [ev for ev in events if isinstance(ev, BatchFinished)]
    texts = ["<|speaker:0|>one two", "<|speaker:1|>three four", "<|speaker:0|>five"]
    assert [f.text for f in finished] == texts
    assert [f.codes.shape for f in finished] == [(10, 2), (10, 1), (10, 3)]
    assert all(f.codes.dtype == np.int64 for f in finished)
    assert finished[2].codes[0].tolist() == [4, 5, 6]
    # every batch is re-prefilled from position 0 with the whole conversation so far
    prefills = [(tokens, pos) for tokens, pos in model.calls if pos.numel() > 1]
    history: list[Exchange] = []
    for (tokens, pos), f in zip(prefills, finished):
        want = build_prompt(tok, [ref], history, f.text)
        assert torch.equal(tokens[0], torch.from_numpy(want)) and pos.tolist() == list(range(want.shape[1]))
        history.append(Exchange(f.text, f.codes))
    assert len(model.calls) == 9
    # events: start, frames, finish per batch, frames numbered within their batch
    kinds = [type(ev).__name__ for ev in events]
    assert kinds[:4] == ["BatchStarted", "FrameReady", "FrameReady", "BatchFinished"]
    frames = [ev for ev in events if isinstance(ev, FrameReady)]
    assert [(f.index, f.frame) for f in frames] == [(0, 0), (0, 1), (1, 0), (2, 0), (2, 1), (2, 2)]
    started = [ev for ev in events if isinstance(ev, BatchStarted)]
    assert [s.prompt_length for s in started] == [p[0].shape[2] for p in prefills]
    assert started[0].count == 3


def test_batches_continue_one_stream(tok: S2Tokenizer) -> None:
    b, e = tok.semantic_begin_id, tok.im_end_id
    model = tok_scripted(tok, [b + 1, b + 1, e, b + 1, e])
    g = make_generator(5)
    list(generate_batches(ExactDecoder(model), tok, ["a", "b"], sampling=UPSTREAM, generator=g))
    vocab = model.config.vocab_size
    ref = torch.Generator().manual_seed(5)
    for _ in range(5):
        for n in [vocab, vocab] + [C] * 9:
            torch.rand(n, generator=ref)
    assert torch.equal(g.get_state(), ref.get_state())


def test_line_mode_context_hook(tok: S2Tokenizer) -> None:
    b, e = tok.semantic_begin_id, tok.im_end_id
    model = tok_scripted(tok, [b + 1, b + 2, e] * 3)
    seen: list[tuple[int, str]] = []

    def newest_one(history, text):
        seen.append((len(history), text))
        return history[-1:]

    codes = generate_codes(ExactDecoder(model), tok, "first line\n\n second line \nthird line", sampling=UPSTREAM,
                           batching="line", context=newest_one)
    assert seen == [(0, "first line"), (1, "second line"), (2, "third line")]
    assert [c.shape for c in codes] == [(10, 2)] * 3
    third = [tokens for tokens, pos in model.calls if pos.numel() > 1][2]
    want = build_prompt(tok, [], [Exchange("second line", codes[1])], "third line")
    assert torch.equal(third[0], torch.from_numpy(want))


def test_prompt_too_long(tok: S2Tokenizer) -> None:
    model = tok_scripted(tok, [tok.im_end_id] * 4, seq_len=2048 + 30)
    with pytest.raises(UserError, match=r"prompt is too long: \d+ tokens > 30"):
        list(generate_long(ExactDecoder(model), tok, "<|speaker:0|>" + "word " * 20, sampling=UPSTREAM))
    # the limit is inclusive: a prompt of exactly max_seq_len - 2048 tokens is accepted
    n = build_prompt(tok, [], [], "x").shape[1]
    ok = tok_scripted(tok, [tok.im_end_id, tok.im_end_id], seq_len=2048 + n)
    assert len(generate_codes(ExactDecoder(ok), tok, "x", sampling=UPSTREAM)) == 1


def test_bad_references_and_text(tok: S2Tokenizer) -> None:
    model = tok_scripted(tok, [tok.im_end_id] * 4)
    with pytest.raises(UserError, match=r"reference 2 codes must have shape \(10, frames\)"):
        list(generate_long(ExactDecoder(model), tok, "hi", sampling=UPSTREAM,
                           references=[Reference("a", np.zeros((10, 2), np.int64)),
                                       Reference("b", np.zeros((8, 2), np.int64))]))
    with pytest.raises(UserError, match="beyond the codebook size 16"):
        list(generate_long(ExactDecoder(model), tok, "hi", sampling=UPSTREAM,
                           references=[Reference("a", np.full((10, 2), 16))]))
    with pytest.raises(UserError, match="empty"):
        list(generate_long(ExactDecoder(model), tok, " \n ", sampling=UPSTREAM, batching="line"))
    with pytest.raises(UserError, match="unknown batching"):
        plan_batches("x", "paragraph", 300)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="temperature"):
        Sampling(temperature=2.0)
    with pytest.raises(UserError, match="seed must be between"):
        make_generator(2**64)
    assert torch.equal(torch.rand(4, generator=make_generator(-3)),
                       torch.rand(4, generator=torch.Generator().manual_seed(2**64 - 3)))


# ----------------------------------------------------------------------------- the real tiny model


def tiny_dual_ar(tok: S2Tokenizer, seed: int = 0):
    from s2studio.model.config import DualARConfig, TransformerConfig
    from s2studio.model.dual_ar import DualAR

    def stack(layers: int, qk_norm: bool) -> TransformerConfig:
        return TransformerConfig(dim=32, n_layer=layers, n_head=4, n_local_heads=2, head_dim=16, intermediate_size=64,
                                 rope_base=1e6, norm_eps=1e-6, max_seq_len=2304, qk_norm=qk_norm, qkv_bias=False,
                                 o_bias=False)

    config = DualARConfig(slow=stack(2, True), fast=stack(1, False), vocab_size=(tok.vocab_size + 7) // 8 * 8,
                          codebook_size=C, num_codebooks=10, tie_word_embeddings=True, scale_codebook_embeddings=True,
                          norm_fastlayer_input=True, semantic_begin_id=tok.semantic_begin_id,
                          semantic_end_id=tok.semantic_end_id, im_end_id=tok.im_end_id)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = DualAR(config)
    return model.eval()


def test_real_model_is_deterministic_per_seed(tok: S2Tokenizer) -> None:
    model = tiny_dual_ar(tok)
    text = "<|speaker:0|>one two <|speaker:1|>three <|speaker:0|>four five"
    ref = Reference("hello", np.arange(40).reshape(10, 4) % C)
    settings = Sampling(temperature=0.8, top_p=0.8, max_frames=6, seed_mode="fixed")
    decoder = ExactDecoder(model)
    a = generate_codes(decoder, tok, text, references=[ref], sampling=replace(settings, seed=3), chunk_length=14)
    b = generate_codes(decoder, tok, text, references=[ref], sampling=replace(settings, seed=3), chunk_length=14)
    c = generate_codes(decoder, tok, text, references=[ref], sampling=replace(settings, seed=4), chunk_length=14)
    assert len(a) == 3
    assert all(x.shape[0] == 10 and 0 <= x.shape[1] <= 5 for x in a)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    assert all(x.min() >= 0 and x.max() < C for x in a)
