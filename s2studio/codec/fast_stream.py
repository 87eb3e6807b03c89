"""The codec's conv stack streamed for speed, not for bit-identity: the non-exact `IncrementalDecoder`.

The exact streaming decoder (`streaming.py`) pays for rounding like a full decode: row-wise ops on at least
32 frames, every conv input padded past 20,480 elements, the last transposed convs run frame by frame. None of
that changes what a listener hears (a full decode's samples differ from it by float32 rounding only), so the
speeds other than Exact take this path instead:

- every op runs at the push's own size (no padding rows or columns), each transposed conv as one conv;
- activations stay time-major, `(1, T, C)` contiguous, which is oneDNN's channels-last (nwc): its convs then
  read and write them in place instead of reordering each input and output;
- each conv's weights are reordered once into the blocked layout oneDNN picks for its input width
  (`torch.ops.mkldnn._reorder_convolution_weight`, as inductor's freezing does) instead of on every call. That
  layout depends on the width, and a weight packed for one width run at another is reordered again on every
  call, so the stack runs in pieces of exactly `step` frames or of 1 frame, and each conv holds at most two
  packed copies, made on first use (`PACKED_SHARE`).

Where the CPU multiplies bfloat16 natively (AVX512-BF16 or AMX: `native_bf16`, `fast_dtype`; logged, and readable
as `IncrementalDecoder.dtype`) the convs and the linears (the post-module's, the ConvNeXt MLPs') run in bfloat16
through oneDNN: weights packed once in bfloat16, inputs rounded to it, products accumulated in float32 inside
oneDNN. Snake, the norms, attention, the residual streams (transposed convs' outputs are widened back), the
depthwise convs (memory-bound) and the last conv stay float32; each conv keeps its past inputs as it reads them.
Snake runs fused where the engine hands over its C++ op (`CodecOps`; `engine/weights/cpu_codec.cpp`), torch's
elementwise ops otherwise. Elsewhere (`S2STUDIO_CODEC_BF16=0`, or no native bfloat16) the decode is float32; on
other devices the same layout runs through the modules' own convs (no packing). What each choice bought, its
cost in accuracy against a float32 full decode, and what was tried and not used: docs/codec-streaming.md
(`bench/codec_speed.py` prints the figures).
"""

from __future__ import annotations

import logging
import os
import weakref
from typing import Protocol

import torch
from torch import nn

from s2studio.codec.codec import Codec
from s2studio.codec.layers import CausalConv, CausalTransConv, ConvNeXtBlock, Snake1d, snake, stream, with_past

log = logging.getLogger(__name__)

PACKED_SHARE = 0.31
"""The packed copies' memory as a share of the codec's float32 weights (full-size S2 codec, 391 M parameters,
1.57 GB), made on first use (`S2Engine` makes them at load). float32: the decode path's convs (58 M parameters)
for two widths, 466 MB (0.30). bfloat16: the same convs at half the bytes, 233 MB, plus the post-module's and the
upsampling ConvNeXt blocks' linears once (126 M parameters), 252 MB: 485 MB (0.31)."""

ENV_SWITCH = "S2STUDIO_CODEC_BF16"
"""Set to 0 to keep the non-exact decode in float32 on a CPU that could run it in bfloat16."""

_PACKED: weakref.WeakKeyDictionary[nn.Module, dict[tuple[int, torch.dtype], torch.Tensor]] = \
    weakref.WeakKeyDictionary()
"""Per conv or linear module, its weights in oneDNN's layout per input width and dtype (shared by every decoder of
the codec); a linear's do not depend on the width (key 0)."""

_announced: set[str] = set()


class CodecOps(Protocol):
    """Fused ops for the non-exact decode, with the math of the torch code they replace (only the rounding may differ).
    The codec does not know who implements them: the engine passes its C++ kernels (`engine/weights/cpu_codec.py`)
    into `IncrementalDecoder` where they apply (a CPU with the kernels built); without them torch's ops run."""

    def snake(self, x: torch.Tensor, alpha: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        """`layers.snake` over time-major `x (1, T, C)` (float32 or bfloat16, channels contiguous) with `alpha`'s
        C values, in one pass: a contiguous result in `out_dtype` (bfloat16 where a bfloat16 conv reads it next,
        which then rounds nothing itself)."""
        ...


def packing_available(device: torch.device) -> bool:
    """Whether convs on `device` can run from weights packed for oneDNN (the CPU with mkldnn ops built in)."""
    return (device.type == "cpu" and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_convolution_pointwise"))


def native_bf16() -> bool:
    """Whether this CPU has bfloat16 dot-product instructions (AVX512-BF16 or AMX) and oneDNN runs bfloat16.
    oneDNN refuses bfloat16 weights on AVX2 (measured on an AVX2 EPYC, where torch's own bfloat16 conv then ran
    17-200x slower than the packed float32 one) and emulates it on AVX512 CPUs without those instructions (not
    measured, not used)."""
    supported = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    if not torch.backends.mkldnn.is_available() or supported is None or not supported():
        return False
    checks = (getattr(torch.cpu, "_is_avx512_bf16_supported", None), getattr(torch.cpu, "_is_amx_tile_supported", None))
    return any(check is not None and check() for check in checks)


def fast_dtype(device: torch.device) -> torch.dtype:
    """The dtype of the non-exact decode's convs and linears on `device`: bfloat16 (float32 accumulation inside
    oneDNN) where the CPU multiplies it natively, float32 elsewhere or with `S2STUDIO_CODEC_BF16=0`. Logged once
    per outcome, so that a log says which one a machine ran."""
    dtype = torch.float32
    if not packing_available(device):
        why = "no oneDNN convs on this device"
    elif not native_bf16():
        why = "this CPU has no bfloat16 dot products"
    elif os.environ.get(ENV_SWITCH) == "0":
        why = f"{ENV_SWITCH}=0"
    else:
        dtype, why = torch.bfloat16, "this CPU multiplies bfloat16 natively"
    message = f"codec: the non-exact decode multiplies in {str(dtype).removeprefix('torch.')} on {device.type} ({why})"
    if message not in _announced:
        _announced.add(message)
        log.info(message)
    return dtype


def conv_time_major(conv: nn.Conv1d | nn.ConvTranspose1d, x: torch.Tensor,
                    dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """`conv` over time-major `x (1, T, C)` → time-major `(1, T', C')`, from packed weights where possible, in
    `dtype` (the output too: its consumers widen it as they read it)."""
    if not packing_available(x.device):
        return conv(x.transpose(1, 2)).transpose(1, 2)
    x4 = x.to(dtype).transpose(1, 2).unsqueeze(2)  # (1, C, 1, T): a channels-last view of the same memory
    weight = _packed(conv, x4.shape[3], dtype, lambda: _pack(conv, list(x4.shape), dtype))
    if isinstance(conv, nn.ConvTranspose1d):
        y = torch.ops.mkldnn._convolution_transpose_pointwise(
            x4, weight, conv.bias, [0, 0], [0, 0], [1, conv.stride[0]], [1, 1], 1, "none", [], "")
    else:
        y = torch.ops.mkldnn._convolution_pointwise(
            x4, weight, conv.bias, [0, 0], [1, 1], [1, conv.dilation[0]], conv.groups, "none", [], "")
    return y.squeeze(2).transpose(1, 2)


def linear_packed(linear: nn.Linear, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`linear(x)` with its weight packed once in `dtype` and `x` rounded to it; the result in `x`'s dtype."""
    weight = _packed(linear, 0, dtype, lambda: torch.ops.mkldnn._reorder_linear_weight(
        linear.weight.detach().to(dtype), None))
    return torch.ops.mkldnn._linear_pointwise(x.to(dtype), weight, linear.bias, "none", [], "").to(x.dtype)


def _packed(module: nn.Module, width: int, dtype: torch.dtype, pack) -> torch.Tensor:
    copies = _PACKED.setdefault(module, {})
    weight = copies.get((width, dtype))
    if weight is None:
        with torch.inference_mode():
            weight = copies[(width, dtype)] = pack()
    return weight


def _pack(conv: nn.Conv1d | nn.ConvTranspose1d, input_size: list[int], dtype: torch.dtype) -> torch.Tensor:
    weight = conv.weight.unsqueeze(2).to(dtype)  # the 1-D conv as a 2-D one of height 1, as PyTorch runs it
    if conv.padding != (0,) or (conv.groups != 1 and isinstance(conv, nn.ConvTranspose1d)):
        raise TypeError("only unpadded convs (and ungrouped transposed convs) are packed here")
    if isinstance(conv, nn.ConvTranspose1d):
        return torch.ops.mkldnn._reorder_convolution_transpose_weight(
            weight, [0, 0], [0, 0], [1, conv.stride[0]], [1, 1], 1, input_size)
    return torch.ops.mkldnn._reorder_convolution_weight(
        weight, [0, 0], [1, 1], [1, conv.dilation[0]], conv.groups, input_size)


class FastConvStack:
    """The quantizer's upsampling and the decoder, streamed time-major; carries each conv's past inputs.

    `dtype` (default: `fast_dtype` for the codec's device) is that of its convs and of the linears it applies
    (`linear`, also the post-module's) and of the past inputs each conv carries; float32 elsewhere: Snake, the
    norms, the residual sums, the depthwise convs (memory-bound) and the last conv (the waveform's own rounding stays
    float32's).

    `ops` (`CodecOps`, from the engine) runs Snake fused, writing each one's result in the dtype of the conv that
    reads it; without it, torch's `snake`."""

    def __init__(self, codec: Codec, step: int, dtype: torch.dtype | None = None, ops: CodecOps | None = None) -> None:
        if step < 1:
            raise ValueError("step must be at least 1 frame")
        if dtype is None:
            dtype = fast_dtype(codec.device)
        if dtype not in (torch.float32, torch.bfloat16):
            raise ValueError(f"the fast decode runs in float32 or bfloat16, not {dtype}")
        if dtype != torch.float32 and not packing_available(codec.device):
            raise ValueError(f"bfloat16 convs need oneDNN on the CPU, not {codec.device}")
        self.codec, self.step, self.dtype, self.ops = codec, step, dtype, ops
        self._last = codec.decoder.model[-2]  # the conv to one channel before tanh
        self._state: dict[int, torch.Tensor] = {}
        self._snake_dtype = self._snake_outputs()

    def _snake_outputs(self) -> dict[nn.Module, torch.dtype]:
        """Per Snake of the stack, the dtype of the conv that reads its output (each Snake feeds one conv, the
        next module of its `nn.Sequential`): bfloat16 for the bfloat16 convs, float32 for the last conv."""
        found: dict[nn.Module, torch.dtype] = {}
        for seq in (*self.codec.quantizer.upsample.modules(), *self.codec.decoder.modules()):
            if isinstance(seq, nn.Sequential):
                for m, reader in zip(seq, list(seq)[1:]):
                    if isinstance(m, Snake1d) and isinstance(reader, CausalConv | CausalTransConv):
                        found[m] = self._dtype_of(reader)
        return found

    def reset(self) -> None:
        self._state.clear()

    def linear(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        """`layer(x)` in this stack's dtype (`layers.LinearFn`): float32 as the module runs it, bfloat16 packed."""
        return layer(x) if self.dtype == torch.float32 else linear_packed(layer, x, self.dtype)

    def run(self, z: torch.Tensor) -> torch.Tensor:
        """The post-module's output `z (1, D, n)` → `(1, 2048·n, 1)` samples, in pieces of `step` or 1 frames."""
        x = z.transpose(1, 2).contiguous()  # (1, n, D); already so in memory after the post-module
        n, i, pieces = x.shape[1], 0, []
        while i < n:
            k = self.step if n - i >= self.step else 1
            y = stream(self.codec.quantizer.upsample, x[:, i:i + k], self)
            pieces.append(stream(self.codec.decoder.model, y, self))
            i += k
        return torch.cat(pieces, dim=1)

    # -- the leaf ops, as `layers.Streamer`: time-major, at the push's own size ---------------------------------

    def snake(self, m: Snake1d, x: torch.Tensor) -> torch.Tensor:
        if self.ops is None:
            return snake(x, m.alpha.view(1, 1, -1))
        return self.ops.snake(x, m.alpha.view(-1), self._snake_dtype.get(m, torch.float32))

    def pointwise(self, m: ConvNeXtBlock, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return m.pointwise(x.transpose(1, 2), y.transpose(1, 2), self.linear).transpose(1, 2)

    def _dtype_of(self, m: CausalConv | CausalTransConv) -> torch.dtype:
        return torch.float32 if m is self._last or m.conv.groups != 1 else self.dtype

    def conv(self, m: CausalConv, x: torch.Tensor) -> torch.Tensor:
        dtype = self._dtype_of(m)
        x = x.to(dtype)  # before joining the past: the past is kept as the conv reads it, at half the bytes in bf16
        if m.left_pad:
            x = with_past(self._state, m, x, m.left_pad, 1)
        return conv_time_major(m.conv, x, dtype)

    def trans_conv(self, m: CausalTransConv, x: torch.Tensor) -> torch.Tensor:
        """The outputs are widened to float32: each starts a residual stream (of ConvNeXt or residual units),
        which stays float32 throughout (a bfloat16 stream would round every sum to 8 bits)."""
        n, s, dtype = x.shape[1], m.stride, self._dtype_of(m)
        x = x.to(dtype)
        if m.crop == 0:  # kernel == stride: exactly n·s outputs, nothing to carry
            return conv_time_major(m.conv, x, dtype).float()
        # with the previous input frame in front, outputs s … s + n·s are the new frames' (kernel 2·stride)
        return conv_time_major(m.conv, with_past(self._state, m, x, 1, 1), dtype)[:, s: s + n * s].float()
