"""One transformer block of the DualAR model, slow or fast (spec s2-language-model §4.2, §4.4, §4.6).

Written for bit-identity with upstream on CPU fp32: every op below is the op upstream runs, in the same order,
on tensors of the same shapes. In particular the slow attention reads the WHOLE preallocated key/value cache
(zeros past the current position, hidden by the mask): attending over only the filled part is mathematically
the same but rounds differently (spec §4.4, "bit-identity hazard").
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from s2studio.model.config import TransformerConfig
from s2studio.model.rope import apply_rotary_emb


class RMSNorm(nn.Module):
    """Upstream's RMSNorm: normalised in float32, cast back to the activation dtype, then times the weight."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()
        out = h * torch.rsqrt(torch.mean(h * h, dim=-1, keepdim=True) + self.eps)
        return out.type_as(x) * self.weight


class KVCache(nn.Module):
    """Static keys and values (1, kv_heads, length, head_dim), zero-filled once, written in place.

    Buffers are non-persistent: they are runtime state, never part of a checkpoint.
    """

    def __init__(self, kv_heads: int, length: int, head_dim: int, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        shape = (1, kv_heads, length, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def update(self, input_pos: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write k, v (1, kv_heads, S, head_dim) at `input_pos` (S,); return the whole cache."""
        self.k_cache[:, :, input_pos] = k
        self.v_cache[:, :, input_pos] = v
        return self.k_cache, self.v_cache


def fast_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """Upstream's hand-written attention for the fast transformer (its `eq_scaled_dot_product_attention`).

    The softmax runs in the activation dtype. Upstream's trailing `dropout(p=0)` returns its input without
    drawing random numbers, so it is left out.
    """
    bias = torch.zeros(1, 1, q.size(-2), k.size(-2), dtype=q.dtype, device=q.device)
    bias.masked_fill_(mask.logical_not(), float("-inf"))
    weight = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.size(-1)))
    weight += bias
    weight = torch.softmax(weight, dim=-1)
    return weight @ v


class Attention(nn.Module):
    """Fused-QKV grouped-query attention with optional per-head q/k RMSNorm and a static KV cache."""

    def __init__(self, config: TransformerConfig, *, fast: bool) -> None:
        super().__init__()
        c = config
        self.wqkv = nn.Linear(c.dim, c.q_size + 2 * c.kv_size, bias=c.qkv_bias)
        self.wo = nn.Linear(c.q_size, c.dim, bias=c.o_bias)
        if c.qk_norm:
            # torch's own RMSNorm here, as upstream: it is a different kernel from the block norms
            self.q_norm = nn.RMSNorm(c.head_dim, eps=c.norm_eps)
            self.k_norm = nn.RMSNorm(c.head_dim, eps=c.norm_eps)
        self.qk_norm = c.qk_norm
        self.n_head = c.n_head
        self.n_local_heads = c.n_local_heads
        self.head_dim = c.head_dim
        self.fast = fast
        self.kv_cache: KVCache | None = None

    def forward(self, x: Tensor, freqs_cis: Tensor, mask: Tensor, input_pos: Tensor | None) -> Tensor:
        """`input_pos` None: training, where the sequence attends to its own keys (no cache) under `mask`
        (B, 1, S, S); otherwise the keys and values are written into the cache at `input_pos`."""
        if input_pos is not None and self.kv_cache is None:
            raise RuntimeError("no KV cache: call DualAR.setup_caches() before running the model")
        bsz, seqlen, _ = x.shape
        q_size, kv_size = self.n_head * self.head_dim, self.n_local_heads * self.head_dim
        q, k, v = self.wqkv(x).split([q_size, kv_size, kv_size], dim=-1)  # rows of wqkv: q, then k, then v
        q = q.view(bsz, seqlen, self.n_head, self.head_dim)  # (B, S, H, D)
        k = k.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        v = v.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        if self.qk_norm:
            q = self.q_norm(q)
            k = self.k_norm(k)
        q = apply_rotary_emb(q, freqs_cis)
        k = apply_rotary_emb(k, freqs_cis)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, S, D)

        if input_pos is not None:
            assert self.kv_cache is not None
            k, v = self.kv_cache.update(input_pos, k, v)  # (B, KV, L, D): the whole cache, L = its full length
        group = self.n_head // self.n_local_heads  # kv head j serves q heads j*group ... j*group+group-1
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)

        if self.fast:
            y = fast_attention(q, k, v, mask)
        else:
            # the backend (default for prefill, math kernel for decode) is chosen by DualAR.forward_slow
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)

        y = y.transpose(1, 2).contiguous().view(bsz, seqlen, q_size)  # (B, S, H*D)
        return self.wo(y)


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(config.dim, config.intermediate_size, bias=False)
        self.w3 = nn.Linear(config.dim, config.intermediate_size, bias=False)
        self.w2 = nn.Linear(config.intermediate_size, config.dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    """Pre-norm block: h = x + attn(norm(x)); out = h + ffn(norm(h))."""

    def __init__(self, config: TransformerConfig, *, fast: bool) -> None:
        super().__init__()
        self.attention = Attention(config, fast=fast)
        self.feed_forward = FeedForward(config)
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps)
        self.attention_norm = RMSNorm(config.dim, config.norm_eps)

    def forward(self, x: Tensor, freqs_cis: Tensor, mask: Tensor, input_pos: Tensor | None) -> Tensor:
        h = x + self.attention(self.attention_norm(x), freqs_cis, mask, input_pos)
        return h + self.feed_forward(self.ffn_norm(h))
