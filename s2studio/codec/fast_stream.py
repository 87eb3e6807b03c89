"""The codec's conv stack streamed for speed, not for bit-identity: the non-exact `IncrementalDecoder`.

The exact streaming decoder (`streaming.py`) pays for rounding like a full decode: row-wise ops on at least
32 frames, every conv input padded past 20,480 elements, the last transposed convs run frame by frame. None of
that changes what a listener hears (a full decode's samples differ from it by float32 rounding only), so the
speeds other than Exact take this path instead, measured on a 2-core AVX2 EPYC (bench/codec_speed.py):

- every op runs at the push's own size (no padding rows or columns), each transposed conv as one conv;
- activations stay time-major, `(1, T, C)` contiguous, which is oneDNN's channels-last (nwc): its convs then
  read and write them in place instead of reordering each input and output;
- each conv's weights are reordered once into the blocked layout oneDNN picks for its input width
  (`torch.ops.mkldnn._reorder_convolution_weight`, as inductor's freezing does) instead of on every call. Today
  that reorder is paid per call and dominates the large-weight convs at streaming widths (the first conv, 44
  MB, and the first transposed conv, 75 MB: 4-7x their compute). oneDNN's layout depends on the width (its
  blocking of the output channels follows it), and a weight packed for one width run at another is reordered
  again on every call, sometimes through a slow path (measured: 3 s for one conv); so the stack runs in pieces
  of exactly `step` frames or of 1 frame, and each conv holds at most two packed copies, made on first use
  (full-size S2 codec: 233 MB per width).

bf16 and int8 weights were measured and not kept: this CPU has no bf16 or VNNI instructions, oneDNN's bf16
convs there are emulated (tens of times slower), and int8 would need quantized activations, far more than
one LSB off. On other devices the same layout runs through the modules' own convs (no packing).
"""

from __future__ import annotations

import weakref

import torch
from torch import nn

from s2studio.codec.codec import Codec, DecoderBlock
from s2studio.codec.layers import CausalConv, CausalTransConv, ConvNeXtBlock, ResidualUnit, Snake1d, snake

_PACKED: weakref.WeakKeyDictionary[nn.Module, dict[int, torch.Tensor]] = weakref.WeakKeyDictionary()
"""Per conv module, its weights in oneDNN's layout per input width (shared by every decoder of the codec)."""


def packing_available(device: torch.device) -> bool:
    """Whether convs on `device` can run from weights packed for oneDNN (the CPU with mkldnn ops built in)."""
    return (device.type == "cpu" and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_convolution_pointwise"))


def conv_time_major(conv: nn.Conv1d | nn.ConvTranspose1d, x: torch.Tensor) -> torch.Tensor:
    """`conv` over time-major `x (1, T, C)` → time-major `(1, T', C')`, from packed weights where possible."""
    if not packing_available(x.device):
        return conv(x.transpose(1, 2)).transpose(1, 2)
    x4 = x.transpose(1, 2).unsqueeze(2)  # (1, C, 1, T): a channels-last view of the same memory
    packed = _PACKED.setdefault(conv, {})
    weight = packed.get(x.shape[1])
    if weight is None:
        weight = packed[x.shape[1]] = _pack(conv, list(x4.shape))
    if isinstance(conv, nn.ConvTranspose1d):
        y = torch.ops.mkldnn._convolution_transpose_pointwise(
            x4, weight, conv.bias, [0, 0], [0, 0], [1, conv.stride[0]], [1, 1], 1, "none", [], "")
    else:
        y = torch.ops.mkldnn._convolution_pointwise(
            x4, weight, conv.bias, [0, 0], [1, 1], [1, conv.dilation[0]], conv.groups, "none", [], "")
    return y.squeeze(2).transpose(1, 2)


@torch.inference_mode()
def _pack(conv: nn.Conv1d | nn.ConvTranspose1d, input_size: list[int]) -> torch.Tensor:
    weight = conv.weight.unsqueeze(2)  # the 1-D conv as a 2-D one of height 1, as PyTorch runs it
    if conv.padding != (0,) or conv.groups != 1 and isinstance(conv, nn.ConvTranspose1d):
        raise TypeError("only unpadded convs (and ungrouped transposed convs) are packed here")
    if isinstance(conv, nn.ConvTranspose1d):
        return torch.ops.mkldnn._reorder_convolution_transpose_weight(
            weight, [0, 0], [0, 0], [1, conv.stride[0]], [1, 1], 1, input_size)
    return torch.ops.mkldnn._reorder_convolution_weight(
        weight, [0, 0], [1, 1], [1, conv.dilation[0]], conv.groups, input_size)


class FastConvStack:
    """The quantizer's upsampling and the decoder, streamed time-major; carries each conv's past inputs."""

    def __init__(self, codec: Codec, step: int) -> None:
        if step < 1:
            raise ValueError("step must be at least 1 frame")
        self.codec, self.step = codec, step
        self._state: dict[int, torch.Tensor] = {}

    def reset(self) -> None:
        self._state.clear()

    def run(self, z: torch.Tensor) -> torch.Tensor:
        """The post-module's output `z (1, D, n)` → `(1, 2048·n, 1)` samples, in pieces of `step` or 1 frames."""
        x = z.transpose(1, 2).contiguous()  # (1, n, D); already so in memory after the post-module
        n, i, pieces = x.shape[1], 0, []
        while i < n:
            k = self.step if n - i >= self.step else 1
            y = self._run(self.codec.quantizer.upsample, x[:, i:i + k])
            pieces.append(self._run(self.codec.decoder.model, y))
            i += k
        return torch.cat(pieces, dim=1)

    def _run(self, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if isinstance(module, nn.Sequential):
            for child in module:
                x = self._run(child, x)
            return x
        if isinstance(module, ResidualUnit):
            return x + self._run(module.block, x)
        if isinstance(module, DecoderBlock):
            return self._run(module.block, x)
        if isinstance(module, ConvNeXtBlock):
            y = self._run(module.dwconv, x)
            return module.pointwise(x.transpose(1, 2), y.transpose(1, 2)).transpose(1, 2)
        if isinstance(module, CausalConv):
            return self._conv(module, x)
        if isinstance(module, CausalTransConv):
            return self._trans_conv(module, x)
        if isinstance(module, Snake1d):
            return snake(x, module.alpha.view(1, 1, -1))
        if isinstance(module, nn.Tanh):
            return module(x)
        raise TypeError(f"no streaming rule for {type(module).__name__}")

    def _conv(self, m: CausalConv, x: torch.Tensor) -> torch.Tensor:
        if m.stride != 1:
            raise TypeError("strided causal convs are not on the decode path")
        if m.left_pad:
            past = self._state.get(id(m))
            if past is None:  # a full decode's zero padding
                past = x.new_zeros(x.shape[0], m.left_pad, x.shape[2])
            x = torch.cat([past, x], dim=1)
            self._state[id(m)] = x[:, -m.left_pad:].clone()
        return conv_time_major(m.conv, x)

    def _trans_conv(self, m: CausalTransConv, x: torch.Tensor) -> torch.Tensor:
        n, s = x.shape[1], m.stride
        if m.crop == 0:  # kernel == stride: exactly n·s outputs, nothing to carry
            return conv_time_major(m.conv, x)
        if m.crop != m.stride:
            raise TypeError("transposed convs with kernel other than stride or 2·stride are not streamable here")
        past = self._state.get(id(m))
        if past is None:
            past = x.new_zeros(x.shape[0], 1, x.shape[2])
        self._state[id(m)] = x[:, -1:].clone()
        # with the previous input frame in front, outputs s … s + n·s are the new frames' (kernel 2·stride)
        return conv_time_major(m.conv, torch.cat([past, x], dim=1))[:, s: s + n * s]
