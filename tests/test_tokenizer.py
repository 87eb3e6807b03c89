"""The tokenizer wrapper: ids of special tokens, the semantic range as upstream derives it, and
part-by-part encoding that never merges across special tokens. Uses a small hand-built byte-level
BPE so the test does not depend on a model folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from s2studio.errors import UserError
from s2studio.text.tokenizer import S2Tokenizer

QWEN_ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>"]
FISH_ADDED = ["<|pad|>", "<|phoneme_start|>", "<|phoneme_end|>", "<|text|>", "<|voice|>", "<|interleave|>",
              "<|audio_start|>", "<|audio_end|>", "<|audio_pad|>"]
CORPUS = ["convert the provided text to speech reference to the following", "Text: Speech:",
          "system user assistant", "<|speaker:0|> hello there, how are you?", "speaker speaker 0 1 2",
          "The quick brown fox jumps over the lazy dog."] * 3


def make_tokenizer(semantic: list[int] | range = range(16), specials: list[str] | None = None) -> Tokenizer:
    """A Qwen-like byte-level BPE: NFC, ByteLevel, a few merges, then the added tokens in S2's order."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    names = (QWEN_ADDED + FISH_ADDED if specials is None else specials) + [f"<|semantic:{i}|>" for i in semantic]
    tok.add_special_tokens([AddedToken(n, special=True, normalized=False) for n in names])
    return tok


def write_tokenizer(path: Path, **kwargs) -> Path:
    make_tokenizer(**kwargs).save(str(path))
    return path


def test_special_ids_and_semantic_range(tmp_path: Path) -> None:
    path = write_tokenizer(tmp_path / "tokenizer.json")
    raw = Tokenizer.from_file(str(path))
    tok = S2Tokenizer.from_file(path)
    assert tok.im_start_id == raw.token_to_id("<|im_start|>")
    assert tok.im_end_id == raw.token_to_id("<|im_end|>")
    assert tok.voice_id == raw.token_to_id("<|voice|>")
    first = raw.token_to_id("<|semantic:0|>")
    assert (tok.semantic_begin_id, tok.semantic_end_id) == (first, first + 15)
    assert tok.token_id("<|pad|>") == raw.token_to_id("<|pad|>")
    assert tok.vocab_size == raw.get_vocab_size(with_added_tokens=True)


def test_semantic_range_is_min_and_max_of_present_tokens(tmp_path: Path) -> None:
    # upstream scans <|semantic:0..4095|> and keeps those present; gaps and a missing 0 do not matter
    path = write_tokenizer(tmp_path / "t.json", semantic=[3, 4, 9])
    raw = Tokenizer.from_file(str(path))
    tok = S2Tokenizer.from_file(path)
    assert tok.semantic_begin_id == raw.token_to_id("<|semantic:3|>")
    assert tok.semantic_end_id == raw.token_to_id("<|semantic:9|>")


def test_no_semantic_tokens_is_a_user_error(tmp_path: Path) -> None:
    path = write_tokenizer(tmp_path / "t.json", semantic=[])
    with pytest.raises(UserError, match="no <\\|semantic:N\\|> tokens"):
        S2Tokenizer.from_file(path)


def test_missing_special_token_is_a_user_error(tmp_path: Path) -> None:
    path = write_tokenizer(tmp_path / "t.json", specials=["<|im_start|>", "<|im_end|>"])
    with pytest.raises(UserError, match="lacks the token <\\|voice\\|>"):
        S2Tokenizer.from_file(path)


def test_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="tokenizer file not found"):
        S2Tokenizer.from_file(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="cannot read tokenizer"):
        S2Tokenizer.from_file(bad)


def test_encode_matches_library_and_matches_specials_inline(tmp_path: Path) -> None:
    path = write_tokenizer(tmp_path / "tokenizer.json")
    raw = Tokenizer.from_file(str(path))
    tok = S2Tokenizer.from_file(path)
    text = "<|im_start|>user\n<|speaker:0|>Hello there <|semantic:2|>!"
    ids = tok.encode(text)
    assert ids == raw.encode(text, add_special_tokens=False).ids
    assert ids[0] == tok.im_start_id
    assert tok.semantic_begin_id + 2 in ids
    # <|speaker:i|> is not an added token: it is ordinary BPE text in several pieces
    assert len(tok.encode("<|speaker:0|>")) > 1
    assert tok.decode(ids) == text
