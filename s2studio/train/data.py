"""Training samples as upstream's data pipeline builds them (spec s2-lora.md §3.2–§3.6).

One group per speaker (clips in path order, transcripts cleaned as `build_dataset.py` packs them); the groups
shuffled by `random.Random(42)`; an endless stream of samples drawn from `random.Random(base_seed)` (the data
loader's one worker): a group by its clip count, then all its clips or a run of `max_length // 20` consecutive
ones, each encoded as a system line, a user turn with the text and an assistant turn with `<|voice|>`, the codes
and `<|im_end|>` (only the codes and the last `<|im_end|>` labelled), the clips concatenated; batches truncated
to `max_length` and padded on the right. Every random call below is one upstream makes, in its order.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from s2studio.text.tokenizer import IM_END, S2Tokenizer
from s2studio.train.clips import TrainClip, speaker_folder_name

SYSTEM_TEXT = "Speak out the provided text."
DATASET_SEED = 42
CODEBOOK_PAD = 0
IGNORE = -100
CLIPS_PER_TOKENS = 20
"""A sample holds at most `max_length // 20` clips."""
EMOJI = re.compile("[\U0001f600-\U0001f64f\U0001f300-\U0001f5ff\U0001f680-\U0001f6ff\U0001f1e0-\U0001f1ff]+")


def pack_text(text: str) -> str:
    """`build_dataset.py`'s cleaning of a transcript: `{…}` and `<…>` become a space, whitespace runs one space."""
    text = re.sub(r"\{.*?\}", " ", text.strip())
    text = re.sub(r"<.*?>", " ", text)
    return re.sub(r"\s+", " ", text)


def clean_text(text: str) -> str:
    """`fish_speech.text.clean.clean_text`, applied to each text as a sample is drawn."""
    text = text.strip().replace("\u2018", "'").replace("\u2019", "'")
    text = EMOJI.sub("", text)
    return re.sub(r",{2,}", ",", text)


@dataclass(frozen=True)
class Sentence:
    texts: tuple[str, ...]
    codes: np.ndarray
    """(codebooks, frames) integers."""


@dataclass(frozen=True)
class Group:
    name: str
    sentences: tuple[Sentence, ...]


def encode_sentence(text: str, codes: np.ndarray, tokenizer: S2Tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    """One clip as (tokens, labels), each (codebooks + 1, length) int64 (spec §3.4, §3.5)."""
    vq = torch.from_numpy(np.asarray(codes)).to(torch.int32)
    parts: list[tuple[str | torch.Tensor, bool]] = [
        (SYSTEM_TEXT, False), (f"<|speaker:user|> {text}", False), (IM_END, False),
        ("<|speaker:assistant|> <|voice|>", False), (vq, True), (IM_END, True),
    ]
    ids, labels, is_code = [], [], []
    for part, labelled in parts:
        if isinstance(part, str):
            t = torch.tensor(tokenizer.encode(part), dtype=torch.long)
            is_code.append(torch.zeros_like(t, dtype=torch.bool))
        else:
            t = (part[0].to(torch.int) + tokenizer.semantic_begin_id).to(torch.long)
            is_code.append(torch.ones_like(t, dtype=torch.bool))
        ids.append(t)
        labels.append(t.clone() if labelled else torch.full_like(t, IGNORE))
    ids_all, labels_all, mask = torch.cat(ids)[:-1], torch.cat(labels)[1:], torch.cat(is_code)
    n = vq.shape[0]
    tokens = torch.zeros((n + 1, len(ids_all)), dtype=torch.int)
    tokens[0] = ids_all
    tokens[1:, mask[:-1]] = vq
    out = torch.full((n + 1, len(labels_all)), IGNORE, dtype=torch.int)
    out[0, :] = labels_all
    out[1:, mask[1:]] = vq
    out[1:, -1:] = CODEBOOK_PAD
    return tokens.long(), out.long()


def groups_from(clips: tuple[TrainClip, ...], codes: list[np.ndarray]) -> list[Group]:
    """One group per speaker folder name, in sorted order, clips ordered by `<id>.npy` (build_dataset's order)."""
    by_speaker: dict[str, list[tuple[str, Sentence]]] = {}
    for clip, c in zip(clips, codes, strict=True):
        by_speaker.setdefault(speaker_folder_name(clip.speaker), []).append(
            (f"{clip.id}.npy", Sentence((pack_text(clip.text),), c)))
    return [Group(name, tuple(s for _, s in sorted(items, key=lambda x: x[0])))
            for name, items in sorted(by_speaker.items())]



class Samples:
    """The endless sample stream of one data-loader worker seeded with `base_seed`."""

    def __init__(self, groups: Sequence[Group], tokenizer: S2Tokenizer, max_length: int, base_seed: int) -> None:
        self.groups = list(groups)
        random.Random(DATASET_SEED).shuffle(self.groups)
        self.weights = [len(g.sentences) for g in self.groups]
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.rng = random.Random(base_seed)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        while True:
            yield self.draw()

    def draw(self) -> dict[str, torch.Tensor]:
        rng = self.rng
        count = self.max_length // CLIPS_PER_TOKENS
        group = rng.choices(self.groups, weights=self.weights, k=1)[0]
        if count >= len(group.sentences):
            clips = group.sentences
        else:
            begin = rng.randint(0, len(group.sentences) - count)
            clips = group.sentences[begin:begin + count]
        tokens, labels = [], []
        for sentence in clips:
            text = clean_text(rng.choice(sentence.texts))
            rng.random()  # skip_text_prob is 0: the draw is made, the text never skipped
            t, lab = encode_sentence(text, sentence.codes, self.tokenizer)
            tokens.append(t)
            labels.append(lab)
        return {"tokens": torch.cat(tokens, dim=1), "labels": torch.cat(labels, dim=1)}


@dataclass(frozen=True)
class Batch:
    inputs: torch.Tensor
    """(B, codebooks + 1, S) int64."""
    padding: torch.Tensor
    """(B, S) bool, True on padding."""
    labels: torch.Tensor

    def to(self, device: torch.device | str) -> Batch:
        return Batch(self.inputs.to(device), self.padding.to(device), self.labels.to(device))


def collate(examples: Sequence[dict[str, torch.Tensor]], max_length: int, pad_id: int) -> Batch:
    """`TextDataCollator.batchify`: each sample cut to the batch length, padded on the right."""
    length = min(max(e["tokens"].size(1) for e in examples), max_length)
    inputs, masks, labels = [], [], []
    for e in examples:
        t, lab = e["tokens"][:, :length], e["labels"][:, :length]
        mask = torch.ones((length,), dtype=torch.bool)
        n = t.size(1)
        mask[:n] = False
        if n < length:
            t = F.pad(t, (0, length - n), value=pad_id)
            t[1:, n:] = CODEBOOK_PAD
            lab = F.pad(lab, (0, length - lab.size(1)), value=IGNORE)
        inputs.append(t)
        masks.append(mask)
        labels.append(lab)
    return Batch(torch.stack(inputs), torch.stack(masks), torch.stack(labels))


def pad_id_of(tokenizer: S2Tokenizer) -> int:
    """The collator's padding id: `<|end_of_text|>`'s when the vocabulary has it, else 0 (S2 lacks it)."""
    found = tokenizer.find_id("<|end_of_text|>")
    return 0 if found is None else int(found)
