"""Decoding frame by frame as the language model produces them, without ever re-decoding the past.

Decode is causal at the frame level: the 2048 samples of frame t depend on codes ≤ t only (spec s2-codec.md
§10.1). So each `push` runs only the new frames through the network, carrying just enough state:

- `post_module` (the only long-range part): one rolling key/value cache per layer of the last `window - 1`
  frames, with the new frames at their absolute positions (RoPE's bf16 table makes positions matter, §10.4);
- every causal conv of the decode path (stride 1): its last `kernel_span - 1` inputs, which take the place of
  the zero padding a full decode sees at the start;
- every transposed conv with kernel 2·stride: its previous input frame (output n needs inputs ⌊n/s⌋−1, ⌊n/s⌋);
- VQ lookups, Snake, the ConvNeXt MLPs and tanh are pointwise in time and need nothing.

The work per frame is therefore bounded by the window, whatever the length already decoded (6.8 GFLOP per
one-frame push at full size, the same at frame 10, 100 and 1000). The samples equal a full decode up to float
rounding, not bitwise: kernels of other shapes round differently, and upstream's own full decode is not
bit-stable in the sequence length either (§10.4). Measured on random full-size weights: max |Δ| 7e-7, and
1 LSB on ~0.4 % of PCM16 samples, for chunks of 1 and 5 frames.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from s2studio.codec.codec import Codec, DecoderBlock
from s2studio.codec.layers import CausalConv, CausalTransConv, ConvNeXtBlock, KVCache, ResidualUnit, Snake1d


class IncrementalDecoder:
    """`push(codes (10, n))` → the `2048·n` samples of those frames, at once. One sequence (batch 1)."""

    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        self.frames = 0
        self._state: dict[int, torch.Tensor] = {}
        self._kv = [KVCache() for _ in codec.quantizer.post_module.layers]

    def reset(self) -> None:
        """Forget everything: the next push starts a new sequence at frame 0."""
        self.frames = 0
        self._state.clear()
        self._kv = [KVCache() for _ in self.codec.quantizer.post_module.layers]

    @torch.inference_mode()
    def push(self, codes: np.ndarray | torch.Tensor) -> np.ndarray:
        codes_t = torch.as_tensor(np.asarray(codes) if not isinstance(codes, torch.Tensor) else codes)
        codes_t = self.codec.check_codes(codes_t)
        if codes_t.shape[0] != 1:
            raise ValueError("IncrementalDecoder decodes one sequence; push codes of shape (10, n)")
        n = codes_t.shape[-1]
        if n == 0:
            return np.zeros(0, dtype=np.float32)
        q = self.codec.quantizer
        z = q.lookup(q.clamp(codes_t))
        z = q.post_module.step(z, self.frames, self._kv)
        z = self._run(q.upsample, z)
        audio = self._run(self.codec.decoder.model, z)
        self.frames += n
        return audio.reshape(-1).to("cpu", torch.float32).numpy().copy()

    def _run(self, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """`module(x)` for the new frames `x`, using and updating the carried state."""
        if isinstance(module, nn.Sequential):
            for child in module:
                x = self._run(child, x)
            return x
        if isinstance(module, ResidualUnit):
            return x + self._run(module.block, x)
        if isinstance(module, DecoderBlock):
            return self._run(module.block, x)
        if isinstance(module, ConvNeXtBlock):
            return module.pointwise(x, self._run(module.dwconv, x))
        if isinstance(module, CausalConv):
            return self._conv(module, x)
        if isinstance(module, CausalTransConv):
            return self._trans_conv(module, x)
        if isinstance(module, (Snake1d, nn.Tanh)):
            return module(x)
        raise TypeError(f"no streaming rule for {type(module).__name__}")

    def _conv(self, m: CausalConv, x: torch.Tensor) -> torch.Tensor:
        if m.stride != 1:
            raise TypeError("strided causal convs are not on the decode path")
        if m.left_pad == 0:
            return m.conv(x).contiguous()
        past = self._state.get(id(m))
        if past is None:  # a full decode's zero padding
            past = x.new_zeros(x.shape[0], x.shape[1], m.left_pad)
        xx = torch.cat([past, x], dim=-1)
        self._state[id(m)] = xx[..., -m.left_pad:].clone()  # not a view: xx may be large
        return m.conv(xx).contiguous()

    def _trans_conv(self, m: CausalTransConv, x: torch.Tensor) -> torch.Tensor:
        if m.crop == 0:  # kernel == stride: every output frame depends on one input frame
            return m(x)
        if m.crop != m.stride:
            raise TypeError("transposed convs with kernel other than stride or 2·stride are not streamable here")
        past = self._state.get(id(m))
        if past is None:
            past = x.new_zeros(x.shape[0], x.shape[1], 1)
        self._state[id(m)] = x[..., -1:].clone()
        y = m.conv(torch.cat([past, x], dim=-1))
        s = m.stride
        return y[..., s: s + x.shape[-1] * s].contiguous()


def decode_in_chunks(codec: Codec, codes: np.ndarray | torch.Tensor, chunk: int) -> np.ndarray:
    """Decode `(10, T)` codes `chunk` frames at a time through one `IncrementalDecoder`; 1-D float32 samples."""
    if chunk < 1:
        raise ValueError("chunk must be at least 1 frame")
    decoder = IncrementalDecoder(codec)
    codes_t = torch.as_tensor(np.asarray(codes) if not isinstance(codes, torch.Tensor) else codes)
    parts = [decoder.push(codes_t[..., i: i + chunk]) for i in range(0, codes_t.shape[-1], chunk)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
