"""Golden prompt matrices written out by hand from spec §5, and upstream's turn splitting and
grouping (§7.2). The expected matrices spell every text part literally, so a change in wording,
in part boundaries or in the codes layout fails here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_tokenizer import write_tokenizer

from s2studio.errors import UserError
from s2studio.text.prompt import (
    Exchange, Reference, build_prompt, check_codes, conversation, encoded_length, exchange_parts, group_turns,
    line_batches, split_turns, upstream_batches,
)
from s2studio.text.tokenizer import S2Tokenizer

SYS_START = "<|im_start|>system\n"
END = "<|im_end|>\n"
USER = "<|im_start|>user\n"
ASSISTANT = "<|im_start|>assistant\n<|voice|>"


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> S2Tokenizer:
    return S2Tokenizer.from_file(write_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json"))


def codes(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 16, size=(10, n)).astype(np.int64)


def golden(tok: S2Tokenizer, parts: list) -> np.ndarray:
    """Assemble the expected matrix column block by column block."""
    blocks = []
    for p in parts:
        if isinstance(p, str):
            ids = tok.encode(p)
            block = np.zeros((11, len(ids)), dtype=np.int64)
            block[0] = ids
        else:
            block = np.vstack([p[0:1] + tok.semantic_begin_id, p])
        blocks.append(block)
    return np.concatenate(blocks, axis=1)


def test_no_reference(tok: S2Tokenizer) -> None:
    got = build_prompt(tok, [], [], "<|speaker:0|>Hello there")
    want = golden(tok, [SYS_START, "convert the provided text to speech", END,
                        USER, "<|speaker:0|>Hello there", END, ASSISTANT])
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)
    assert np.all(got[1:] == 0)
    assert got[0, -1] == tok.voice_id and got[0, 0] == tok.im_start_id


def test_one_reference(tok: S2Tokenizer) -> None:
    ref = codes(7, 1)
    got = build_prompt(tok, [Reference("how are you", ref)], [], "<|speaker:0|>fox")
    want = golden(tok, [SYS_START, "convert the provided text to speech reference to the following:\n\nText:\n",
                        "<|speaker:0|>how are you", "\n\nSpeech:\n", ref, END,
                        USER, "<|speaker:0|>fox", END, ASSISTANT])
    np.testing.assert_array_equal(got, want)
    # the reference block: row 0 is semantic_begin + code_0, rows 1..10 the codes
    start = int(np.argmax(got[0] >= tok.semantic_begin_id))
    np.testing.assert_array_equal(got[1:, start:start + 7], ref)


def test_two_references_auto_tagged_and_concatenated(tok: S2Tokenizer) -> None:
    a, b = codes(3, 2), codes(5, 3)
    got = build_prompt(tok, [Reference("one", a), Reference("two", b)], [], "hi")
    want = golden(tok, [SYS_START, "convert the provided text to speech reference to the following:\n\nText:\n",
                        "<|speaker:0|>one\n<|speaker:1|>two", "\n\nSpeech:\n", np.concatenate([a, b], axis=1), END,
                        USER, "hi", END, ASSISTANT])
    np.testing.assert_array_equal(got, want)


def test_explicit_tags_anywhere_suppress_auto_tagging(tok: S2Tokenizer) -> None:
    a, b = codes(2, 4), codes(2, 5)
    refs = [Reference("<|speaker:1|>first", a), Reference("second <|speaker:0|> mixed", b)]
    got = build_prompt(tok, refs, [], "x")
    want = golden(tok, [SYS_START, "convert the provided text to speech reference to the following:\n\nText:\n",
                        "<|speaker:1|>first\nsecond <|speaker:0|> mixed", "\n\nSpeech:\n",
                        np.concatenate([a, b], axis=1), END, USER, "x", END, ASSISTANT])
    np.testing.assert_array_equal(got, want)
    # only one of the two carries a tag: the other is tagged by its position
    got2 = build_prompt(tok, [Reference("<|speaker:1|>first", a), Reference("second", b)], [], "x")
    want2 = golden(tok, [SYS_START, "convert the provided text to speech reference to the following:\n\nText:\n",
                         "<|speaker:1|>first\n<|speaker:1|>second", "\n\nSpeech:\n",
                         np.concatenate([a, b], axis=1), END, USER, "x", END, ASSISTANT])
    np.testing.assert_array_equal(got2, want2)


def test_growth_across_batches(tok: S2Tokenizer) -> None:
    ref, c0, c1 = codes(4, 6), codes(6, 7), codes(2, 8)
    history = [Exchange("<|speaker:0|>first", c0), Exchange("<|speaker:1|>second", c1)]
    got = build_prompt(tok, [Reference("r", ref)], history, "<|speaker:0|>third")
    want = golden(tok, [SYS_START, "convert the provided text to speech reference to the following:\n\nText:\n",
                        "<|speaker:0|>r", "\n\nSpeech:\n", ref, END,
                        USER, "<|speaker:0|>first", END, ASSISTANT, c0, END,
                        USER, "<|speaker:1|>second", END, ASSISTANT, c1, END,
                        USER, "<|speaker:0|>third", END, ASSISTANT])
    np.testing.assert_array_equal(got, want)


def test_a_prompts_length_is_the_sum_of_its_parts(tok: S2Tokenizer) -> None:
    """The engine fits its context by adding lengths (each exchange tokenized once): the sum must be the
    built prompt's length for every history, with and without references, text merging across no boundary."""
    refs = [Reference("<|speaker:0|>ref words", codes(5, 1)), Reference("two", codes(3, 2))]
    exchanges = [Exchange("<|speaker:0|>first line, said", codes(6, 3)), Exchange("<|speaker:1|>ab", codes(1, 4)),
                 Exchange("[laughing] third", codes(9, 5))]
    for references in (refs, []):
        for n in range(len(exchanges) + 1):
            history = exchanges[-n:] if n else []
            text = "<|speaker:0|>the new line"
            added = encoded_length(conversation(references, [], text), tok) + sum(
                encoded_length(exchange_parts(ex), tok) for ex in history)
            assert added == build_prompt(tok, references, history, text).shape[1]


def test_reference_codes_must_have_ten_rows(tok: S2Tokenizer) -> None:
    with pytest.raises(UserError, match=r"shape \(10, frames\), got \(9, 4\)"):
        build_prompt(tok, [Reference("r", np.zeros((9, 4), dtype=np.int64))], [], "x")
    with pytest.raises(UserError, match="negative code"):
        check_codes(np.full((10, 2), -1), "reference 1 codes")
    with pytest.raises(UserError, match="beyond the codebook size 16"):
        check_codes(np.full((10, 2), 16), "reference 1 codes", codebook_size=16)
    with pytest.raises(UserError, match="integers"):
        check_codes(np.zeros((10, 2), dtype=np.float32), "reference 1 codes")


# ----------------------------------------------------------------------------- splitting and grouping


def test_split_turns_joins_tag_with_following_text() -> None:
    text = "<|speaker:0|> Hi there.  <|speaker:1|>[laugh] Hello!\n<|speaker:12|>"
    assert split_turns(text) == ["<|speaker:0|> Hi there.", "<|speaker:1|>[laugh] Hello!", "<|speaker:12|>"]


def test_text_before_first_tag() -> None:
    text = "Preamble words. <|speaker:0|>A <|speaker:1|>B"
    assert split_turns(text) == ["<|speaker:0|>A", "<|speaker:1|>B"]  # upstream drops it
    assert split_turns(text, upstream_exact=False) == ["Preamble words.", "<|speaker:0|>A", "<|speaker:1|>B"]


def test_no_tags_is_one_batch_unchanged() -> None:
    text = "  Plain text, no tags at all. " * 40  # far over chunk_length: still one batch, not stripped
    assert split_turns(text) == []
    assert upstream_batches(text, 50) == [text]
    assert upstream_batches(text, 50, upstream_exact=False) == [text]


def test_grouping_at_chunk_length_counts_utf8_bytes_without_joiners() -> None:
    turns = ["<|speaker:0|>aé", "<|speaker:1|>bb"]  # 16 and 15 UTF-8 bytes
    assert [len(t.encode()) for t in turns] == [16, 15]
    assert group_turns(turns, 31) == ["<|speaker:0|>aé\n<|speaker:1|>bb"]  # 31 is not > 31
    assert group_turns(turns, 30) == ["<|speaker:0|>aé", "<|speaker:1|>bb"]
    # a turn longer than chunk_length is a batch of its own
    assert group_turns(["x" * 40, "y", "z"], 10) == ["x" * 40, "y\nz"]


def test_grouping_at_five_turns() -> None:
    turns = [f"<|speaker:{i % 2}|>t{i}" for i in range(12)]
    batches = group_turns(turns, 10_000)
    assert batches == ["\n".join(turns[0:5]), "\n".join(turns[5:10]), "\n".join(turns[10:12])]
    text = "".join(turns)
    assert upstream_batches(text, 10_000) == batches


def test_line_batches() -> None:
    assert line_batches("a line\n\n  <|speaker:1|>second  \n") == ["a line", "<|speaker:1|>second"]
    assert line_batches("\n \n") == []
