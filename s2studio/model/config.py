"""The DualAR model's shape, parsed from a checkpoint folder's `config.json`.

Two file forms exist (spec s2-language-model §1.2): S2 Pro's own nested `fish_qwen3_omni` form and the flat
`dual_ar` form that upstream's `save_pretrained` writes after fine-tuning. Both are reduced here to the same
frozen `DualARConfig`, with upstream's fallbacks reproduced exactly, traps included, because a wrong fallback
silently builds a different model (e.g. a fast q/k norm that the checkpoint has no weights for).

Torch-free on purpose: the studio can validate a model folder without importing torch.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from s2studio.errors import UserError

HEAD_DIM_DEFAULT = 64
"""Upstream's dataclass default. It wins over `dim // n_head` when `head_dim` is absent, because upstream drops
`None` values before constructing its arguments (spec §1.2)."""


def find_multiple(n: int, k: int) -> int:
    """The smallest multiple of `k` that is >= `n` (upstream rounds cache and hidden sizes this way)."""
    return n if n % k == 0 else n + k - n % k


def default_intermediate_size(dim: int) -> int:
    """SwiGLU's hidden size when the config leaves it out: 2/3 of 4·dim, rounded up to a multiple of 256."""
    return find_multiple(int(2 * (4 * dim) / 3), 256)


@dataclass(frozen=True)
class TransformerConfig:
    """One transformer stack (the slow one or the fast one)."""

    dim: int
    n_layer: int
    n_head: int
    n_local_heads: int
    """Key/value heads (GQA); each serves `n_head // n_local_heads` query heads."""
    head_dim: int
    intermediate_size: int
    rope_base: float
    norm_eps: float
    max_seq_len: int
    qk_norm: bool
    qkv_bias: bool
    o_bias: bool

    def __post_init__(self) -> None:
        for name in ("dim", "n_layer", "n_head", "n_local_heads", "head_dim", "intermediate_size", "max_seq_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.n_head % self.n_local_heads:
            raise ValueError(f"n_head ({self.n_head}) must be a multiple of n_local_heads ({self.n_local_heads})")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
        for name in ("rope_base", "norm_eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        for name in ("qk_norm", "qkv_bias", "o_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")

    @property
    def q_size(self) -> int:
        return self.n_head * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.n_local_heads * self.head_dim


@dataclass(frozen=True)
class DualARConfig:
    """The whole model: a slow transformer over tokens and a fast one over a frame's codebooks."""

    slow: TransformerConfig
    fast: TransformerConfig
    vocab_size: int
    codebook_size: int
    num_codebooks: int
    tie_word_embeddings: bool
    scale_codebook_embeddings: bool
    """Divide a semantic position's embedding by sqrt(num_codebooks + 1) (true for S2)."""
    norm_fastlayer_input: bool
    """Hand the final-normed slow state to the fast transformer, not the raw one (true for S2)."""
    semantic_begin_id: int
    semantic_end_id: int
    """Inclusive. The tokenizer's values override the config's at load time (spec §2.3)."""
    im_end_id: int | None

    def __post_init__(self) -> None:
        for name in ("vocab_size", "codebook_size", "num_codebooks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("tie_word_embeddings", "scale_codebook_embeddings", "norm_fastlayer_input"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        b, e = self.semantic_begin_id, self.semantic_end_id
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (b, e)) or not 0 <= b <= e < self.vocab_size:
            raise ValueError(f"semantic token range {b!r}..{e!r} must satisfy 0 <= begin <= end < vocab_size "
                             f"({self.vocab_size})")
        im_end = self.im_end_id
        if im_end is not None and not (isinstance(im_end, int) and 0 <= im_end < self.vocab_size):
            raise ValueError(f"im_end_id {self.im_end_id!r} is outside the vocabulary (size {self.vocab_size})")
        if self.fast.rope_base != self.slow.rope_base or self.fast.norm_eps != self.slow.norm_eps:
            raise ValueError("the fast transformer uses the slow one's rope_base and norm_eps")

    @property
    def fast_has_projection(self) -> bool:
        """A fast width different from the slow one needs a (biased) linear bridge."""
        return self.fast.dim != self.slow.dim


# ----------------------------------------------------------------------------- parsing


def _require(d: dict[str, Any], key: str, where: str) -> Any:
    if key not in d or d[key] is None:
        raise ValueError(f"{where} is missing the required key {key!r}")
    return d[key]


def _get(d: dict[str, Any], key: str, default: Any) -> Any:
    """`d[key]`, or `default` when the key is absent or null (upstream drops `None` values)."""
    value = d.get(key)
    return default if value is None else value


def _local_heads(value: Any, n_head: Any) -> Any:
    """-1 (upstream's "same as n_head") resolved."""
    return n_head if value == -1 else value


def _fast_config(slow: TransformerConfig, fields: dict[str, Any]) -> TransformerConfig:
    """The fast stack: its own widths where given (a 0 or missing value falls back, as upstream's `or` does), but
    always the slow stack's norm_eps, rope_base and max_seq_len (upstream ignores the audio config's)."""
    n_head = fields.get("n_head") or slow.n_head
    local = fields.get("n_local_heads")
    local = _local_heads(local, n_head) if local else slow.n_local_heads

    def flag(name: str, fallback: bool) -> Any:
        value = fields.get(name)
        return fallback if value is None else value

    return TransformerConfig(
        dim=fields.get("dim") or slow.dim,
        n_layer=fields["n_layer"],
        n_head=n_head,
        n_local_heads=local,
        head_dim=fields.get("head_dim") or slow.head_dim,
        intermediate_size=fields.get("intermediate_size") or slow.intermediate_size,
        rope_base=slow.rope_base,
        norm_eps=slow.norm_eps,
        max_seq_len=slow.max_seq_len,
        qk_norm=flag("qk_norm", slow.qk_norm),
        qkv_bias=flag("qkv_bias", slow.qkv_bias),
        o_bias=flag("o_bias", slow.o_bias),
    )


def _number(value: Any) -> Any:
    """JSON numbers as floats (1000000 and 1e6 are the same rope base); anything else left for validation."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def _parse_omni(d: dict[str, Any]) -> DualARConfig:
    tc = d.get("text_config")
    adc = d.get("audio_decoder_config")
    if not isinstance(tc, dict) or not isinstance(adc, dict):
        raise ValueError("a fish_qwen3_omni config needs the objects 'text_config' and 'audio_decoder_config'")
    where_t, where_a = "text_config", "audio_decoder_config"
    dim = _require(tc, "dim", where_t)
    n_head = _require(tc, "n_head", where_t)
    slow = TransformerConfig(
        dim=dim,
        n_layer=_require(tc, "n_layer", where_t),
        n_head=n_head,
        n_local_heads=_local_heads(_get(tc, "n_local_heads", -1), n_head),
        head_dim=_get(tc, "head_dim", HEAD_DIM_DEFAULT),  # not dim // n_head: spec §1.2's trap
        intermediate_size=tc.get("intermediate_size") or default_intermediate_size(dim),
        rope_base=_number(_get(tc, "rope_base", 10000)),
        norm_eps=_number(_get(tc, "norm_eps", 1e-5)),
        max_seq_len=_get(tc, "max_seq_len", 2048),
        qk_norm=_get(tc, "attention_qk_norm", False),
        qkv_bias=_get(tc, "attention_qkv_bias", False),
        o_bias=_get(tc, "attention_o_bias", False),
    )
    fast = _fast_config(slow, {
        "dim": adc.get("dim"),
        "n_layer": _require(adc, "n_layer", where_a),
        "n_head": adc.get("n_head"),
        "n_local_heads": adc.get("n_local_heads"),
        "head_dim": adc.get("head_dim"),
        "intermediate_size": adc.get("intermediate_size"),
        # absent -> the TEXT value (true for S2's text); S2's file says false explicitly
        "qk_norm": adc.get("attention_qk_norm"),
        "qkv_bias": adc.get("attention_qkv_bias"),
        "o_bias": adc.get("attention_o_bias"),
    })
    eos = d.get("eos_token_id")
    return DualARConfig(
        slow=slow,
        fast=fast,
        vocab_size=_require(tc, "vocab_size", where_t),
        codebook_size=_require(adc, "vocab_size", where_a),
        num_codebooks=_require(adc, "num_codebooks", where_a),
        tie_word_embeddings=_get(tc, "tie_word_embeddings", True),
        scale_codebook_embeddings=True,  # forced by upstream for this form; not a config key
        norm_fastlayer_input=True,
        semantic_begin_id=_get(d, "semantic_start_token_id", 0),
        semantic_end_id=_get(d, "semantic_end_token_id", 0),
        im_end_id=eos if isinstance(eos, int) and not isinstance(eos, bool) else None,
    )


def _parse_dual_ar(d: dict[str, Any]) -> DualARConfig:
    """Upstream's `DualARModelArgs(**known_keys)` and its `__post_init__` (defaults: spec §1.2 tables)."""
    dim = _get(d, "dim", 4096)
    n_head = _get(d, "n_head", 32)
    head_dim = d.get("head_dim", HEAD_DIM_DEFAULT)
    if head_dim is None and isinstance(dim, int) and isinstance(n_head, int) and n_head > 0:
        head_dim = dim // n_head  # an explicit null means dim // n_head here (upstream's __post_init__)
    slow = TransformerConfig(
        dim=dim,
        n_layer=_get(d, "n_layer", 32),
        n_head=n_head,
        n_local_heads=_local_heads(_get(d, "n_local_heads", -1), n_head),
        head_dim=head_dim,
        intermediate_size=d.get("intermediate_size") or (default_intermediate_size(dim) if isinstance(dim, int)
                                                         else dim),
        rope_base=_number(_get(d, "rope_base", 10000)),
        norm_eps=_number(_get(d, "norm_eps", 1e-5)),
        max_seq_len=_get(d, "max_seq_len", 2048),
        qk_norm=_get(d, "attention_qk_norm", False),
        qkv_bias=_get(d, "attention_qkv_bias", False),
        o_bias=_get(d, "attention_o_bias", False),
    )
    fast = _fast_config(slow, {
        "dim": d.get("fast_dim"),
        "n_layer": _get(d, "n_fast_layer", 4),
        "n_head": d.get("fast_n_head"),
        "n_local_heads": d.get("fast_n_local_heads"),
        "head_dim": d.get("fast_head_dim"),
        "intermediate_size": d.get("fast_intermediate_size"),
        "qk_norm": d.get("fast_attention_qk_norm"),
        "qkv_bias": d.get("fast_attention_qkv_bias"),
        "o_bias": d.get("fast_attention_o_bias"),
    })
    return DualARConfig(
        slow=slow,
        fast=fast,
        vocab_size=_get(d, "vocab_size", 32000),
        codebook_size=_get(d, "codebook_size", 160),
        num_codebooks=_get(d, "num_codebooks", 4),
        tie_word_embeddings=_get(d, "tie_word_embeddings", True),
        scale_codebook_embeddings=_get(d, "scale_codebook_embeddings", False),
        norm_fastlayer_input=_get(d, "norm_fastlayer_input", False),
        semantic_begin_id=_get(d, "semantic_begin_id", 0),
        semantic_end_id=_get(d, "semantic_end_id", 0),
        im_end_id=None,
    )


def parse_config(d: dict[str, Any]) -> DualARConfig:
    """A `config.json` dict as a `DualARConfig`; ValueError says what is wrong with it."""
    if not isinstance(d, dict):
        raise ValueError("config.json must hold a JSON object")
    model_type = d.get("model_type")
    if model_type == "fish_qwen3_omni":
        return _parse_omni(d)
    if model_type == "dual_ar":
        return _parse_dual_ar(d)
    raise ValueError(f"unsupported model_type {model_type!r} (expected 'fish_qwen3_omni' or 'dual_ar')")


def load_config(path: Path) -> DualARConfig:
    """Read and parse `config.json` (a folder or the file itself). Every failure is a one-line UserError."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path} not found: a model folder needs its config.json") from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is not valid JSON (line {exc.lineno}): {exc.msg}") from None
    try:
        return parse_config(data)
    except (ValueError, TypeError) as exc:
        raise UserError(f"bad model config {path}: {exc}") from None
