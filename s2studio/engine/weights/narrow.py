"""Narrowing a DualAR's linear layers to bf16, int8 or int4: which layers, in which order, and what was done.

The loader (`checkpoints.load_dual_ar(narrow=...)`) reads and assigns the checkpoint, calls `narrow_linears`, and
only then casts and moves the model, as gpt-fast's `_load_model` converts for its runtime before `.to()`: a
narrowed layer never passes through a wider copy on the target device. This file owns the list of linear slots;
the layer types (`bf16.py`, `int8.py`, `int4.py`) know nothing of models, and nothing here knows the loader.

What a model was narrowed to is read back from its layer types (`narrowing_of`), never from attributes set on
the module: the types are the one record of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from s2studio.engine.api import QUANTIZE_MODES
from s2studio.engine.weights.bf16 import Bf16Linear, worth_bf16
from s2studio.engine.weights.int4 import Int4Linear
from s2studio.engine.weights.int8 import Int8Linear
from s2studio.errors import UserError

Narrow = Literal["none", "bf16", "int8", "int4"]
""""none": torch's float Linear; "bf16": bfloat16 weights, float32 math (the CPU fast path, lossless for S2's
bfloat16 checkpoint); "int8"/"int4": the user's quantization (`api.Quantize`)."""
NARROW_MODES: tuple[Narrow, ...] = get_args(Narrow)
assert set(QUANTIZE_MODES) <= set(NARROW_MODES)


@dataclass(frozen=True)
class Narrowed:
    """What a load narrowed: the mode and how many linear layers it replaced."""

    mode: Narrow
    layers: int
    """Linear layers of another type than torch's float Linear (for "bf16" only the large, lossless ones)."""


def linear_slots(model: nn.Module) -> list[tuple[nn.Module, str]]:
    """(parent, attribute) of every linear layer that narrowing replaces: attention and FFN of both stacks, and
    the fast head. The slow head is the tied embedding table and stays float (the fast path narrows its
    4097-row copy, `narrow_head`)."""
    found: list[tuple[nn.Module, str]] = []
    for layer in [*model.layers, *model.fast_layers]:
        found += [(layer.attention, "wqkv"), (layer.attention, "wo")]
        found += [(layer.feed_forward, name) for name in ("w1", "w2", "w3")]
    found.append((model, "fast_output"))
    if not model.config.tie_word_embeddings:
        found.append((model, "output"))
    return found


def narrow_linears(model: nn.Module, mode: Narrow) -> Narrowed:
    """Replace the linear layers in place, one at a time, so that the float copy of each is freed as it goes.

    "int8"/"int4" are computed from the weights' bfloat16 values (S2's stored dtype; the model is cast to bfloat16
    first), so a load never holds a copy wider than the checkpoint's and the quantized values do not depend on
    how the checkpoint was stored. "int4" keeps int8 for a layer it cannot group (a bias, or a width not a
    multiple of 32); S2's layers all group. "bf16" replaces only large layers that hold bfloat16 values exactly
    (`bf16.worth_bf16`): a small one, or a float32 checkpoint that is not S2's, stays as it is.
    """
    if mode not in NARROW_MODES:
        raise UserError(f"unknown quantization {mode!r}; choose one of {', '.join(NARROW_MODES)}")
    if mode in ("int8", "int4"):
        model.to(torch.bfloat16)
    replaced = 0
    for parent, name in linear_slots(model) if mode != "none" else []:
        linear = getattr(parent, name)
        if not isinstance(linear, nn.Linear):
            continue
        if mode == "bf16":
            if not worth_bf16(linear.weight):
                continue
            small: nn.Module = Bf16Linear(linear.weight, linear.bias)
        else:
            small = (Int4Linear.from_linear(linear) if mode == "int4" else None) or Int8Linear.from_linear(linear)
        setattr(parent, name, small)
        replaced += 1
    return Narrowed(mode, replaced)


def narrowing_of(model: nn.Module) -> Narrowed:
    """What `model`'s linear layers were narrowed to, read from their types."""
    types = [type(getattr(parent, name)) for parent, name in linear_slots(model)]
    for mode, kind in (("int4", Int4Linear), ("int8", Int8Linear), ("bf16", Bf16Linear)):
        if kind in types:
            narrowed = (Int4Linear, Int8Linear) if mode == "int4" else (kind,)
            return Narrowed(mode, sum(t in narrowed for t in types))  # type: ignore[arg-type]
    return Narrowed("none", 0)


class RowsLinear(nn.Module):
    """A bias-free float linear layer over a weight that is not a parameter (rows copied out of a table)."""

    def __init__(self, weight: Tensor) -> None:
        super().__init__()
        self.register_buffer("weight", weight, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight)


def narrow_head(rows: Tensor, mode: Narrow) -> nn.Module:
    """The fast path's head over `rows` (the allowed tokens' embedding rows) for a model narrowed to `mode`:
    int8 for int8 and int4 models (10 M weights, and the token ids stay exact), bfloat16 where the model keeps
    bfloat16 weights and the rows gain from it, float otherwise."""
    if mode in ("int8", "int4"):
        return Int8Linear.from_weight(rows)
    if mode == "bf16" and worth_bf16(rows):
        return Bf16Linear(rows)
    return RowsLinear(rows)
