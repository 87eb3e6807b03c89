"""Weight-only int8 for the transformers' linear layers.

At batch 1 every frame streams all of S2's ~8 B weights through memory once (perf.md §1): the time per frame is
bytes / bandwidth. Storing the linear weights as int8 with one float scale per output row halves the bytes of
bf16 (a quarter of fp32), and the error stays small because each row is scaled to its own largest magnitude
(symmetric, no zero point): |w - q·s| <= s/2 = max|row| / 254.

The kernels, chosen for speed as measured on a 2-core AVX512 Xeon (bench/frame_speed.py):

- CPU: the project's own kernels (`cpu_gemv.cpp`), which widen each int8 weight to float32 in registers and
  multiply it by the float32 activation: weight-only, at ~0.9x the speed of streaming float32 through
  `torch.sum` in a decode step; a prefill widens a block of rows at a time for torch's GEMM;
- CPU without those kernels (no compiler): `torch._weight_int8pack_mm` with bfloat16 activations (its float32
  variant is ~6x slower; it is compute-bound at about half the bandwidth at batch 1);
- CPU, packed (`pack_for_cpu`, kept for comparison in the benchmarks, not used by the engine): fbgemm's int8
  GEMM, fast, but it also rounds the activations to 8 bits per call (one scale per tensor), which large
  language models' outlier activations do not tolerate well;
- elsewhere the rows are widened on the fly (`F.linear(x, q.to(dtype)) * s`): the memory is saved, if not all
  of the time.

The embedding tables stay in float: a lookup reads only a few rows of them per step.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from s2studio.engine import cpu_gemv
from s2studio.errors import UserError

MODES = ("none", "int8", "int4")


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
        self.register_buffer("weight_q", weight_q)
        self.register_buffer("scale", scale)
        self.register_buffer("bias", bias)
        self.packed: object | None = None
        """fbgemm's packed weights once `pack_for_cpu` ran (then `weight_q` is None: one int8 copy only)."""

    def pack_for_cpu(self) -> bool:
        """Repack the weights for fbgemm's int8 GEMM; False (and nothing changed) where fbgemm is missing."""
        if self.packed is not None:
            return True
        if "fbgemm" not in torch.backends.quantized.supported_engines or self.weight_q.device.type != "cpu":
            return False
        with warnings.catch_warnings():  # quantized tensors are deprecated in favour of torchao; still the fastest
            warnings.simplefilter("ignore")
            q = torch._make_per_channel_quantized_tensor(
                self.weight_q, self.scale.double(), torch.zeros(self.out_features, dtype=torch.long), 0)
            bias = None if self.bias is None else self.bias.float()
            self.packed = torch.ops.quantized.linear_prepack(q, bias)
        self.weight_q = None
        return True

    @classmethod
    def from_weight(cls, weight: Tensor, bias: Tensor | None = None) -> Int8Linear:
        q, scale = quantize_rows(weight)
        dtype = weight.dtype
        return cls(q, scale.to(dtype), None if bias is None else bias.detach().clone())

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        return cls.from_weight(linear.weight, linear.bias)

    def int8_rows(self) -> Tensor:
        if self.weight_q is not None:
            return self.weight_q
        return torch.ops.quantized.linear_unpack(self.packed)[0].int_repr()

    def dequantized(self) -> Tensor:
        return self.int8_rows().to(self.scale.dtype) * self.scale[:, None]

    def forward(self, x: Tensor) -> Tensor:
        if self.packed is not None:  # the bias is inside the packed weights
            return torch.ops.quantized.linear_dynamic(x.float(), self.packed, False).to(x.dtype)
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


def quantized_linears(model: nn.Module) -> list[tuple[nn.Module, str]]:
    """(parent, attribute) of every linear layer that int8 replaces: attention and FFN of both stacks, and the
    fast head. The slow head is the tied embedding table and stays float (the fast path quantizes its
    4097-row copy)."""
    found: list[tuple[nn.Module, str]] = []
    for layer in [*model.layers, *model.fast_layers]:
        found += [(layer.attention, "wqkv"), (layer.attention, "wo")]
        found += [(layer.feed_forward, name) for name in ("w1", "w2", "w3")]
    found.append((model, "fast_output"))
    if not model.config.tie_word_embeddings:
        found.append((model, "output"))
    return found


def quantize_model(model: nn.Module, mode: str) -> nn.Module:
    """Replace the linear layers in place, one at a time, so the float copy of each is freed as it goes.

    "int4" (engine/quantize_int4.py) keeps int8 for a layer it cannot group (a bias, or a width not a multiple
    of 32); S2's layers all group.
    """
    if mode not in MODES:
        raise UserError(f"unknown quantization {mode!r}; choose one of {', '.join(MODES)}")
    if mode == "none":
        return model
    from s2studio.engine.quantize_int4 import Int4Linear

    for parent, name in quantized_linears(model):
        linear = getattr(parent, name)
        if isinstance(linear, nn.Linear):
            small = Int4Linear.from_linear(linear) if mode == "int4" else None
            setattr(parent, name, small if small is not None else Int8Linear.from_linear(linear))
    model.quantization = mode
    return model


def quantization_of(model: nn.Module) -> str:
    return getattr(model, "quantization", "none")


def load_quantized(model_dir, *, device: torch.device, dtype: torch.dtype, mode: str, **kwargs) -> nn.Module:
    """`load_dual_ar` with int8/int4 linear layers, never holding more than the checkpoint's own bf16 copy.

    The weights are read in bfloat16 (S2's stored dtype) on the CPU, each linear layer is replaced by its int form
    in turn, and only then is the model moved to `device` and cast to the compute `dtype`, so an 8 GB GPU never
    sees the 9 GB bf16 model.
    """
    from s2studio.engine.checkpoints import load_dual_ar

    if mode == "none":
        return load_dual_ar(model_dir, device=device, dtype=dtype, **kwargs)
    model = load_dual_ar(model_dir, device="cpu", dtype=torch.bfloat16, **kwargs)
    quantize_model(model, mode)
    return model.to(device=device, dtype=dtype)


def pack_for_cpu(model: nn.Module) -> None:
    """Switch every Int8Linear of a CPU model to fbgemm's packed kernel (see the module docstring; benchmarks)."""
    for module in model.modules():
        if isinstance(module, Int8Linear):
            module.pack_for_cpu()
