"""The conversation S2 is prompted with, and the (11, T) matrix it becomes (spec §5, §7.2).

Upstream prompts S2 as a chat: a system message holding the reference transcripts and their
codes, then for every earlier batch of text a user turn and the assistant's voice answer (the
codes it generated), then the new user turn and an open assistant turn in voice modality. The
model continues that open turn with code frames.

Two details decide bit-exactness and are easy to lose:
- every text part is tokenized on its own and the ids are concatenated, so no BPE merge ever
  crosses a part boundary (`"<|im_start|>user\\n"` and the user's text are separate parts);
- a voice part contributes one position per frame whose row 0 is `semantic_begin_id + code_0` and
  whose rows 1..10 are the frame's ten codes; text positions have zeros in rows 1..10.

Numpy only: building a prompt must not need torch (the studio previews prompt lengths without it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, Union

import numpy as np
import numpy.typing as npt

from s2studio.state.codes import check_codes  # noqa: F401 - the one check, re-exported for the engine
from s2studio.units import NUM_CODEBOOKS

MAX_TURNS_PER_BATCH = 5
"""`generate_long` passes `max_speakers=5`; it counts turns, not distinct speakers."""

SYSTEM_PLAIN = "convert the provided text to speech"
SYSTEM_REFERENCES = "convert the provided text to speech reference to the following:\n\nText:\n"
SYSTEM_SPEECH = "\n\nSpeech:\n"

SPEAKER_TAG = re.compile(r"<\|speaker:\d+\|>")
_SPLIT = re.compile(r"(<\|speaker:\d+\|>)")

Codes = npt.NDArray[np.int64]
Part = Union[str, np.ndarray]
"""A text part, or a voice part: codes of shape (codebooks, frames)."""


class TokenizerLike(Protocol):
    semantic_begin_id: int

    def encode(self, text: str) -> list[int]: ...


@dataclass(frozen=True)
class Reference:
    """One reference clip as the prompt sees it: transcript and (10, N) codes."""

    text: str
    codes: np.ndarray


@dataclass(frozen=True)
class Exchange:
    """One finished batch: the user's text and the codes the model answered with."""

    text: str
    codes: np.ndarray


# ----------------------------------------------------------------------------- messages


def tag_transcripts(texts: Sequence[str]) -> list[str]:
    """Prefix transcript i with `<|speaker:i|>` unless it already carries a speaker tag anywhere."""
    return [t if SPEAKER_TAG.search(t) else f"<|speaker:{i}|>{t}" for i, t in enumerate(texts)]


def message(role: str, parts: Sequence[Part], *, voice: bool = False, end: bool = True) -> list[Part]:
    """A chat message as parts: header, body, and `<|im_end|>\\n` unless left open."""
    header = f"<|im_start|>{role}\n" + ("<|voice|>" if voice else "")
    out: list[Part] = [header, *parts]
    if end:
        out.append("<|im_end|>\n")
    return out


def system_message(references: Sequence[Reference]) -> list[Part]:
    """Upstream's system message; with references, all their codes form one voice block."""
    if not references:
        return message("system", [SYSTEM_PLAIN])
    transcripts = "\n".join(tag_transcripts([r.text for r in references]))
    codes = np.concatenate([np.asarray(r.codes) for r in references], axis=1)
    return message("system", [SYSTEM_REFERENCES, transcripts, SYSTEM_SPEECH, codes])


def exchange_parts(exchange: Exchange) -> list[Part]:
    """One earlier batch in the prompt: its user turn and the assistant's voice answer."""
    return message("user", [exchange.text]) + message("assistant", [exchange.codes], voice=True)


def conversation(references: Sequence[Reference], history: Sequence[Exchange], text: str) -> list[Part]:
    """The prompt of one batch: system, every earlier exchange, the new user turn, an open answer."""
    parts = system_message(references)
    for ex in history:
        parts += exchange_parts(ex)
    parts += message("user", [text])
    parts += message("assistant", [], voice=True, end=False)
    return parts


# ----------------------------------------------------------------------------- encoding


def encode_parts(parts: Sequence[Part], tokenizer: TokenizerLike, num_codebooks: int = NUM_CODEBOOKS) -> Codes:
    """`encode_for_inference`: the (1 + codebooks, T) int64 matrix of a list of parts."""
    rows0: list[np.ndarray] = []
    blocks: list[tuple[int, np.ndarray]] = []
    length = 0
    for part in parts:
        if isinstance(part, str):
            ids = np.asarray(tokenizer.encode(part), dtype=np.int64)
        else:
            codes = check_codes(part, "reference codes", num_codebooks)
            ids = codes[0] + tokenizer.semantic_begin_id
            blocks.append((length, codes))
        rows0.append(ids)
        length += ids.shape[0]
    values = np.zeros((num_codebooks + 1, length), dtype=np.int64)
    if rows0:
        values[0] = np.concatenate(rows0)
    for start, codes in blocks:
        values[1:, start:start + codes.shape[1]] = codes
    return values


def build_prompt(tokenizer: TokenizerLike, references: Sequence[Reference], history: Sequence[Exchange],
                 text: str, num_codebooks: int = NUM_CODEBOOKS) -> Codes:
    return encode_parts(conversation(references, history, text), tokenizer, num_codebooks)


def encoded_length(parts: Sequence[Part], tokenizer: TokenizerLike) -> int:
    """The columns `encode_parts(parts)` has, without building it. Parts are tokenized one by one, so a prompt's
    length is the sum of its parts': `build_prompt(refs, history, text)` has
    `encoded_length(conversation(refs, [], text))` plus `encoded_length(exchange_parts(ex))` for each exchange,
    which lets a caller try many histories while tokenizing each exchange once."""
    return sum(len(tokenizer.encode(p)) if isinstance(p, str) else np.asarray(p).shape[1] for p in parts)


# ----------------------------------------------------------------------------- batching


def split_turns(text: str, upstream_exact: bool = True) -> list[str]:
    """`split_text_by_speaker`: each `<|speaker:i|>` tag joined with the text after it, stripped.

    Upstream drops any text before the first tag. `upstream_exact=False` keeps it as a turn of
    its own (untagged) so nothing a person wrote is lost; the script compiler never produces such
    text, so the choice only matters for raw text typed on the command line.
    """
    pieces = _SPLIT.split(text)
    turns: list[str] = []
    lead = pieces[0].strip()
    if lead and not upstream_exact and len(pieces) > 1:
        turns.append(lead)
    for i in range(1, len(pieces), 2):
        # odd pieces are tags; the piece after a tag is its text ("" when tags are adjacent or at the end)
        turns.append((pieces[i] + pieces[i + 1]).strip())
    return turns


def group_turns(turns: Sequence[str], chunk_length: int, max_turns: int = MAX_TURNS_PER_BATCH) -> list[str]:
    """`group_turns_into_batches`: greedy batches of at most `max_turns` turns and `chunk_length`
    UTF-8 bytes (joiners not counted); a longer single turn is a batch of its own."""
    batches: list[str] = []
    current: list[str] = []
    size = 0
    for turn in turns:
        n = len(turn.encode("utf-8"))
        if current and (len(current) >= max_turns or size + n > chunk_length):
            batches.append("\n".join(current))
            current, size = [], 0
        current.append(turn)
        size += n
    if current:
        batches.append("\n".join(current))
    return batches


def upstream_batches(text: str, chunk_length: int, upstream_exact: bool = True) -> list[str]:
    """The batches `generate_long` renders: grouped turns, or the whole text when it has no tag."""
    turns = split_turns(text, upstream_exact)
    return group_turns(turns, chunk_length) if turns else [text]


def line_batches(text: str) -> list[str]:
    """Line mode: every non-blank line (stripped) is a batch of its own."""
    return [line.strip() for line in text.splitlines() if line.strip()]
