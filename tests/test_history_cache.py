"""The fast path's cache never changes what a prompt computes (issue: the same request gave other audio after
itself): a prefill and the decode steps after it give the same bits on a decoder that served any sequence of
other prompts as on a fresh one. Hypothesis draws the sequences: prompts that repeat, share a prefix, are a prefix
of the cached columns or extend them (with the frames a request generated), cancels after a few frames, and
garbage left in every cache position a prompt has not written. One model per weight narrowing the fast path runs
(bf16 weights through the C++ steps, int8, int4, and a bfloat16 model through torch's ops)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from s2studio.demo_model import write_demo_model
from s2studio.engine.s2.fast import FastDecoder, piece_ends
from s2studio.engine.s2.setup import load_runtime

MODES = {"bf16 weights": ("fp32", "none"), "int8": ("fp32", "int8"), "int4": ("fp32", "int4"),
         "bf16 model": ("bf16", "none")}
LENGTH = 160
PIECE = 16
"""Small pieces, so that prompts of a few dozen columns have several."""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_demo_model(tmp_path_factory.mktemp("history-cache") / "tiny", seed=4)


@pytest.fixture(scope="module", params=list(MODES))
def runtime(request: pytest.FixtureRequest, folder: Path):
    torch.set_num_threads(1)
    precision, quantize = MODES[request.param]
    return load_runtime(folder, device="cpu", precision=precision, quantize=quantize, speed="fast", codec=False)


def segments(runtime, seed: int) -> list[torch.Tensor]:
    """Five (11, n) blocks of columns: text that ends a message with `<|im_end|>`, voice columns, plain text."""
    c, tok = runtime.model.config, runtime.tokenizer
    rng = np.random.default_rng(seed)
    out = []
    for i, n in enumerate((23, 9, 14, 31, 5)):
        block = np.zeros((c.num_codebooks + 1, n), dtype=np.int64)
        if i % 2:  # voice columns: a semantic id and its codes
            block[1:] = rng.integers(0, c.codebook_size, (c.num_codebooks, n))
            block[0] = block[1] + tok.semantic_begin_id
        else:
            block[0] = rng.integers(0, 200, n)
            block[0, -2] = tok.im_end_id
        out.append(torch.as_tensor(block))
    return out


def frame_column(runtime, rng: np.random.Generator) -> torch.Tensor:
    c, tok = runtime.model.config, runtime.tokenizer
    column = torch.as_tensor(rng.integers(0, c.codebook_size, (c.num_codebooks + 1, 1)))
    column[0, 0] = column[1, 0] + tok.semantic_begin_id
    return column


def spoil(decoder: FastDecoder) -> None:
    """Garbage in every slow cache position after the filled ones and in the whole fast cache: a step that read
    what it had not written would no longer equal a fresh decoder's."""
    for layer in decoder.caches.slow:
        layer.k[:, :, decoder.filled:] = float("nan")
        layer.v[:, :, decoder.filled:] = 1e4
    for layer in decoder.caches.fast:
        layer.k.fill_(float("nan"))
        layer.v.fill_(-1e4)


def outputs(decoder: FastDecoder, prompt: torch.Tensor, steps: list[torch.Tensor]) -> list[torch.Tensor]:
    """The prompt's logits and fast input, then each decode step's, and the slow keys of the prompt."""
    with torch.inference_mode():
        got = list(decoder.prefill(prompt))
        for column in steps:
            got += decoder.step(column)
        got += [layer.k[0, :, :prompt.shape[1]].clone() for layer in decoder.caches.slow]
    return got


request = st.tuples(st.lists(st.integers(0, 4), min_size=1, max_size=5),  # the prompt's segments
                    st.integers(0, 5),  # frames generated after it (fewer: a cancel)
                    st.booleans())  # spoil the caches before it


@settings(max_examples=25, deadline=None)
@given(st.lists(request, min_size=2, max_size=6), st.integers(0, 3))
def test_a_prefill_and_its_steps_equal_a_fresh_decoders(runtime, sequence, seed: int) -> None:
    blocks = segments(runtime, seed)
    rng = np.random.default_rng(seed)
    shared = FastDecoder(runtime.model, runtime.tokenizer.im_end_id, length=LENGTH, piece=PIECE)
    for parts, frames, spoiled in sequence:
        prompt = torch.cat([blocks[i] for i in parts], dim=1)
        steps = [frame_column(runtime, rng) for _ in range(frames)]
        if spoiled:
            spoil(shared)
        fresh = FastDecoder(runtime.model, runtime.tokenizer.im_end_id, length=LENGTH, piece=PIECE)
        ours, theirs = outputs(shared, prompt, steps), outputs(fresh, prompt, steps)
        for a, b in zip(ours, theirs, strict=True):
            assert torch.equal(a, b), f"{parts} after {shared.prefilled} columns"


def test_the_pieces_depend_on_the_prompt_only(runtime) -> None:
    """Messages end pieces, and so do multiples of the piece length; a prefill that starts at a boundary finds the
    same ones after it."""
    tok = runtime.tokenizer
    prompt = torch.cat(segments(runtime, 0), dim=1)  # 82 columns, `<|im_end|>` at 21, 44 and 80
    assert piece_ends(prompt, tok.im_end_id, 0, PIECE) == [16, 22, 32, 45, 48, 64, 80, 81, 82]
    assert piece_ends(prompt, tok.im_end_id, 48, PIECE) == [64, 80, 81, 82]
    assert piece_ends(prompt, tok.im_end_id, 0, 64) == [22, 45, 64, 81, 82]


def test_reuse_takes_whole_pieces_of_the_last_prefill_only(runtime) -> None:
    tok = runtime.tokenizer
    blocks = segments(runtime, 1)
    decoder = FastDecoder(runtime.model, tok.im_end_id, length=LENGTH, piece=PIECE)
    prompt = torch.cat(blocks[:3], dim=1)  # 46 columns, messages end at 22 and 45
    with torch.inference_mode():
        decoder.prefill(prompt)
        assert decoder.reusable(prompt) == 45  # the same prompt: all but its last piece (its last column)
        assert decoder.reusable(prompt[:, :40]) == 32  # a prefix of it: back to a boundary of its own
        frames = [frame_column(runtime, np.random.default_rng(0)) for _ in range(4)]
        for column in frames:
            decoder.step(column)
        assert (decoder.filled, decoder.settled) == (50, 46)
        # the prompt with the generated frames after it: they were decode steps, so its prefill starts at 45
        longer = torch.cat([prompt, *frames, blocks[3]], dim=1)
        assert decoder.reusable(longer) == 45
        decoder.weights_changed()
        assert decoder.reusable(prompt) == 0
