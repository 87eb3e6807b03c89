"""Random-weight `codec.pth` files in S2's exact on-disk layout (spec s2-codec.md §6).

The layout is upstream's: a flat dict of float32 tensors, causal convs weight-normed in the parametrized
storage (`….conv.parametrizations.weight.original0/1`), the VQ projections in the legacy one
(`weight_g`/`weight_v`), and the six stale S1-era buffers (bf16 `freqs_cis`, bool `causal_mask`) that upstream
no longer reads. Only sizes and values differ from the real file, so the same loader paths are exercised.

Values come from numpy's PCG64 seeded by (seed, tensor name): stable across numpy and torch versions, so a
golden file made from a seed stays valid. Scales follow spec §12.2 (alphas 0.5–1.5, layer scales 0.05–0.15,
biases ±0.01, norms 1 ± 0.1, codebooks N(0, 1)) so that every layer visibly contributes to the output.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import torch

from s2studio.codec.codec import Codec
from s2studio.codec.config import S2, TINY, CodecConfig
from s2studio.codec.layers import WindowLimitedTransformer
from s2studio.errors import UserError

SIZES: dict[str, CodecConfig] = {"tiny": TINY, "full": S2}
STALE_ROWS = {"tiny": (256, 64), "full": (16384, 4096)}
"""Rows of the stale buffers (encoder transformer, quantizer transformers): S1's `block_size`s for the full
size (spec §6.4), small ones for tiny so that the test file stays small."""


def _rng(seed: int, name: str) -> np.random.Generator:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def _is_weight_normed(name: str) -> bool:
    """Upstream weight-norms every conv of the encoder and decoder and the VQ projections, nothing else."""
    return name.endswith(".weight") and (
        (name.startswith(("encoder.", "decoder.")) and name.endswith(".conv.weight"))
        or name.endswith(("in_proj.weight", "out_proj.weight")))


def _value(name: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = _rng(seed, name)
    if name.endswith("alpha"):
        return rng.uniform(0.5, 1.5, shape)
    if name.endswith("codebook.weight"):
        return rng.standard_normal(shape)
    if name.endswith("gamma"):
        return rng.uniform(0.05, 0.15, shape)
    if name.endswith("norm.weight"):
        return 1.0 + rng.uniform(-0.1, 0.1, shape)
    if name.endswith("bias"):
        return rng.uniform(-0.01, 0.01, shape)
    fan_in = math.prod(shape[1:])  # Linear (out, in), Conv1d (out, in/groups, k)
    return rng.standard_normal(shape) / math.sqrt(fan_in)


def _gain(name: str, shape: tuple[int, ...], seed: int, transposed: bool) -> np.ndarray:
    """g per dim-0 slice (±20 %). The base is what PyTorch's default init gives a weight-normed conv (row norm
    ≈ 1/√3) for the decoder, which keeps it about as sensitive to rounding as spec §14's test network; residual
    units add a damped branch so the residual sum stays bounded, and the output conv brings the level to speech's
    (RMS ≈ 0.08) without saturating tanh."""
    rng = _rng(seed, name + "#g")
    scale = 1 / math.sqrt(3) if name.startswith("decoder.") else 1.0  # a livelier encoder: more codes in use
    if transposed:  # (cin, cout, k) with stride k/2: each output sums cin·2 taps
        scale *= math.sqrt(shape[1] * shape[2] / (shape[0] * 2))
    elif name.endswith(".block.3.conv.weight"):  # a residual unit's output conv
        scale = 0.3
    elif name.startswith("decoder.") and shape[0] == 1:  # the decoder's output conv
        scale = 1.5
    return scale * rng.uniform(0.8, 1.2, (shape[0],) + (1,) * (len(shape) - 1))


def codec_state(config: CodecConfig, seed: int, stale_rows: tuple[int, int] = (256, 64)) -> dict[str, torch.Tensor]:
    """The upstream-layout state dict of a random codec of `config`."""
    with torch.device("meta"):
        model = Codec(config)
    transposed = {n + ".conv.weight" for n, m in model.named_modules() if type(m).__name__ == "CausalTransConv"}
    state: dict[str, torch.Tensor] = {}
    for name, p in model.state_dict().items():
        shape = tuple(p.shape)
        value = torch.from_numpy(_value(name, shape, seed).astype(np.float32))
        if not _is_weight_normed(name):
            state[name] = value
            continue
        owner = name[: -len(".weight")]
        g = torch.from_numpy(_gain(name, shape, seed, name in transposed).astype(np.float32))
        if name.startswith(("encoder.", "decoder.")):
            state[owner + ".parametrizations.weight.original0"] = g
            state[owner + ".parametrizations.weight.original1"] = value
        else:
            state[owner + ".weight_g"] = g
            state[owner + ".weight_v"] = value
    for name, m in model.named_modules():
        if isinstance(m, WindowLimitedTransformer):
            rows = stale_rows[0] if name.startswith("encoder.") else stale_rows[1]
            state[name + ".freqs_cis"] = _stale_rope(rows, m.head_dim, m.rope_base)
            state[name + ".causal_mask"] = torch.tril(torch.ones(rows, rows, dtype=torch.bool))
    return state


def _stale_rope(rows: int, head_dim: int, base: float) -> torch.Tensor:
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    angles = torch.outer(torch.arange(rows), inv)
    cis = torch.polar(torch.ones_like(angles), angles)
    return torch.stack([cis.real, cis.imag], dim=-1).to(torch.bfloat16)


def write_codec_checkpoint(path: Path, *, seed: int, size: str = "tiny") -> None:
    """Write a random `codec.pth` of `size` ("tiny" or "full", the real 1.9 GB shape) to `path`, atomically."""
    if size not in SIZES:
        raise UserError(f"unknown codec size {size!r}; use one of: {', '.join(SIZES)}")
    state = codec_state(SIZES[size], seed, STALE_ROWS[size])
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    tmp.replace(path)
