"""The quantizer: latent (86 Hz) ⇄ 10 codes per frame (21.5 Hz), as upstream's `DownsampleResidualVectorQuantize`
with descript-audio-codec's factorised cosine vector quantizers (spec s2-codec.md §3.9).

Encode: 2× (causal conv k2 s2 + ConvNeXt) → `pre_module` transformer → semantic VQ (codebook 0) → 9 residual
VQs on what the semantic one left. Decode: codebook lookups summed → `post_module` → 2× (transposed conv k2 s2 +
ConvNeXt). The `out_proj` of each VQ is a k1 conv (not `F.linear`): the conv kernel rounds differently.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from s2studio.codec.config import CodecConfig
from s2studio.codec.layers import CausalConv, CausalTransConv, ConvNeXtBlock, WindowLimitedTransformer


class VectorQuantize(nn.Module):
    """Project to `codebook_dim`, pick the nearest entry by cosine, project the raw entry back."""

    def __init__(self, dim: int, codebook_size: int, codebook_dim: int) -> None:
        super().__init__()
        self.in_proj = nn.Conv1d(dim, codebook_dim, 1)
        self.out_proj = nn.Conv1d(codebook_dim, dim, 1)
        # The loader builds the codec on the meta device, where torch's default normal_ init would import
        # torch._dynamo (~4 s) for values the checkpoint replaces anyway: skip the init there.
        weight = torch.empty(codebook_size, codebook_dim)
        if not weight.is_meta:
            nn.init.normal_(weight)
        self.codebook = nn.Embedding(codebook_size, codebook_dim, _weight=weight)

    def encode(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`(out_proj(quantized), indices (B, T))`, with the three-term distance evaluated left to right and the
        straight-through expression kept: both round like upstream's."""
        z_e = self.in_proj(z)
        enc = F.normalize(z_e.permute(0, 2, 1).reshape(-1, z_e.shape[1]))
        book = F.normalize(self.codebook.weight)
        dist = enc.pow(2).sum(1, keepdim=True) - 2 * enc @ book.t() + book.pow(2).sum(1, keepdim=True).t()
        indices = (-dist).max(1)[1].reshape(z_e.shape[0], -1)
        z_q = self.lookup(indices)
        z_q = z_e + (z_q - z_e)
        return self.out_proj(z_q), indices

    def lookup(self, indices: torch.Tensor) -> torch.Tensor:
        """`(B, T)` indices → raw entries `(B, codebook_dim, T)`."""
        return F.embedding(indices, self.codebook.weight).transpose(1, 2)


class ResidualVectorQuantize(nn.Module):
    def __init__(self, dim: int, n_codebooks: int, codebook_size: int, codebook_dim: int) -> None:
        super().__init__()
        self.codebook_size = codebook_size
        self.quantizers = nn.ModuleList(VectorQuantize(dim, codebook_size, codebook_dim)
                                        for _ in range(n_codebooks))

    def encode(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`(sum of the stages' outputs, codes (B, n, T))`; each stage quantizes what the previous ones left."""
        total: torch.Tensor | float = 0
        residual = z
        codes = []
        for vq in self.quantizers:
            out, idx = vq.encode(residual)
            total = total + out
            residual = residual - out
            codes.append(idx)
        assert isinstance(total, torch.Tensor)
        return total, torch.stack(codes, dim=1)

    def from_codes(self, codes: torch.Tensor) -> torch.Tensor:
        """Sum of `out_proj(entry)` over the codebooks, starting from 0.0 in upstream's order."""
        total: torch.Tensor | float = 0.0
        for i, vq in enumerate(self.quantizers):
            total = total + vq.out_proj(vq.lookup(codes[:, i, :]))
        assert isinstance(total, torch.Tensor)
        return total


class DownsampleRVQ(nn.Module):
    """Upstream's `DownsampleResidualVectorQuantize` at inference (no dropout, no losses)."""

    def __init__(self, c: CodecConfig) -> None:
        super().__init__()
        d = c.latent_dim
        self.semantic_quantizer = ResidualVectorQuantize(d, 1, c.semantic_codebook_size, c.codebook_dim)
        self.quantizer = ResidualVectorQuantize(d, c.n_codebooks, c.codebook_size, c.codebook_dim)
        self.downsample = nn.Sequential(*(nn.Sequential(CausalConv(d, d, f, stride=f), ConvNeXtBlock(d))
                                          for f in c.downsample_factor))
        self.upsample = nn.Sequential(*(nn.Sequential(CausalTransConv(d, d, f, stride=f), ConvNeXtBlock(d))
                                        for f in reversed(c.downsample_factor)))

        def transformer() -> WindowLimitedTransformer:
            return WindowLimitedTransformer(d, c.quantizer_layers, c.quantizer_heads, c.quantizer_head_dim,
                                            c.quantizer_intermediate, c.quantizer_window, c.rope_base, c.norm_eps)

        self.pre_module = transformer()
        self.post_module = transformer()

    def encode(self, latent: torch.Tensor) -> torch.Tensor:
        """Encoder latent `(B, D, 4T)` → codes `(B, 10, T)` int64 (upstream's wasted post/upsample pass skipped)."""
        z = self.pre_module(self.downsample(latent))
        semantic_out, semantic_codes = self.semantic_quantizer.encode(z)
        _, codes = self.quantizer.encode(z - semantic_out)
        return torch.cat([semantic_codes, codes], dim=1)

    def lookup(self, codes: torch.Tensor) -> torch.Tensor:
        """Clamped codes `(B, 10, T)` → summed latent `(B, D, T)`: semantic and residual sums formed apart."""
        return self.semantic_quantizer.from_codes(codes[:, :1]) + self.quantizer.from_codes(codes[:, 1:])

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Clamped codes → decoder input `(B, D, 4T)`."""
        return self.upsample(self.post_module(self.lookup(codes)))

    def clamp(self, codes: torch.Tensor) -> torch.Tensor:
        """Upstream clamps the upper bound only (in place on the caller's tensor); this does it on a copy."""
        out = codes.clone()
        out[:, 0] = torch.clamp(out[:, 0], max=self.semantic_quantizer.codebook_size - 1)
        out[:, 1:] = torch.clamp(out[:, 1:], max=self.quantizer.codebook_size - 1)
        return out
