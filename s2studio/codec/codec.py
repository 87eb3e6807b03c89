"""S2 Pro's codec (a modified 44.1 kHz DAC): mono float32 audio ⇄ codes `(B, 10, T)`, 2048 samples per frame.

Math only; reading `codec.pth` is `loading.py`, frame-by-frame decoding is `streaming.py`. Module names follow
upstream's so that checkpoint keys map one to one (spec s2-codec.md §2, §4).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn
from torch.nn import functional as F

from s2studio.codec.config import S2, CodecConfig
from s2studio.codec.layers import (CausalConv, CausalTransConv, ResidualUnit, Snake1d, Streamer, WindowLimitedTransformer,
                                   stream)
from s2studio.codec.quantize import DownsampleRVQ
from s2studio.errors import UserError


@contextlib.contextmanager
def strict_fp32(device: torch.device) -> Iterator[None]:
    """True float32 for encoding: no autocast, and on CUDA no TF32 in convs or matmuls (PyTorch enables TF32
    convs by default, which rounds inputs to 10 mantissa bits and changes codes)."""
    with torch.autocast(device.type, enabled=False):
        if device.type != "cuda":
            yield
            return
        matmul = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
                yield
        finally:
            torch.backends.cuda.matmul.allow_tf32 = matmul


class EncoderBlock(nn.Module):
    """Three residual units at `dim/2`, Snake, a strided conv to `dim`, then (last block only) a transformer."""

    def __init__(self, dim: int, stride: int, n_layers: int, c: CodecConfig) -> None:
        super().__init__()
        transformer: nn.Module = nn.Identity()
        if n_layers:  # upstream hard-codes 64-wide heads and a 3× FFN here
            transformer = WindowLimitedTransformer(dim, n_layers, dim // c.head_dim, c.head_dim, dim * 3,
                                                   c.encoder_window, c.rope_base, c.norm_eps)
        half = dim // 2
        self.block = nn.Sequential(ResidualUnit(half, 1), ResidualUnit(half, 3), ResidualUnit(half, 9),
                                   Snake1d(half), CausalConv(half, dim, 2 * stride, stride=stride), transformer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class Encoder(nn.Module):
    def __init__(self, c: CodecConfig) -> None:
        super().__init__()
        dim = c.encoder_dim
        blocks: list[nn.Module] = [CausalConv(1, dim, 7)]
        for stride, n_layers in zip(c.encoder_rates, c.encoder_transformer_layers, strict=True):
            dim *= 2
            blocks.append(EncoderBlock(dim, stride, n_layers, c))
        blocks += [Snake1d(dim), CausalConv(dim, c.latent_dim, 3)]
        self.block = nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class DecoderBlock(nn.Module):
    """Snake, a transposed conv up by `stride` (kernel 2·stride, cropped right), three residual units."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.block = nn.Sequential(Snake1d(cin), CausalTransConv(cin, cout, 2 * stride, stride),
                                   ResidualUnit(cout, 1), ResidualUnit(cout, 3), ResidualUnit(cout, 9))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)

    def stream_step(self, x: torch.Tensor, streamer: Streamer) -> torch.Tensor:
        return stream(self.block, x, streamer)


class Decoder(nn.Module):
    def __init__(self, c: CodecConfig) -> None:
        super().__init__()
        dim = c.decoder_dim
        layers: list[nn.Module] = [CausalConv(c.latent_dim, dim, 7)]
        for i, stride in enumerate(c.decoder_rates):
            layers.append(DecoderBlock(dim // 2**i, dim // 2 ** (i + 1), stride))
        out = dim // 2 ** len(c.decoder_rates)
        layers += [Snake1d(out), CausalConv(out, 1, 7), nn.Tanh()]
        self.model = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


class Codec(nn.Module):
    """Encoder, quantizer and decoder. Inference only: call under `torch.inference_mode()` (the methods do)."""

    def __init__(self, config: CodecConfig = S2) -> None:
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.quantizer = DownsampleRVQ(config)
        self.decoder = Decoder(config)

    @property
    def sample_rate(self) -> int:
        return self.config.sample_rate

    @property
    def frame_length(self) -> int:
        return self.config.frame_length

    @property
    def device(self) -> torch.device:
        return self.decoder.model[0].conv.weight.device

    @torch.inference_mode()
    def encode(self, audio: torch.Tensor) -> torch.Tensor:
        """`audio (B, 1, N)` float32 at 44.1 kHz → codes `(B, 10, ceil(N / 2048))` int64.

        Right-padded with zeros to whole frames first (only the last frame's codes see the padding: the
        network is causal). Run in float32 even on a GPU: bf16 encoding changes 6–21 % of the codes (§7.4)."""
        if audio.ndim == 2:
            audio = audio.unsqueeze(1)
        if audio.ndim != 3 or audio.shape[1] != 1:
            raise ValueError(f"expected audio (B, 1, N), got {tuple(audio.shape)}")
        n = audio.shape[-1]
        if n == 0:
            return torch.zeros(audio.shape[0], self.config.n_codes, 0, dtype=torch.long, device=self.device)
        audio = F.pad(audio.to(self.device, torch.float32), (0, -n % self.frame_length))
        with strict_fp32(audio.device):
            return self.quantizer.encode(self.encoder(audio))

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes `(B, 10, T)` → audio `(B, 1, 2048·T)` float32 in [-1, 1].

        Codes above a codebook's size are clamped as upstream does, but on a copy: the caller's tensor is
        left as it was (upstream modifies it in place)."""
        codes = self.check_codes(codes)
        if codes.shape[-1] == 0:
            return torch.zeros(codes.shape[0], 1, 0, device=self.device)
        return self.decoder(self.quantizer.decode(self.quantizer.clamp(codes)))

    def check_codes(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes as `(B, 10, T)` int64 on the codec's device, or a UserError saying what is wrong."""
        if codes.ndim == 2:
            codes = codes.unsqueeze(0)
        if codes.ndim != 3 or codes.shape[1] != self.config.n_codes:
            raise UserError(f"codes must have shape ({self.config.n_codes}, frames), got {tuple(codes.shape)}")
        if codes.dtype.is_floating_point or codes.dtype == torch.bool:
            raise UserError(f"codes must be integers, got {codes.dtype}")
        if codes.numel() and int(codes.min()) < 0:
            raise UserError("codes contain negative values; they are not codes this codec produced")
        return codes.to(device=self.device, dtype=torch.long)
