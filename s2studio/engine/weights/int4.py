"""Weight-only int4 as a plain layer type: a scale and an offset per group of input columns ("int4 groupwise").

Half of int8's bytes: S2 Pro's linear layers shrink from 4.05 GB (int8) to ~2.15 GB. At batch 1 a decode step's
time is its weight bytes over the memory bandwidth, so on the CPU int4 is also the fastest mode there is, as
long as the kernel keeps up with the memory. Each group of `group` consecutive weights in a row gets its own
range: q in 0..15, w = (q - 8)·scale + zero with zero = min + 8·scale (torch's int4 form; asymmetric, so a group
that is all positive loses no level), scale and zero in bfloat16 as torch's int4 kernels take them.

The kernels:

- CPU: the project's own (`cpu_gemv.cpp`), which streams the codes at memory speed: per group of 128 columns the
  activations are rounded to 16 bits (finer than the bfloat16 of torch's int4 kernel: a group's error is at most
  what bfloat16 allows for its largest activation alone) and the codes multiplied by them exactly in integers,
  then scaled. The codes are stored in its block layout (`pack_codes`): 64 codes in 32 bytes read as 16 lanes of
  16 bits, bits 4i..4i+3 of lane j holding code 16i + j;
- CPU without those kernels (not built, or switched off): torch's `_weight_int4pack_mm_for_cpu` (bfloat16 activations,
  compute-bound at about int8's speed), on the codes repacked into its own layout at the first call;
- elsewhere the groups are widened on the fly (`F.linear(x, dequantized)`): the memory is saved, if not the time.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from s2studio.engine.weights import cpu_gemv
from s2studio.engine.weights.pages import on_huge_pages

GROUP = 128
"""Input columns per scale/offset pair (64 for a layer whose width 128 does not divide).
128 costs 4 bytes of range per 64 bytes of codes (6 %); the error of a group depends little on its length
for Gaussian-like weights (16 levels over the range either way)."""
BLOCK = 64
"""Codes per block of the kernel's layout (32 bytes); a group is a whole number of blocks."""
INNER_K_TILES = 2
"""torch's CPU int4 packing parameter (as gpt-fast uses it), for the fallback kernel."""


def group_size(in_features: int) -> int | None:
    for g in (GROUP, BLOCK):
        if in_features % g == 0:
            return g
    return None


def quantize_groups(weight: Tensor, group: int) -> tuple[Tensor, Tensor]:
    """(out, in) float -> (codes 0..15 as uint8 (out, in), scales_and_zeros (out, in/group, 2) bfloat16).

    Dequantized: w = (q - 8)·scale + zero, with zero = min + 8·scale. The codes are rounded against the bfloat16
    scale and offset that are stored, so each weight is within half a step of its dequantized value."""
    out, inp = weight.shape
    w = weight.detach().float().view(out, inp // group, group)
    low, high = w.amin(dim=-1, keepdim=True), w.amax(dim=-1, keepdim=True)
    scale = ((high - low).clamp(min=1e-8) / 15).to(torch.bfloat16).float()
    zero = (low + 8 * scale).to(torch.bfloat16).float()
    q = torch.round((w - zero) / scale + 8).clamp(0, 15).to(torch.uint8).view(out, inp)
    return q, torch.cat([scale, zero], dim=-1).to(torch.bfloat16)


def pack_codes(codes: Tensor) -> Tensor:
    """(out, in) codes 0..15 -> (out, in/2) bytes in the kernel's block layout (module docstring)."""
    out, inp = codes.shape
    blocks = codes.to(torch.int32).view(out, inp // BLOCK, 4, 16)  # [block, i, j]: code 16i + j
    lanes = blocks[:, :, 0] | blocks[:, :, 1] << 4 | blocks[:, :, 2] << 8 | blocks[:, :, 3] << 12
    low, high = lanes & 255, lanes >> 8  # little-endian 16-bit lanes
    return torch.stack([low, high], dim=-1).to(torch.uint8).reshape(out, inp // 2).contiguous()


def unpack_codes(nibbles: Tensor) -> Tensor:
    """The inverse of `pack_codes`: (out, in/2) bytes -> (out, in) codes."""
    out, half = nibbles.shape
    pairs = nibbles.to(torch.int32).view(out, half // (BLOCK // 2), 16, 2)
    lanes = pairs[..., 0] | pairs[..., 1] << 8  # (out, blocks, j)
    shifts = torch.tensor([0, 4, 8, 12], dtype=torch.int32).view(1, 1, 4, 1)
    return ((lanes[:, :, None, :] >> shifts) & 15).to(torch.uint8).reshape(out, 2 * half)


class Int4Linear(nn.Module):
    """A bias-free Linear stored as int4 codes (two per byte) with per-group scales and offsets."""

    def __init__(self, codes: Tensor, scales_and_zeros: Tensor, group: int) -> None:
        super().__init__()
        self.out_features, self.in_features = codes.shape
        if group % BLOCK or self.in_features % group:
            raise ValueError(f"a group of {group} does not tile {self.in_features} inputs in blocks of {BLOCK}")
        self.group = group
        self.register_buffer("nibbles", on_huge_pages(pack_codes(codes)))  # (out, in/2) uint8; pages.py
        # bfloat16 bits as int16, so that model.to(dtype) leaves them as torch's int4 kernels take them
        self.register_buffer("range_bits", scales_and_zeros.to(torch.bfloat16).contiguous().view(torch.int16))
        self.packed: Tensor | None = None
        """torch's layout, made at the first call on a CPU without our kernels (then `nibbles` is dropped)."""

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int4Linear | None:
        """None when the layer cannot be grouped (in_features not a multiple of 64) or has a bias."""
        group = group_size(linear.in_features)
        if group is None or linear.bias is not None:
            return None
        return cls(*quantize_groups(linear.weight, group), group)

    @property
    def scales_and_zeros(self) -> Tensor:
        """(out, in/group, 2) bfloat16: each group's scale and zero."""
        return self.range_bits.view(torch.bfloat16)

    def codes(self) -> Tensor:
        """(out, in) uint8 codes 0..15."""
        if self.nibbles is None:
            raise RuntimeError("the codes were repacked for torch's int4 kernel")
        return unpack_codes(self.nibbles)

    def dequantized(self) -> Tensor:
        """(out, in) float32: the weights the layer multiplies by."""
        q = self.codes().float().view(self.out_features, -1, self.group)
        sz = self.scales_and_zeros.float()
        return ((q - 8) * sz[..., :1] + sz[..., 1:]).view(self.out_features, self.in_features)

    def forward(self, x: Tensor) -> Tensor:
        if x.device.type != "cpu":
            return F.linear(x, self.dequantized().to(x.dtype))
        if self.nibbles is not None and cpu_gemv.available():
            return cpu_gemv.linear_int4(x, self.nibbles, self.range_bits, self.group)
        if self.packed is None:
            self.packed = torch._convert_weight_to_int4pack_for_cpu(self.codes().to(torch.int32), INNER_K_TILES)
            self.nibbles = None
        flat = x.reshape(-1, self.in_features).to(torch.bfloat16)
        y = torch._weight_int4pack_mm_for_cpu(flat, self.packed, self.group,
                                             self.scales_and_zeros.transpose(0, 1).contiguous())
        return y.view(*x.shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int4 groups of {self.group}"
