"""Linear layers that keep bfloat16 weights and multiply in float32: the CPU fast path at half the bytes.

S2's checkpoint stores every weight in bfloat16, so loading it in float32 widens each weight without changing
its value, and then a decode step reads twice the bytes it needs: on the CPU, the time of a step is those
bytes over the memory bandwidth. Narrowing to "bf16" (`narrow.py`) keeps in bfloat16 every linear weight that
holds exactly a bfloat16 value (all of S2's, see `worth_bf16`), and `Bf16Linear` multiplies them in float32
through the CPU kernels (`cpu_gemv.py`): the same float32 products of the same weights, at half the bytes. Only
the order of the additions differs from torch's GEMM, as it does on the rest of the fast path.

The weight is held as int16 bits so that `model.to(dtype)` leaves it alone.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from s2studio.engine.weights import cpu_gemv
from s2studio.engine.weights.pages import on_huge_pages

SMALL = 1 << 18
"""Weights below which a layer stays float32: its float32 matrix (<= 1 MiB) stays in the core's cache between
steps, and torch's float32 GEMV is faster there than widening bf16 (measured 2.8 vs 3.5 us at 96x64)."""


class Bf16Linear(nn.Module):
    """An nn.Linear whose weight is stored in bfloat16; called like the Linear it replaces."""

    def __init__(self, weight: Tensor, bias: Tensor | None = None) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        bits = weight.detach().to(torch.bfloat16).contiguous().view(torch.int16)
        self.register_buffer("bits", on_huge_pages(bits))  # streamed once per step: pages.py
        self.register_buffer("bias", None if bias is None else bias.detach().clone())
        self.kernel = cpu_gemv.available()

    @property
    def weight(self) -> Tensor:
        return self.bits.view(torch.bfloat16)

    def forward(self, x: Tensor) -> Tensor:
        if self.kernel and x.is_cpu:
            y = cpu_gemv.linear_bf16(x, self.bits)
        else:  # without the kernels: widen the whole matrix for torch's GEMM
            y = F.linear(x, self.weight.to(x.dtype))
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bf16 weight"


def worth_bf16(weight: Tensor) -> bool:
    """True when `weight` is large enough to gain (see SMALL) and every value of it is a bfloat16 value, so
    that storing it in bfloat16 loses nothing."""
    if weight.numel() < SMALL:
        return False
    return weight.dtype == torch.bfloat16 or bool(torch.equal(weight.to(torch.bfloat16).to(weight.dtype), weight))
