"""Weight-only int8 as a plain layer type: `Int8Linear`, called like the `nn.Linear` it replaces.

At batch 1 every frame streams all of S2's ~8 B weights through memory once (perf.md §1): the time per frame is
bytes / bandwidth. Storing the linear weights as int8 with one float scale per output row halves the bytes of
bf16 (a quarter of fp32), and the error stays small because each row is scaled to its own largest magnitude
(symmetric, no zero point): |w - q·s| <= s/2 = max|row| / 254.

The kernels, chosen for speed as measured (bench/gemv_speed.py, bench/frame_speed.py):

- CPU: the project's own kernels (`cpu_gemv.cpp`). A decode step multiplies the int8 rows by the activations
  rounded to 16 bits per group of 128 columns, exactly in integers: each activation moves by at most 2^-16 of
  its group's largest, 256 times finer than the weights' own rounding (widening every weight to float32 instead
  was compute-bound: half the speed a core, 3x the bandwidth bound on 9728-wide rows). A prefill widens a block of
  rows at a time to float32 for torch's GEMM;
- CPU without those kernels (not built, or switched off): `torch._weight_int8pack_mm` with bfloat16 activations (its float32
  variant is ~6x slower; it is compute-bound at about half the bandwidth at batch 1);
- elsewhere the rows are widened on the fly (`F.linear(x, q.to(dtype)) * s`): the memory is saved, if not all
  of the time.

fbgemm's int8 GEMM rounds the activations to 8 bits per call, which large language models' outlier activations
do not tolerate (and its AVX2 path saturates); `bench/fbgemm_int8.py` keeps it for comparison. Which layers
become int8 is `narrow.py`'s business, not this file's.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from s2studio.engine.weights import cpu_gemv
from s2studio.engine.weights.pages import on_huge_pages


def quantize_rows(weight: Tensor) -> tuple[Tensor, Tensor]:
    """(out, in) float -> int8 (out, in) and float32 scales (out,), symmetric per output row."""
    w = weight.detach().float()
    scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


class Int8Linear(nn.Module):
    """A Linear whose weight is int8 rows times per-row scales; called like the nn.Linear it replaces."""

    def __init__(self, weight_q: Tensor, scale: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        self.in_features, self.out_features = weight_q.shape[1], weight_q.shape[0]
        self.register_buffer("weight_q", on_huge_pages(weight_q))  # streamed once per step: pages.py
        self.register_buffer("scale", scale)
        self.register_buffer("bias", bias)

    @classmethod
    def from_weight(cls, weight: Tensor, bias: Tensor | None = None) -> Int8Linear:
        q, scale = quantize_rows(weight)
        dtype = weight.dtype
        return cls(q, scale.to(dtype), None if bias is None else bias.detach().clone())

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        return cls.from_weight(linear.weight, linear.bias)

    def dequantized(self) -> Tensor:
        return self.weight_q.to(self.scale.dtype) * self.scale[:, None]

    def forward(self, x: Tensor) -> Tensor:
        if x.is_cpu and cpu_gemv.available():
            y = cpu_gemv.linear_int8(x, self.weight_q, self.scale)
        elif x.device.type == "cpu":
            flat = x.reshape(-1, self.in_features).to(torch.bfloat16)
            y = torch._weight_int8pack_mm(flat, self.weight_q, self.scale.to(torch.bfloat16))
            y = y.view(*x.shape[:-1], self.out_features).to(x.dtype)
        else:
            y = F.linear(x, self.weight_q.to(x.dtype)) * self.scale.to(x.dtype)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per-row"
