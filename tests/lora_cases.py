"""The LoRA training cases the goldens are made for (`tools/make_lora_goldens.py`) and the tests replay.

Numpy and torch only: the tool imports this module from the reference venv. Each case is a tiny demo model,
speaker groups of seeded random codes (the data the `tokens` stage would give; spec s2-lora.md §11), the
hyper-parameters, and how the LoRA starts: injected A/B with dropout 0 (step-level parity), or the preset's own
initialisation and dropout from the seed (the byte-identity stretch).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

GOLDEN_KIND = "lora"


@dataclass(frozen=True)
class SpeakerSpec:
    name: str
    frames: tuple[int, ...]
    """Frames of each clip's codes."""


@dataclass(frozen=True)
class LoraCase:
    name: str
    speakers: tuple[SpeakerSpec, ...]
    preset: str = "r_8_alpha_16"
    steps: int = 10
    batch_size: int = 2
    max_length: int = 512
    lr: float = 1e-4
    seed: int = 1234
    injected: bool = True
    """True: A/B from `injected_lora`, dropout 0; False: upstream's own init and the preset's dropout."""
    full_lora: bool = False
    """Store the final LoRA tensors (else only their digests)."""
    export: bool = False
    """Also export the merged model and record a seeded synthesis on it."""


ALICE = SpeakerSpec("alice", (20, 21, 22, 23))
BOB = SpeakerSpec("bob", (15, 31, 12, 18, 26))

CASES: tuple[LoraCase, ...] = (
    LoraCase("r8_injected", (ALICE,), full_lora=True, export=True),
    # max_length 80: samples of 4 consecutive clips (windows), cut at 80 columns, padded rows
    LoraCase("r8_two_speakers_windows", (ALICE, BOB), batch_size=3, max_length=80),
    LoraCase("fast_injected", (ALICE, BOB), preset="r_32_alpha_16_fast", batch_size=2, max_length=256),
    LoraCase("r8_seeded_dropout", (ALICE,), injected=False, export=True, seed=77),
)


def clip_text(speaker: str, i: int) -> str:
    return f"{speaker.title()} says clip number {i} is here."


def speaker_codes(case: LoraCase) -> dict[str, list[np.ndarray]]:
    """(10, frames) int64 codes per clip, from one generator per case: semantic < 4096, residual < 1024."""
    rng = np.random.default_rng(sum(map(ord, case.name)))
    out: dict[str, list[np.ndarray]] = {}
    for s in case.speakers:
        clips = []
        for n in s.frames:
            c = rng.integers(0, 1024, (10, n))
            c[0] = rng.integers(0, 4096, n)
            clips.append(c.astype(np.int64))
        out[s.name] = clips
    return out


def injected_lora(shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...]]], seed: int = 5) -> dict[str, torch.Tensor]:
    """A and B for each layer (`shapes`: layer -> (A shape, B shape)), small seeded normals, both non-zero so that
    every gradient is live from step 1; as a flat dict under upstream's key names."""
    rng = np.random.default_rng(seed)
    out = {}
    for layer in sorted(shapes):
        a_shape, b_shape = shapes[layer]
        out[f"{layer}.lora_A"] = torch.from_numpy(rng.normal(0, 0.02, a_shape).astype(np.float32))
        out[f"{layer}.lora_B"] = torch.from_numpy(rng.normal(0, 0.02, b_shape).astype(np.float32))
    return out


SYNTH_TEXT = "<|speaker:0|>A fine-tuned voice speaks."
SYNTH_SEED = 3
SYNTH_FRAMES = 48
