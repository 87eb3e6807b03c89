"""LoRA files and the merge formula (spec s2-lora.md §1.3, §6.2): what training writes and what loading applies.

A LoRA file is a safetensors file of `<layer path>.lora_A` (r, in) and `<layer path>.lora_B` (out, r) pairs under
upstream's module names (no `model.` prefix), exactly what upstream's checkpoint and the port's
`lora.safetensors` hold; an embedding's A is (r, num_embeddings) and its B (dim, r). The scaling is alpha / r:
r is read from the shapes and alpha is 16 (both of upstream's presets) unless the file's metadata says
`lora_alpha`, so a file written by upstream or the port needs no sidecar.

Merging is loralib's `eval()` on float32 weights: `W + (B @ A)[ᵀ] · α/r` (the product first, transposed for
embeddings, then scaled, then added in place), then bfloat16 as the exported `model.pth` holds it. The engine
applies the very same function when it loads a voice's LoRA, so a voice rendered with its LoRA equals the
exported model rendered without one.

File contents are data from anyone (a `.s2voice` may carry one): every name and shape is checked against the
model before a tensor is used, and each failure is one line that says what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from s2studio.engine.plan import lora_digest
from s2studio.errors import UserError, printable
from s2studio.state.lora_file import MAX_RANK

DEFAULT_ALPHA = 16.0
"""Both upstream presets (`r_8_alpha_16`, `r_32_alpha_16_fast`) use alpha 16."""
ALPHA_KEY = "lora_alpha"
SUFFIXES = (".lora_A", ".lora_B")
SHOWN = 3


@dataclass(frozen=True)
class LoraWeights:
    """A LoRA read from a file: per layer path its (A, B), in float as stored."""

    pairs: dict[str, tuple[Tensor, Tensor]]
    alpha: float
    digest: str
    """sha256 of the file's bytes: identifies the LoRA in fingerprints and in the engine's switch."""
    source: str = ""

    @property
    def rank(self) -> int:
        return next(iter(self.pairs.values()))[0].shape[0]

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank

    def layers(self) -> list[str]:
        return list(self.pairs)


def is_embedding(path: str) -> bool:
    """Embedding tables (`embeddings`, `codebook_embeddings`, `fast_embeddings`) carry their delta transposed."""
    return path.rsplit(".", 1)[-1].endswith("embeddings")


def read_lora(path: Path) -> LoraWeights:
    """The LoRA in `path`, its pairs complete and consistent; a UserError for anything else."""
    from safetensors import safe_open

    path = Path(path)
    shown = printable(path)
    if not path.is_file():
        raise UserError(f"LoRA file {shown} not found")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = dict(f.metadata() or {})
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own types for damaged files
        raise UserError(f"{shown} is not a readable LoRA file ({printable(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, 120)}); "
                        "train it again or pick another file") from None
    if not tensors:
        raise UserError(f"{shown} holds no LoRA tensors")
    odd = [k for k in tensors if not k.endswith(SUFFIXES)]
    if odd:
        raise UserError(f"{shown} holds tensors that are not LoRA weights ({printable(', '.join(odd[:SHOWN]), 120)}); "
                        "it is not a LoRA file")
    pairs: dict[str, tuple[Tensor, Tensor]] = {}
    for key in sorted(k for k in tensors if k.endswith(".lora_A")):
        layer = key[: -len(".lora_A")]
        b = tensors.get(layer + ".lora_B")
        if b is None:
            raise UserError(f"{shown}: {printable(layer, 80)} has lora_A but no lora_B; the file is damaged")
        pairs[layer] = (tensors[key], b)
    lonely = [k for k in tensors if k.endswith(".lora_B") and k[: -len(".lora_B")] not in pairs]
    if lonely:
        raise UserError(f"{shown}: {printable(lonely[0], 80)} has no lora_A; the file is damaged")
    ranks = set()
    for layer, (a, b) in pairs.items():
        if not (a.is_floating_point() and b.is_floating_point()) or a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1]:
            raise UserError(f"{shown}: {printable(layer, 80)} has lora_A {tuple(a.shape)} {a.dtype} and lora_B "
                            f"{tuple(b.shape)} {b.dtype}, not a LoRA pair; the file is damaged")
        if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
            raise UserError(f"{shown}: {printable(layer, 80)} holds NaN or infinite values; train it again from an "
                            "earlier checkpoint")
        ranks.add(a.shape[0])
    if len(ranks) != 1:
        raise UserError(f"{shown} mixes LoRA ranks {sorted(ranks)}; the file is damaged")
    if next(iter(ranks)) > MAX_RANK:
        raise UserError(f"{shown} has rank {next(iter(ranks))}, above the {MAX_RANK} this program applies; train it "
                        "with a smaller rank")
    try:
        alpha = float(meta.get(ALPHA_KEY, DEFAULT_ALPHA))
    except ValueError:
        raise UserError(f"{shown}: its {ALPHA_KEY} metadata is not a number; the file is damaged") from None
    if not 0 < alpha < 1e4:
        raise UserError(f"{shown}: lora_alpha {alpha} is out of range; the file is damaged")
    return LoraWeights(pairs, alpha, lora_digest(path), str(path))


def check_lora_fits(lora: LoraWeights, shapes: dict[str, tuple[int, ...]], model: str = "this model") -> None:
    """A UserError unless every layer of `lora` is a weight of `shapes` (name -> shape of the model's
    `<layer>.weight`) with matching dimensions: a LoRA trained on another model's shape never gets applied."""
    where = printable(lora.source or "the LoRA")
    for layer, (a, b) in lora.pairs.items():
        shape = shapes.get(layer + ".weight")
        if shape is None or len(shape) != 2:
            raise UserError(f"{where} was trained for another model: {model} has no layer {printable(layer, 80)}; "
                            "use a LoRA trained on this model")
        n_out, n_in = (shape[1], shape[0]) if is_embedding(layer) else shape
        if a.shape[1] != n_in or b.shape[0] != n_out:
            expects = (a.shape[1], b.shape[0]) if is_embedding(layer) else (b.shape[0], a.shape[1])
            raise UserError(f"{where} was trained for another model's shape: {printable(layer, 80)} is "
                            f"{tuple(shape)} in {model} but {expects} in the LoRA; use a LoRA trained on this model")


def model_shapes(config: object) -> dict[str, tuple[int, ...]]:
    """Every tensor of a `DualAR` of `config` (a `model.config.DualARConfig`) and its shape, built on the meta
    device (no memory): what `check_lora_fits` checks a LoRA against."""
    from s2studio.model.dual_ar import DualAR

    with torch.device("meta"):
        return {k: tuple(v.shape) for k, v in DualAR(config).state_dict().items()}  # type: ignore[arg-type]


def merged_weight(weight: Tensor, a: Tensor, b: Tensor, scaling: float, embedding: bool) -> Tensor:
    """loralib's merge in float32: `W + (B @ A)[ᵀ] · s` (spec §6.2), before any cast."""
    merged = weight.to(torch.float32, copy=True)
    delta = b.to(torch.float32) @ a.to(torch.float32)
    merged += (delta.transpose(0, 1) if embedding else delta) * scaling
    return merged


def merge_tensor(layer: str, weight: Tensor, lora: LoraWeights) -> Tensor:
    """The bfloat16 weight of `layer` with `lora` merged (what the exported model.pth holds)."""
    a, b = lora.pairs[layer]
    return merged_weight(weight, a, b, lora.scaling, is_embedding(layer)).to(torch.bfloat16)

