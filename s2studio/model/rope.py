"""Rotary position embeddings as upstream computes them (spec s2-language-model §4.3).

Two details decide the bits: the cos/sin table is computed in float32 and then rounded to bfloat16 (in fp32
mode it is widened back, keeping the bf16 values), and the rotated pairs are adjacent dimensions (2j, 2j+1),
not the two halves of the head.
"""

from __future__ import annotations

import torch
from torch import Tensor


def precompute_freqs_cis(seq_len: int, n_elem: int, base: float) -> Tensor:
    """(seq_len, n_elem // 2, 2) cos and sin in bfloat16, always computed on the CPU.

    Always the CPU because the table is part of the reference bits: a GPU's cos/sin may round differently,
    and a model built on the meta device still needs real values. Move it with the model afterwards.
    """
    freqs = 1.0 / (base ** (torch.arange(0, n_elem, 2, device="cpu")[: n_elem // 2].float() / n_elem))
    t = torch.arange(seq_len, device="cpu")
    angles = torch.outer(t, freqs)
    cis = torch.polar(torch.ones_like(angles), angles)
    return torch.stack([cis.real, cis.imag], dim=-1).to(torch.bfloat16)


def apply_rotary_emb(x: Tensor, freqs_cis: Tensor) -> Tensor:
    """Rotate `x` (B, S, H, D) by `freqs_cis` (S, D/2, 2), pairing dims 2j and 2j+1, in float32.

    Each product is its own op and the sums come after, as upstream writes it (no fused multiply-add).
    """
    xs = x.float().reshape(*x.shape[:-1], -1, 2)
    fc = freqs_cis.view(1, xs.size(1), 1, xs.size(3), 2)
    real = xs[..., 0] * fc[..., 0] - xs[..., 1] * fc[..., 1]
    imag = xs[..., 1] * fc[..., 0] + xs[..., 0] * fc[..., 1]
    return torch.stack([real, imag], dim=-1).flatten(3).type_as(x)
