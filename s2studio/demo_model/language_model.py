"""Random-weight DualAR checkpoints in S2's exact on-disk layout (spec §1).

The tensors, names, shapes, dtype (bf16), config keys and file names are those of `fishaudio/s2-pro`; only
the sizes and the values differ. Values are seeded per tensor (the seed and the tensor's name pick its
generator), so a tensor does not change when a variant adds or removes another one, and shards can be made
one at a time without holding the whole model (the full-size shape is ~9 GB).

Scales are chosen so that a random model behaves a little like a trained one: logits spread by about 2
(peaked distributions, so top-p really cuts), and the `<|im_end|>` row of the tied head is enlarged so that
generation sometimes stops by itself after a few dozen frames instead of always running to the limit.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import torch

from s2studio.audio import SAMPLE_RATE

WeightsFormat = Literal["safetensors", "pth"]


@dataclass(frozen=True)
class DemoSize:
    """The architecture of a demo model (names as in `config.json`'s two sub-objects)."""

    dim: int
    n_layer: int
    n_head: int
    n_local_heads: int
    head_dim: int
    intermediate_size: int
    fast_dim: int
    fast_n_layer: int
    fast_n_head: int
    fast_n_local_heads: int
    fast_head_dim: int
    fast_intermediate_size: int
    max_seq_len: int
    min_vocab_size: int = 0
    """The text vocabulary is at least this large (S2's 155776), else the tokenizer's count rounded to 8."""
    tie_word_embeddings: bool = True
    fast_attention_qk_norm: bool = False
    num_codebooks: int = 10
    codebook_size: int = 4096
    rope_base: float = 1000000.0
    norm_eps: float = 1e-6
    im_end_scale: float = 2.0
    """How much larger the `<|im_end|>` embedding row is than the others (makes random runs stop)."""
    residual_codes: int = 1024
    """S2's codec has 1024 codes in codebooks 1..9, yet the fast head scores 4096: a trained head never picks
    the upper ones. Shrinking those rows of `fast_output` keeps them out of the top-30, as in S2."""


SIZES: dict[str, DemoSize] = {
    # spec §12: every structural feature of S2 (GQA group 4, n_head*head_dim != dim, slow qk-norm only,
    # tied head, identity fast_project_in) at toy width
    "tiny": DemoSize(
        dim=64, n_layer=2, n_head=8, n_local_heads=2, head_dim=16, intermediate_size=192,
        fast_dim=64, fast_n_layer=2, fast_n_head=8, fast_n_local_heads=2, fast_head_dim=16,
        fast_intermediate_size=192, max_seq_len=4096,
    ),
    # for benchmarks: big enough that GEMMs, not Python, dominate a frame
    "mid": DemoSize(
        dim=512, n_layer=8, n_head=8, n_local_heads=2, head_dim=64, intermediate_size=1536,
        fast_dim=512, fast_n_layer=4, fast_n_head=8, fast_n_local_heads=2, fast_head_dim=64,
        fast_intermediate_size=1536, max_seq_len=8192,
    ),
    # S2 Pro's own shape (spec §1.2); ~9 GB of random bf16 weights
    "s2pro": DemoSize(
        dim=2560, n_layer=36, n_head=32, n_local_heads=8, head_dim=128, intermediate_size=9728,
        fast_dim=2560, fast_n_layer=4, fast_n_head=32, fast_n_local_heads=8, fast_head_dim=128,
        fast_intermediate_size=9728, max_seq_len=32768, min_vocab_size=155776,
    ),
}


@dataclass(frozen=True)
class TokenIds:
    """The ids `config.json` states, taken from the tokenizer the folder ships."""

    vocab_size: int
    eos: int
    pad: int
    audio_pad: int
    semantic_start: int
    semantic_end: int


# ----------------------------------------------------------------------------- config.json


def omni_config(size: DemoSize, ids: TokenIds) -> dict:
    """`config.json` as S2 publishes it (`fish_qwen3_omni`), every key included, even those upstream ignores."""
    text = {
        "model_type": "fish_qwen3",
        "vocab_size": ids.vocab_size,
        "n_layer": size.n_layer,
        "n_head": size.n_head,
        "n_local_heads": size.n_local_heads,
        "head_dim": size.head_dim,
        "dim": size.dim,
        "intermediate_size": size.intermediate_size,
        "rope_base": size.rope_base,
        "norm_eps": size.norm_eps,
        "max_seq_len": size.max_seq_len,
        "dropout": 0.0,
        "tie_word_embeddings": size.tie_word_embeddings,
        "attention_qkv_bias": False,
        "attention_o_bias": False,
        "attention_qk_norm": True,
        "initializer_range": 0.02,
        "use_gradient_checkpointing": True,
        "use_moe": False,
    }
    audio = {
        "vocab_size": size.codebook_size,
        "num_codebooks": size.num_codebooks,
        "n_layer": size.fast_n_layer,
        "n_head": size.fast_n_head,
        "n_local_heads": size.fast_n_local_heads,
        "head_dim": size.fast_head_dim,
        "dim": size.fast_dim,
        "text_dim": size.dim,
        "intermediate_size": size.fast_intermediate_size,
        "max_seq_len": size.num_codebooks + 1,
        "rope_base": size.rope_base,
        "norm_eps": size.norm_eps,
        "tie_word_embeddings": False,
        "attention_qkv_bias": False,
        "attention_o_bias": False,
        "attention_qk_norm": size.fast_attention_qk_norm,
        "dropout": 0.0,
        "initializer_range": 0.02,
    }
    return {
        "model_type": "fish_qwen3_omni",
        "dtype": "bfloat16",
        "eos_token_id": ids.eos,
        "pad_token_id": ids.pad,
        "audio_pad_token_id": ids.audio_pad,
        "semantic_start_token_id": ids.semantic_start,
        "semantic_end_token_id": ids.semantic_end,
        "sample_rate": SAMPLE_RATE,
        "text_config": text,
        "audio_decoder_config": audio,
    }


def dual_ar_config(size: DemoSize, ids: TokenIds) -> dict:
    """The flat `dual_ar` config upstream's `save_pretrained` writes for a fine-tuned S2: every field of its
    model-args dataclass, defaults already filled in, S2's two switches on."""
    return {
        "model_type": "dual_ar",
        "vocab_size": ids.vocab_size,
        "n_layer": size.n_layer,
        "n_head": size.n_head,
        "dim": size.dim,
        "intermediate_size": size.intermediate_size,
        "n_local_heads": size.n_local_heads,
        "head_dim": size.head_dim,
        "rope_base": size.rope_base,
        "norm_eps": size.norm_eps,
        "max_seq_len": size.max_seq_len,
        "dropout": 0.0,
        "tie_word_embeddings": size.tie_word_embeddings,
        "attention_qkv_bias": False,
        "attention_o_bias": False,
        "attention_qk_norm": True,
        "codebook_size": size.codebook_size,
        "num_codebooks": size.num_codebooks,
        "semantic_begin_id": ids.semantic_start,
        "semantic_end_id": ids.semantic_end,
        "use_gradient_checkpointing": True,
        "initializer_range": 0.02,
        "is_reward_model": False,
        "scale_codebook_embeddings": True,
        "audio_embed_dim": size.dim,
        "n_fast_layer": size.fast_n_layer,
        "fast_dim": size.fast_dim,
        "fast_n_head": size.fast_n_head,
        "fast_n_local_heads": size.fast_n_local_heads,
        "fast_head_dim": size.fast_head_dim,
        "fast_intermediate_size": size.fast_intermediate_size,
        "fast_attention_qkv_bias": False,
        "fast_attention_qk_norm": size.fast_attention_qk_norm,
        "fast_attention_o_bias": False,
        "norm_fastlayer_input": True,
    }


# ----------------------------------------------------------------------------- tensors


@dataclass(frozen=True)
class TensorSpec:
    """One stored tensor: its published name, the name it has after upstream's remap, shape and init."""

    name: str
    module_name: str
    shape: tuple[int, ...]
    init: Literal["normal", "norm", "zeros"]
    std: float = 0.0


def _block(prefix: str, module_prefix: str, dim: int, n_head: int, kv: int, hd: int, inter: int, qk_norm: bool) -> list[TensorSpec]:
    def t(name: str, shape: tuple[int, ...], init: Literal["normal", "norm", "zeros"] = "normal", fan_in: int = 0) -> TensorSpec:
        return TensorSpec(prefix + name, module_prefix + name, shape, init, 1.0 / math.sqrt(fan_in) if fan_in else 0.0)

    out = [
        t("attention.wqkv.weight", ((n_head + 2 * kv) * hd, dim), fan_in=dim),
        t("attention.wo.weight", (dim, n_head * hd), fan_in=n_head * hd),
    ]
    if qk_norm:
        out += [t("attention.q_norm.weight", (hd,), "norm"), t("attention.k_norm.weight", (hd,), "norm")]
    out += [
        t("attention_norm.weight", (dim,), "norm"),
        t("ffn_norm.weight", (dim,), "norm"),
        t("feed_forward.w1.weight", (inter, dim), fan_in=dim),
        t("feed_forward.w3.weight", (inter, dim), fan_in=dim),
        t("feed_forward.w2.weight", (dim, inter), fan_in=inter),
    ]
    return out


def tensor_specs(size: DemoSize, vocab_size: int) -> list[TensorSpec]:
    """Every tensor of the checkpoint, in upstream's module order (spec §1.4 names and shapes)."""
    s = size
    logit_std = 2.0 / math.sqrt(s.dim)  # embedding rows double as the tied head: logits spread by ~2
    specs = [TensorSpec("text_model.model.embeddings.weight", "embeddings.weight", (vocab_size, s.dim), "normal", logit_std)]
    for n in range(s.n_layer):
        specs += _block(f"text_model.model.layers.{n}.", f"layers.{n}.", s.dim, s.n_head, s.n_local_heads, s.head_dim, s.intermediate_size, True)
    specs.append(TensorSpec("text_model.model.norm.weight", "norm.weight", (s.dim,), "norm"))
    if not s.tie_word_embeddings:
        specs.append(TensorSpec("text_model.model.output.weight", "output.weight", (vocab_size, s.dim), "normal", logit_std))
    specs.append(
        TensorSpec("audio_decoder.codebook_embeddings.weight", "codebook_embeddings.weight",
                   (s.codebook_size * s.num_codebooks, s.dim), "normal", logit_std)
    )
    if s.fast_dim != s.dim:
        specs += [
            TensorSpec("audio_decoder.project_in.weight", "fast_project_in.weight", (s.fast_dim, s.dim), "normal", 1.0 / math.sqrt(s.dim)),
            TensorSpec("audio_decoder.project_in.bias", "fast_project_in.bias", (s.fast_dim,), "normal", 0.1),
        ]
    specs.append(TensorSpec("audio_decoder.embeddings.weight", "fast_embeddings.weight", (s.codebook_size, s.fast_dim), "normal", 1.0 / math.sqrt(s.fast_dim)))
    for n in range(s.fast_n_layer):
        specs += _block(f"audio_decoder.layers.{n}.", f"fast_layers.{n}.", s.fast_dim, s.fast_n_head, s.fast_n_local_heads,
                        s.fast_head_dim, s.fast_intermediate_size, s.fast_attention_qk_norm)
    specs += [
        TensorSpec("audio_decoder.norm.weight", "fast_norm.weight", (s.fast_dim,), "norm"),
        TensorSpec("audio_decoder.output.weight", "fast_output.weight", (s.codebook_size, s.fast_dim), "normal", 2.0 / math.sqrt(s.fast_dim)),
    ]
    return specs


def _generator(seed: int, name: str) -> torch.Generator:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


def make_tensor(spec: TensorSpec, seed: int, im_end_id: int | None = None, im_end_scale: float = 1.0,
                residual_codes: int | None = None) -> torch.Tensor:
    """The bf16 values of one tensor; the same (seed, name, shape) always gives the same bits."""
    g = _generator(seed, spec.name)
    if spec.init == "norm":
        values = 1.0 + 0.1 * torch.randn(spec.shape, generator=g)
    elif spec.init == "zeros":
        values = torch.zeros(spec.shape)
    else:
        values = spec.std * torch.randn(spec.shape, generator=g)
    if im_end_id is not None and spec.module_name in ("embeddings.weight", "output.weight"):
        values[im_end_id] *= im_end_scale
    if residual_codes is not None and spec.module_name == "fast_output.weight":
        values[residual_codes:] *= 0.05
    return values.to(torch.bfloat16)


def shard_groups(specs: list[TensorSpec], shards: int) -> list[list[TensorSpec]]:
    """Split the tensors, in order, into `shards` runs of about equal bytes (never an empty shard)."""
    if shards < 1 or shards > len(specs):
        raise ValueError(f"shards must be between 1 and {len(specs)}, got {shards}")
    sizes = [2 * math.prod(s.shape) for s in specs]
    total = sum(sizes)
    groups: list[list[TensorSpec]] = [[] for _ in range(shards)]
    done = 0
    for i, (spec, nbytes) in enumerate(zip(specs, sizes, strict=True)):
        g = min(shards - 1, done * shards // total)
        g = max(g, shards - (len(specs) - i))  # leave at least one tensor for every later shard
        groups[g].append(spec)
        done += nbytes
    # every shard must hold something: the clamp above fills the tail, move one forward if a head is empty
    for g in range(shards):
        if not groups[g]:
            donor = next(d for d in range(g - 1, -1, -1) if len(groups[d]) > 1)
            groups[g].insert(0, groups[donor].pop())
    return groups


def shard_name(i: int, n: int) -> str:
    return f"model-{i + 1:05d}-of-{n:05d}.safetensors"


def write_weights(folder: Path, size: DemoSize, specs: list[TensorSpec], *, seed: int, im_end_id: int,
                  shards: int, weights_format: WeightsFormat) -> list[str]:
    """Write the weight files; returns their names. Shards are generated one at a time."""
    def make(spec: TensorSpec) -> torch.Tensor:
        return make_tensor(spec, seed, im_end_id, size.im_end_scale, size.residual_codes)

    if weights_format == "pth":
        state = {s.module_name: make(s) for s in specs}
        torch.save(state, folder / "model.pth")
        return ["model.pth"]
    from safetensors.torch import save_file

    groups = shard_groups(specs, shards)
    names = ["model.safetensors"] if shards == 1 else [shard_name(i, shards) for i in range(shards)]
    weight_map: dict[str, str] = {}
    for name, group in zip(names, groups, strict=True):
        tensors = {s.name: make(s) for s in group}
        save_file(tensors, str(folder / name), metadata={"format": "pt"})
        weight_map.update((s.name, name) for s in group)
        del tensors
    if shards > 1:
        index = {
            "metadata": {"total_size": sum(2 * math.prod(s.shape) for s in specs)},
            "weight_map": dict(sorted(weight_map.items())),
        }
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
        names.append("model.safetensors.index.json")
    return names


def with_variant(size: DemoSize, *, tie_word_embeddings: bool | None = None, fast_dim: int | None = None,
                 fast_attention_qk_norm: bool | None = None, max_seq_len: int | None = None) -> DemoSize:
    """`size` with the variants upstream supports but S2 does not use (spec §12)."""
    changes: dict[str, object] = {}
    if tie_word_embeddings is not None:
        changes["tie_word_embeddings"] = tie_word_embeddings
    if fast_dim is not None:
        changes["fast_dim"] = fast_dim
    if fast_attention_qk_norm is not None:
        changes["fast_attention_qk_norm"] = fast_attention_qk_norm
    if max_seq_len is not None:
        changes["max_seq_len"] = max_seq_len
    return replace(size, **changes)  # type: ignore[arg-type]
