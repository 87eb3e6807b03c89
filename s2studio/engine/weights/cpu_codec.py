"""The codec's fused Snake on the CPU (`cpu_codec.cpp`, built into the kernels' library by `kernel_build.py`).

`codec/fast_stream.py` declares what the non-exact decode may fuse (`CodecOps`); this is the C++ implementation of
it. `codec_ops` returns it where it applies, None elsewhere (CUDA, no kernels built, `S2STUDIO_CPU_KERNELS=0`): torch's
Snake then runs unchanged. The exact decoder never takes it (its rounding is torch's by definition).
"""

from __future__ import annotations

import torch
from torch import Tensor

from s2studio.codec.fast_stream import CodecOps
from s2studio.engine.weights import cpu_gemv


class CpuCodecOps:
    """`CodecOps` by the C++ kernels: Snake in one pass, its own vectorised sine, the result in float32 or bfloat16."""

    def __init__(self) -> None:
        if not cpu_gemv.available():  # loads the library where it can
            raise RuntimeError("the CPU kernels are not available here; use codec_ops(), which says None")

    def snake(self, x: Tensor, alpha: Tensor, out_dtype: torch.dtype) -> Tensor:
        return torch.ops.s2studio_cpu.snake(x, alpha, out_dtype)


def codec_ops(device: torch.device) -> CodecOps | None:
    """The C++ codec ops for a codec on `device`, or None where they do not apply (then torch's)."""
    if device.type != "cpu" or not cpu_gemv.available():
        return None
    return CpuCodecOps()


def fast_sin(x: Tensor) -> Tensor:
    """The sine inside the fused Snake, elementwise over float32 `x`: for measuring its accuracy, nothing else."""
    return torch.ops.s2studio_cpu.fast_sin(x)
