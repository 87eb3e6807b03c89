"""Weight-only int4 as a plain layer type: a scale and an offset per group of input columns ("int4 groupwise").

Half of int8's memory: S2 Pro's linear layers shrink from 4.05 GB (int8) to ~2.1 GB, so the whole model fits in
about 3 GB plus the KV cache. Each group of `group` consecutive weights in a row gets its own range: q in 0..15,
w ≈ q·scale + min (asymmetric, so a group that is all positive loses no level). On this CPU the int4 product
(`_weight_int4pack_mm_for_cpu`, bfloat16 activations) is compute-bound and about as fast as fbgemm's int8
(measured 6-8 GB/s of int4 bytes on one core), so int4 buys memory, not speed, here; on other devices the
groups are widened to float on the fly.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

GROUP = 128
"""Input columns per scale/offset pair (smaller for narrow layers: the largest of 128, 64, 32 that divides)."""
INNER_K_TILES = 2
"""The CPU kernel's packing parameter (as gpt-fast uses it)."""


def group_size(in_features: int) -> int | None:
    for g in (GROUP, 64, 32):
        if in_features % g == 0:
            return g
    return None


def quantize_groups(weight: Tensor, group: int) -> tuple[Tensor, Tensor]:
    """(out, in) float -> (codes 0..15 as uint8 (out, in), scales_and_zeros (in/group, out, 2) float32).

    Dequantized: w = (q - 8)·scale + zero, with zero = min + 8·scale (the form the CPU kernel takes).
    """
    out, inp = weight.shape
    w = weight.detach().float().view(out, inp // group, group)
    low, high = w.amin(dim=-1, keepdim=True), w.amax(dim=-1, keepdim=True)
    scale = (high - low).clamp(min=1e-8) / 15
    q = torch.round((w - low) / scale).clamp(0, 15).to(torch.uint8).view(out, inp)
    zero = low + 8 * scale
    return q, torch.cat([scale, zero], dim=-1).transpose(0, 1).contiguous()


class Int4Linear(nn.Module):
    """A bias-free Linear stored as int4 codes (two per byte) with per-group scales and offsets."""

    def __init__(self, codes: Tensor, scales_and_zeros: Tensor, group: int) -> None:
        super().__init__()
        self.out_features, self.in_features = codes.shape
        self.group = group
        self.register_buffer("nibbles", codes[:, 0::2] | (codes[:, 1::2] << 4))  # (out, in/2) uint8
        self.register_buffer("scales_and_zeros", scales_and_zeros)
        self.packed: Tensor | None = None
        """The CPU kernel's layout, made on first use on the CPU (then `nibbles` is dropped)."""

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int4Linear | None:
        """None when the layer cannot be grouped (in_features not a multiple of 32) or has a bias."""
        group = group_size(linear.in_features)
        if group is None or linear.bias is not None:
            return None
        codes, sz = quantize_groups(linear.weight, group)
        return cls(codes, sz.to(linear.weight.dtype), group)

    def codes(self) -> Tensor:
        """(out, in) uint8 codes 0..15."""
        if self.nibbles is None:
            raise RuntimeError("the codes were repacked for the CPU kernel")
        low, high = self.nibbles & 15, self.nibbles >> 4
        return torch.stack([low, high], dim=-1).view(self.out_features, self.in_features)

    def dequantized(self) -> Tensor:
        q = self.codes().float().view(self.out_features, -1, self.group)
        sz = self.scales_and_zeros.float().transpose(0, 1)  # (out, groups, 2)
        return ((q - 8) * sz[..., :1] + sz[..., 1:]).view(self.out_features, self.in_features)

    def forward(self, x: Tensor) -> Tensor:
        if x.device.type == "cpu":
            if self.packed is None:
                self.packed = torch._convert_weight_to_int4pack_for_cpu(self.codes().to(torch.int32), INNER_K_TILES)
                self.nibbles = None
            flat = x.reshape(-1, self.in_features).to(torch.bfloat16)
            y = torch._weight_int4pack_mm_for_cpu(flat, self.packed, self.group,
                                                 self.scales_and_zeros.to(torch.bfloat16))
            return y.view(*x.shape[:-1], self.out_features).to(x.dtype)
        return F.linear(x, self.dequantized().to(x.dtype))

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int4 groups of {self.group}"
