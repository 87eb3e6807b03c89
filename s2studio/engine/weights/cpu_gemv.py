"""Call the CPU kernels of `cpu_gemv.cpp`: linear layers with bf16, int8 or int4 weights, float32 math.

The same library holds the fast path's fused step ops (`cpu_step.cpp`, called through `cpu_step.py`) and the codec's
fused Snake (`cpu_codec.cpp`, through `cpu_codec.py`). It is built when the package is built (`kernel_build.py`) and
loaded by `kernels.py`, which says which width runs; `available()` is False where none loads (then the callers keep
torch's kernels: slower, same results within float rounding).

Up to 8 rows of activations (a decode step, or a batched one: `stream=True` for any number of rows) the weights
stream once for all the rows, each row computed with the additions it gets alone; longer inputs (a prefill) are
widened to float32 a block of rows at a time for torch's GEMM.
"""

from __future__ import annotations

import torch
from torch import Tensor

from s2studio.engine.weights.kernels import available, kernel_path

__all__ = ["available", "kernel_path", "linear_bf16", "linear_int4", "linear_int8"]


def linear_bf16(x: Tensor, weight: Tensor, stream: bool = False) -> Tensor:
    """`F.linear(x.float(), weight.float())` in x's dtype, for a bf16 `weight` (out, in) or its int16 bits."""
    return torch.ops.s2studio_cpu.linear_bf16(x, weight, stream)


def linear_int8(x: Tensor, weight: Tensor, scale: Tensor, stream: bool = False) -> Tensor:
    """`F.linear(x.float(), weight.float()) * scale` in x's dtype, for int8 rows `weight` (out, in)."""
    return torch.ops.s2studio_cpu.linear_int8(x, weight, scale, stream)


def linear_int4(x: Tensor, nibbles: Tensor, scales_and_zeros: Tensor, group: int, stream: bool = False) -> Tensor:
    """`F.linear(x.float(), w)` in x's dtype for int4 codes `nibbles` (out, in/2) in the kernel's block layout
    (`weights/int4.py`) with w = (q - 8)·scale + zero per `group` inputs; `scales_and_zeros` (out, in/group, 2)
    bfloat16 or its int16 bits."""
    return torch.ops.s2studio_cpu.linear_int4(x, nibbles, scales_and_zeros, group, stream)
