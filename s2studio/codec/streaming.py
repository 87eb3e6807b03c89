"""Decoding frame by frame as the language model produces them, without ever re-decoding the past.

Decode is causal at the frame level: the 2048 samples of frame t depend on codes ≤ t only (spec s2-codec.md
§10.1). So each `push` runs only the new frames through the network, carrying just enough state:

- `post_module` (the only long-range part): one rolling key/value cache per layer of the last `window - 1`
  frames, with the new frames at their absolute positions (RoPE's bf16 table makes positions matter, §10.4);
- every causal conv of the decode path (stride 1): its last `kernel_span - 1` inputs, which take the place of
  the zero padding a full decode sees at the start;
- every transposed conv with kernel 2·stride: its previous input frame (output n needs inputs ⌊n/s⌋−1 and
  ⌊n/s⌋);
- VQ lookups, Snake, the ConvNeXt MLPs and tanh are pointwise in time and need nothing.

The work per frame is therefore bounded by the window, whatever the length already decoded (the same FLOPs per
one-frame push at frame 10, 100 and 1000).

The samples equal a full decode's, bit for bit wherever the full decode itself is consistent. PyTorch's CPU
kernels round by shape (spec §10.4): a 1-row GEMM is a GEMV, a conv under 20,480 input elements takes the
native kernel instead of oneDNN, RMSNorm's mean takes a scalar path on leftover rows, SDPA blocks its keys by
their count, oneDNN's transposed conv blocks by width. So every streaming op runs at a shape that rounds like
a long decode (ROW_BLOCK, NATIVE_CONV_LIMIT, `layers.KEY_SPLIT`, the transposed convs' width); the extra rows
and columns are zeros after the real ones, which causality keeps out of the real outputs. What still differs is
what no streaming decoder can know in advance, because the full decode depends on its own length T (its last
`T mod 32` frames, SDPA's block boundaries, the widths where oneDNN's transposed conv rounds unlike most).
docs/codec-streaming.md keeps what was measured, on which machines, and what was tried and not used.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from s2studio.codec.codec import Codec
from s2studio.codec.fast_stream import CodecOps, FastConvStack
from s2studio.codec.layers import CausalConv, CausalTransConv, ConvNeXtBlock, KVCache, Snake1d, stream, with_past


class IncrementalDecoder:
    """`push(codes (10, n))` → the `2048·n` samples of those frames, at once. One sequence (batch 1).

    `exact=False` drops the rounding rules below for speed (`fast_stream.py`: every op at the push's own size,
    the conv stack time-major from weights packed once, in pieces of `step` or 1 frames), and multiplies in
    bfloat16 where the CPU does so natively (`dtype`): in float32 the samples differ from a full decode's by
    float32 rounding, 1 LSB of PCM16 on 0.07-0.44 % of them, never more (measured on the tiny and the full-size
    codec; tested against the issue's 1 %); in bfloat16 by an SNR of 41-43 dB, above the 38-40 dB of upstream's
    own CPU server decode (bf16 autocast). The speeds other than Exact decode so."""

    def __init__(self, codec: Codec, exact: bool = True, step: int = 4, dtype: torch.dtype | None = None,
                 ops: CodecOps | None = None) -> None:
        """`dtype`: the non-exact decode's (`FastConvStack`; default: what this machine runs best); `ops`: its fused
        ops (`fast_stream.CodecOps`, the engine's C++ Snake), None for torch's. The exact decode takes neither."""
        self.codec = codec
        self.exact = exact
        self.frames = 0
        self._state: dict[int, torch.Tensor] = {}
        self._kv = [KVCache() for _ in codec.quantizer.post_module.layers]
        self._push_frames = 0  # code frames of the push under way (`_trans_conv` windows by them)
        if exact and dtype not in (None, torch.float32):
            raise ValueError("the exact decode runs in float32")
        if exact and ops is not None:
            raise ValueError("the exact decode runs torch's own ops")
        self._fast = None if exact else FastConvStack(codec, step, dtype, ops)

    @property
    def dtype(self) -> torch.dtype:
        """What the convs and linears multiply in: float32 (exact, or the CPU has no native bfloat16) or bfloat16."""
        return torch.float32 if self._fast is None else self._fast.dtype

    def reset(self) -> None:
        """Forget everything: the next push starts a new sequence at frame 0."""
        self.frames = 0
        self._state.clear()
        self._kv = [KVCache() for _ in self.codec.quantizer.post_module.layers]
        if self._fast is not None:
            self._fast.reset()

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
        if self._fast is not None:  # non-exact: no padding rows, the fast conv stack
            z = q.post_module.step(q.lookup(q.clamp(codes_t)), self.frames, self._kv, exact=False,
                                   linear=self._fast.linear)
            audio = self._fast.run(z)
            self.frames += n
            return audio.reshape(-1).to("cpu", torch.float32).numpy().copy()
        rows = -(-n // ROW_BLOCK) * ROW_BLOCK
        z = q.lookup(_pad_time(q.clamp(codes_t), rows))  # padded with code-0 frames
        z = q.post_module.step(z, self.frames, self._kv, new=n)[..., :n]
        self._push_frames = n
        z = stream(q.upsample, z, self)
        audio = stream(self.codec.decoder.model, z, self)
        self.frames += n
        return audio.reshape(-1).to("cpu", torch.float32).numpy().copy()

    # -- the leaf ops, as `layers.Streamer`: at shapes that round like a long decode ----------------------------

    def conv(self, m: CausalConv, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[-1]
        if m.left_pad:
            x = with_past(self._state, m, x, m.left_pad, -1)
        return m.conv(_wide(x))[..., :n].contiguous()

    def trans_conv(self, m: CausalTransConv, x: torch.Tensor) -> torch.Tensor:
        n, s = x.shape[-1], m.stride
        if m.crop == 0:  # kernel == stride: every output frame depends on one input frame
            return m.conv(_wide(x))[..., :n * s].contiguous()
        # One code frame per batch row: its `per` inputs after the one before. oneDNN's transposed conv rounds
        # by the width it is given (its blocking follows the width), and one code frame's width gives the
        # rounding most long full decodes get, whatever the chunk size (measured on every decoder shape).
        per = n // self._push_frames
        windows = with_past(self._state, m, x, 1, -1)[0].unfold(-1, per + 1, per).transpose(0, 1).contiguous()
        y = m.conv(_wide(windows))[..., s: s + per * s]  # (frames, out channels, per·s)
        return y.transpose(0, 1).reshape(1, -1, n * s)

    def snake(self, m: Snake1d, x: torch.Tensor) -> torch.Tensor:
        return m(x)

    def pointwise(self, m: ConvNeXtBlock, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        n = x.shape[-1]
        return m.pointwise(_pad_time(x, ROW_BLOCK), _pad_time(y, ROW_BLOCK))[..., :n]

ROW_BLOCK = 32
"""The streaming path runs every row-wise op on a multiple of 32 frames (at least 32), padding short pushes with
zero frames after the real ones and dropping the extra outputs. Two CPU kernels round a row differently when
the matrix is short: a GEMM with few rows (a 1-row `F.linear` is a GEMV; with S2's widths rows agree with a
long pass's from 16 rows on), and the mean of RMSNorm over the transposed layout, which is vectorised across
rows in groups of 32 with a different leftover path. Causality makes the padding invisible to the real
frames. The price is in one-frame pushes: at full size 15.3 GFLOP instead of 6.8 (measured 1.4-2x the time on
one CPU thread, the transformer's GEMMs at 32 rows); pushes of 8 frames or more cost what they did."""

NATIVE_CONV_LIMIT = 20480
"""PyTorch's CPU conv picks its kernel by size (`ConvParams::use_mkldnn`): for a batch-1 1-D conv of at most
20,480 input elements it takes the native im2col+GEMM kernel (a GEMV at width 1), above it oneDNN, and the two
round differently. A full decode of more than a few frames is above it in every layer, so every streaming conv
input is zero-padded on the right past it; oneDNN's output columns do not depend on the width, and the padding
only reaches outputs that are cut off (the convs are causal)."""


def _pad_time(x: torch.Tensor, width: int) -> torch.Tensor:
    """`x (B, C, T)` with zero frames appended up to `width` frames (unchanged if already that long)."""
    return F.pad(x, (0, width - x.shape[-1])) if x.shape[-1] < width else x


def _wide(x: torch.Tensor) -> torch.Tensor:
    """A conv input padded past `NATIVE_CONV_LIMIT` elements, so the conv runs the kernel a full decode runs."""
    return _pad_time(x, NATIVE_CONV_LIMIT // x.shape[1] + 1)  # per batch row: the width is what counts


def decode_in_chunks(codec: Codec, codes: np.ndarray | torch.Tensor, chunk: int, exact: bool = True,
                     dtype: torch.dtype | None = None, ops: CodecOps | None = None) -> np.ndarray:
    """Decode `(10, T)` codes `chunk` frames at a time through one `IncrementalDecoder`; 1-D float32 samples."""
    if chunk < 1:
        raise ValueError("chunk must be at least 1 frame")
    decoder = IncrementalDecoder(codec, exact=exact, step=chunk, dtype=dtype, ops=ops)
    codes_t = torch.as_tensor(np.asarray(codes) if not isinstance(codes, torch.Tensor) else codes)
    parts = [decoder.push(codes_t[..., i: i + chunk]) for i in range(0, codes_t.shape[-1], chunk)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
