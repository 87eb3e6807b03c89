"""The codec's architecture as numbers.

The real `codec.pth` ships no configuration (upstream hard-codes `modded_dac_vq.yaml`), so the default of
`CodecConfig` *is* S2's codec. `TINY` keeps every structural feature (all strides and kernel sizes, so all the
padding and cropping arithmetic; both kinds of transformer, 10 codebooks, the (10, T) layout) at ~2.5 M
parameters, so the test suite never needs the 1.5 GB file (spec s2-codec.md §12).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from s2studio.audio import SAMPLE_RATE


@dataclass(frozen=True)
class CodecConfig:
    """Hyper-parameters of the modified DAC. Tied fields (spec §12.1) are derived, not stored."""

    sample_rate: int = SAMPLE_RATE
    encoder_dim: int = 64
    encoder_rates: tuple[int, ...] = (2, 4, 8, 8)
    encoder_transformer_layers: tuple[int, ...] = (0, 0, 0, 4)
    encoder_window: int = 512  # upstream always falls back to 512
    decoder_dim: int = 1536
    decoder_rates: tuple[int, ...] = (8, 8, 4, 2)
    n_codebooks: int = 9
    codebook_size: int = 1024
    semantic_codebook_size: int = 4096
    codebook_dim: int = 8
    downsample_factor: tuple[int, ...] = (2, 2)
    quantizer_layers: int = 8
    quantizer_heads: int = 16
    quantizer_head_dim: int = 64
    quantizer_intermediate: int = 3072
    quantizer_window: int = 128
    head_dim: int = 64  # the encoder transformer's (hard-coded upstream: n_head = dim // 64)
    rope_base: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def latent_dim(self) -> int:
        """Upstream leaves `latent_dim` unset, so it is `encoder_dim · 2^len(encoder_rates)`."""
        return self.encoder_dim * 2 ** len(self.encoder_rates)

    @property
    def hop_length(self) -> int:
        return math.prod(self.encoder_rates)

    @property
    def frame_length(self) -> int:
        """Samples per code frame; the factor 4 is the quantizer's down-sampling (hard-coded upstream)."""
        return self.hop_length * math.prod(self.downsample_factor)

    @property
    def n_codes(self) -> int:
        """Codebooks per frame: one semantic plus the residual ones."""
        return 1 + self.n_codebooks

    def describe(self) -> str:
        """A stable text form, part of the codec fingerprint."""
        return repr(self)


S2 = CodecConfig()
"""S2 Pro's codec (`modded_dac_vq.yaml`)."""

TINY = CodecConfig(
    encoder_dim=8,
    encoder_transformer_layers=(0, 0, 0, 1),
    decoder_dim=128,
    codebook_size=32,
    semantic_codebook_size=64,
    quantizer_layers=2,
    quantizer_heads=2,
    quantizer_head_dim=64,
    quantizer_intermediate=384,
    quantizer_window=4,
)
"""Spec §12.2 "tiny-S2": latent 128, 2-head transformers, window 4 frames for the quantizer's (so a window is
exercised from 5 frames on), window 512 for the encoder's (as upstream hard-codes it)."""

KNOWN = {"s2": S2, "tiny": TINY}
"""Architectures `load_codec` recognises from a checkpoint's shapes."""
