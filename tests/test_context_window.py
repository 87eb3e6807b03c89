"""The rolling context of line mode moves in hops (engine/s2/context.py): the rule itself, and the engine that
follows it, so that the lines after a hop reuse the cached prompt and a line rendered alone with its earlier
lines as context hears what it heard in the whole render."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from engine_contract import collect

from s2studio.demo_model import write_demo_model
from s2studio.engine.api import (
    ContextTurn, JobFinished, LineFinished, LineSpec, LoadRequest, Reference, SynthesisRequest,
)
from s2studio.engine.s2 import S2Engine
from s2studio.engine.s2.context import hop
from s2studio.engine.s2.fast import piece_ends
from s2studio.settings import Sampling
from s2studio.text.prompt import Exchange, Reference as PromptReference, build_prompt


def windows(lengths: list[int], own: list[int], limit: int, max_lines: int) -> list[int]:
    """Each line's window over the lines before it, as the engine follows them from the first line."""
    starts, start = [], 0
    for k, columns in enumerate(own):
        start = hop(start, lengths[:k], columns, limit, max_lines)
        starts.append(start)
    return starts


def test_a_full_window_drops_the_oldest_half_at_once() -> None:
    # at most 4 lines: the fifth earlier line drops three (the oldest half of five), then it grows again
    assert windows([10] * 12, [5] * 12, 1000, 4) == [0, 0, 0, 0, 0, 3, 3, 3, 6, 6, 6, 9]
    assert windows([10] * 6, [5] * 6, 1000, 1) == [0, 0, 1, 2, 3, 4]  # one line: each line hears the one before
    assert windows([10] * 4, [5] * 4, 1000, 0) == [0, 1, 2, 3]  # none


def test_the_prompts_limit_drops_the_oldest_half_too() -> None:
    # lines of 700 columns, 2048 to fill: two fit, a third drops two (the half of three, rounded up)
    assert windows([700] * 9, [40] * 9, 2048, 6) == [0, 0, 0, 2, 2, 4, 4, 6, 6]
    # a long line: the window shrinks to it, then drops it
    assert windows([100, 100, 1990, 100, 100], [40] * 5, 2048, 6) == [0, 0, 0, 2, 3]
    # a line too long to hear anything
    assert hop(0, [10, 10], 3000, 2048, 6) == 2


def _codes(frames: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 32, size=(10, frames)).astype(np.int64)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> S2Engine:
    torch.set_num_threads(1)
    folder = write_demo_model(tmp_path_factory.mktemp("window") / "tiny", seed=3)
    engine = S2Engine(context_lines=2)
    events = collect(engine.load(LoadRequest("load", folder, device="cpu", precision="fp32", speed="fast"),
                                 threading.Event()))
    assert isinstance(events[-1], JobFinished), events[-1]
    return engine


TEXTS = ("The first line.", "A second one here.", "Third.", "The fourth line.", "Five.", "And the sixth.")
REFS = (Reference(0, "A reference.", _codes(6, 0)),)


def test_lines_after_a_hop_prefill_only_the_line_before_them(engine: S2Engine) -> None:
    """Two earlier lines at most: lines 4 and 6 hop (drop the two oldest), lines 5's prompt starts as line 4's,
    so it prefills only line 4's answer and its own turn; a line alone with every earlier take as context hears
    what it heard in the whole render and gives the same take."""
    loaded = engine._loaded
    tok = loaded.tokenizer
    lines = tuple(LineSpec(f"l{i}", 0, text) for i, text in enumerate(TEXTS))
    sampling = Sampling(max_frames=6, seed_mode="fixed", seed=21)
    prompts, prefilled, takes = [], [], []
    before = 0
    for event in engine.generate(SynthesisRequest("all", lines, REFS, sampling), threading.Event()):
        if isinstance(event, LineFinished):
            takes.append(event)
            (decoder,) = [d for d in loaded.decoder.slots if d is not None]  # one stream: the same slot for every line
            prompts.append(decoder.tokens[:, :decoder.settled].cpu().numpy().copy())
            prefilled.append(decoder.prefilled - before)
            before = decoder.prefilled
    assert len(takes) == len(TEXTS)
    refs = [PromptReference("<|speaker:0|>A reference.", REFS[0].codes)]
    history = [Exchange(f"<|speaker:0|>{text}", take.codes) for text, take in zip(TEXTS, takes)]
    starts = [0, 0, 0, 2, 2, 4]
    for k, start in enumerate(starts):
        np.testing.assert_array_equal(prompts[k], build_prompt(tok, refs, history[start:k], history[k].text), f"line {k}")
    for k in range(1, len(TEXTS)):  # reused: the pieces of the line before's prompt that this one repeats
        prompt, last = torch.as_tensor(prompts[k]), prompts[k - 1]
        common = int(np.cumprod(prompts[k][:, :last.shape[1]] == last[:, :prompts[k].shape[1]], axis=1).all(0).sum())
        reused = max(end for end in piece_ends(prompt, tok.im_end_id) if end <= common)
        assert prefilled[k] == prompts[k].shape[1] - reused
        message_ends = np.flatnonzero(prompts[k][0] == tok.im_end_id) + 1
        if starts[k] == starts[k - 1]:  # the window kept: up to the end of the line before's user turn at least
            assert reused >= message_ends[2 * (k - 1 - starts[k]) + 1]
        else:  # a hop: everything after the system message is new
            assert reused < message_ends[1]

    context = tuple(ContextTurn(0, text, take.codes) for text, take in zip(TEXTS[:5], takes))
    alone = collect(engine.generate(SynthesisRequest("alone", lines[5:], REFS,
                                                     Sampling(max_frames=6, seed_mode="fixed", seed=26),
                                                     context=context), threading.Event()))
    again = next(e for e in alone if isinstance(e, LineFinished))
    np.testing.assert_array_equal(decoder.tokens[:, :decoder.settled].cpu().numpy(), prompts[5])
    assert again.seed == takes[5].seed
    np.testing.assert_array_equal(again.codes, takes[5].codes)
    np.testing.assert_array_equal(again.audio, takes[5].audio)

