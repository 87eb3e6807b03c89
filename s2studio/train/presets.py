"""The LoRA presets of upstream's `configs/lora/*.yaml` and the layers each one wraps (spec s2-lora.md §1.1, §2.1).

A target list of upstream's names is resolved against the model: an unprefixed name ("attention") switches on
the slow transformer's layers and the fast one's, a `fast_` name only the fast one's; `output` only exists when the
head is untied (S2 ties it, and wrapping a missing head is the crash upstream's users hit). The order of
`lora_targets` is the order upstream builds its loralib layers, which decides the random stream.
"""

from __future__ import annotations

from dataclasses import dataclass

from s2studio.errors import UserError
from s2studio.model.config import DualARConfig, TransformerConfig


@dataclass(frozen=True)
class LoraPreset:
    name: str
    r: int
    alpha: float
    dropout: float
    targets: tuple[str, ...]

    @property
    def scaling(self) -> float:
        return self.alpha / self.r


PRESETS: dict[str, LoraPreset] = {
    "r_8_alpha_16": LoraPreset("r_8_alpha_16", 8, 16, 0.01, ("attention", "mlp", "embeddings", "output")),
    "r_32_alpha_16_fast": LoraPreset("r_32_alpha_16_fast", 32, 16, 0.1,
                                     ("fast_attention", "fast_mlp", "fast_embeddings", "fast_output")),
}
DEFAULT_PRESET = "r_8_alpha_16"


def preset_named(name: str, dropout: float | None = None) -> LoraPreset:
    """A preset by name, with its dropout replaced when `dropout` is given (tests compare with dropout 0)."""
    if name not in PRESETS:
        raise UserError(f"unknown LoRA preset {name!r}; choose one of {', '.join(PRESETS)}")
    preset = PRESETS[name]
    if dropout is None:
        return preset
    if not 0.0 <= dropout < 1.0:
        raise UserError(f"dropout must be in [0, 1), got {dropout}")
    return LoraPreset(preset.name, preset.r, preset.alpha, dropout, preset.targets)


@dataclass(frozen=True)
class LoraTarget:
    """One wrapped layer: its module path, and its base shape as `nn.Linear(n_in, n_out)` or
    `nn.Embedding(n_in, n_out)` takes it."""

    path: str
    embedding: bool
    n_in: int
    n_out: int
    bias: bool = False


def _block_targets(prefix: str, c: TransformerConfig, attention: bool, mlp: bool) -> list[LoraTarget]:
    out: list[LoraTarget] = []
    for i in range(c.n_layer):
        if attention:
            out.append(LoraTarget(f"{prefix}.{i}.attention.wqkv", False, c.dim, c.q_size + 2 * c.kv_size, c.qkv_bias))
            out.append(LoraTarget(f"{prefix}.{i}.attention.wo", False, c.q_size, c.dim, c.o_bias))
        if mlp:
            out.append(LoraTarget(f"{prefix}.{i}.feed_forward.w1", False, c.dim, c.intermediate_size))
            out.append(LoraTarget(f"{prefix}.{i}.feed_forward.w2", False, c.intermediate_size, c.dim))
            out.append(LoraTarget(f"{prefix}.{i}.feed_forward.w3", False, c.dim, c.intermediate_size))
    return out


def lora_targets(config: DualARConfig, preset: LoraPreset) -> list[LoraTarget]:
    """The layers `preset` wraps, in upstream's construction order: the embeddings (replaced as they are found),
    then the collected linears (untied output, slow layers, fast output, fast layers)."""
    names = set(preset.targets)
    slow = {kind: kind in names for kind in ("attention", "mlp", "embeddings", "output")}
    fast = {kind: slow[kind] or f"fast_{kind}" in names for kind in slow}
    c = config
    out: list[LoraTarget] = []
    if slow["embeddings"]:
        out.append(LoraTarget("embeddings", True, c.vocab_size, c.slow.dim))
        out.append(LoraTarget("codebook_embeddings", True, c.codebook_size * c.num_codebooks, c.slow.dim))
    if fast["embeddings"]:
        out.append(LoraTarget("fast_embeddings", True, c.codebook_size, c.fast.dim))
    if slow["output"] and not c.tie_word_embeddings:
        out.append(LoraTarget("output", False, c.slow.dim, c.vocab_size))
    out += _block_targets("layers", c.slow, slow["attention"], slow["mlp"])
    if fast["output"]:
        out.append(LoraTarget("fast_output", False, c.fast.dim, c.codebook_size))
    out += _block_targets("fast_layers", c.fast, fast["attention"], fast["mlp"])
    return out
