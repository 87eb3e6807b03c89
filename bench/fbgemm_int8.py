"""fbgemm's int8 GEMM beside the engine's weight-only int8: `python bench/fbgemm_int8.py`.

A benchmark, not a test: it prints figures and asserts nothing. fbgemm (`torch.ops.quantized.linear_dynamic`) is
the fastest int8 product torch has on a CPU, but it also rounds the activations to 8 bits per call (one scale per
tensor), so an outlier activation erases the small ones beside it, and on AVX2-only CPUs its kernel saturates its
16-bit intermediate sums. The engine therefore uses its own weight-only kernels (engine/weights/cpu_gemv.cpp);
`pack_for_cpu` keeps fbgemm for comparison here and in bench/frame_speed.py.

Prints, for a 256 -> 320 layer: the relative error against the float64 product of the dequantized weights, for
Gaussian activations and for activations with one outlier, of the weight-only layer and of fbgemm's.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from s2studio.engine.weights.int8 import Int8Linear  # noqa: E402


class FbgemmLinear(nn.Module):
    """An `Int8Linear`'s rows repacked for fbgemm's int8 GEMM (dynamic 8-bit activations)."""

    def __init__(self, layer: Int8Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = layer.in_features, layer.out_features
        with warnings.catch_warnings():  # quantized tensors are deprecated in favour of torchao; still the fastest
            warnings.simplefilter("ignore")
            q = torch._make_per_channel_quantized_tensor(
                layer.weight_q, layer.scale.double(), torch.zeros(layer.out_features, dtype=torch.long), 0)
            bias = None if layer.bias is None else layer.bias.float()
            self.packed = torch.ops.quantized.linear_prepack(q, bias)

    def forward(self, x: Tensor) -> Tensor:  # the bias is inside the packed weights
        return torch.ops.quantized.linear_dynamic(x.float(), self.packed, False).to(x.dtype)


def fbgemm_available() -> bool:
    return "fbgemm" in torch.backends.quantized.supported_engines


def pack_for_cpu(model: nn.Module) -> int:
    """Replace every `Int8Linear` of a CPU model by its fbgemm form; returns how many (0 where fbgemm is missing)."""
    if not fbgemm_available():
        return 0
    swaps = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
             if isinstance(child, Int8Linear)]
    for parent, name, child in swaps:
        setattr(parent, name, FbgemmLinear(child))
    return len(swaps)


def main() -> int:
    print(f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, fbgemm: {fbgemm_available()}")
    if not fbgemm_available():
        return 0
    g = torch.Generator().manual_seed(3)
    layer = Int8Linear.from_weight(torch.randn(320, 256, generator=g))
    packed = FbgemmLinear(layer)
    gaussian = torch.randn(4, 256, generator=g)
    outlier = torch.randn(4, 256, generator=g) * 1e-3
    outlier[:, 0] = 100.0  # sets an 8-bit activation scale that erases everything else
    for name, x in (("gaussian activations", gaussian), ("one outlier (100 beside 1e-3)", outlier)):
        want = x.double() @ layer.dequantized().double().T
        for kind, module in (("weight-only int8", layer), ("fbgemm int8", packed)):
            err = float((module(x).double() - want).norm() / want.norm())
            print(f"  {name:32s} {kind:18s} relative error {err:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
