"""The DualAR transformer of Fish Audio S2 (spec s2-language-model §3, §4).

A slow transformer reads one column of the 11-row token matrix per position (a text token, or a semantic token
plus its frame's ten codes) and predicts the next main token. For a semantic token, a fast transformer then
predicts the frame's codebooks one after another, starting from the slow model's (normed) last hidden state.

Module names are the checkpoint's after upstream's key remap (spec §1.4, §1.5), so a published checkpoint loads
with `load_state_dict(strict=True)`. Generation (sampling, the frame loop) lives in the engine; this module only
exposes the three pieces it needs: `forward_slow`, `fast_embeddings` and `forward_fast`.
"""

from __future__ import annotations

import math
from contextlib import nullcontext

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from s2studio.model.config import DualARConfig, find_multiple
from s2studio.model.rope import precompute_freqs_cis
from s2studio.model.transformer import KVCache, RMSNorm, TransformerBlock


def embedding(num: int, dim: int) -> nn.Embedding:
    """An nn.Embedding with torch's N(0, 1) init, skipped on the meta device.

    The loader builds the model on the meta device; there torch's `normal_` first imports its Python reference
    kernels, which costs seconds, for values that the checkpoint replaces anyway.
    """
    weight = torch.empty(num, dim)
    if not weight.is_meta:
        nn.init.normal_(weight)
    return nn.Embedding(num, dim, _weight=weight)


class DualAR(nn.Module):
    def __init__(self, config: DualARConfig) -> None:
        super().__init__()
        self.config = c = config
        slow, fast = c.slow, c.fast
        self.embeddings = embedding(c.vocab_size, slow.dim)
        # the slow model's input table for the codes: codebook i owns rows i*codebook_size ... +codebook_size-1
        self.codebook_embeddings = embedding(c.codebook_size * c.num_codebooks, slow.dim)
        self.layers = nn.ModuleList(TransformerBlock(slow, fast=False) for _ in range(slow.n_layer))
        self.norm = RMSNorm(slow.dim, slow.norm_eps)
        if not c.tie_word_embeddings:
            self.output = nn.Linear(slow.dim, c.vocab_size, bias=False)

        self.fast_project_in: nn.Module
        if c.fast_has_projection:
            self.fast_project_in = nn.Linear(slow.dim, fast.dim, bias=True)
        else:
            self.fast_project_in = nn.Identity()
        # one table shared by every codebook: the fast model tells them apart by position only
        self.fast_embeddings = embedding(c.codebook_size, fast.dim)
        self.fast_layers = nn.ModuleList(TransformerBlock(fast, fast=True) for _ in range(fast.n_layer))
        self.fast_norm = RMSNorm(fast.dim, fast.norm_eps)
        self.fast_output = nn.Linear(fast.dim, c.codebook_size, bias=False)

        # Built in bfloat16 on the CPU even when the model is constructed on the meta device; `.to(device, dtype)`
        # casts them with the weights (spec §1.6). Not part of the checkpoint.
        self.register_buffer("freqs_cis", precompute_freqs_cis(slow.max_seq_len, slow.head_dim, slow.rope_base),
                             persistent=False)
        self.register_buffer("fast_freqs_cis", precompute_freqs_cis(c.num_codebooks, fast.head_dim, slow.rope_base),
                             persistent=False)
        self.cache_len = 0
        """Keys every slow attention call reads (0: no caches yet)."""

    # ------------------------------------------------------------------------- caches

    def setup_caches(self, max_seq_len: int, dtype: torch.dtype) -> None:
        """Allocate zeroed static KV caches on the model's device.

        The slow cache holds `find_multiple(max_seq_len, 8)` positions and every slow attention call reads all of
        them: for upstream's bits pass `config.slow.max_seq_len` (upstream always does). Calling again with the
        same length, dtype and device keeps the existing caches (stale entries are masked, so they never matter).
        """
        c = self.config
        if not 1 <= max_seq_len <= c.slow.max_seq_len:
            raise ValueError(f"max_seq_len must be in 1..{c.slow.max_seq_len} (the RoPE table), got {max_seq_len}")
        length = find_multiple(max_seq_len, 8)
        device = self.embeddings.weight.device
        current = self.layers[0].attention.kv_cache if len(self.layers) else None
        if (current is not None and self.cache_len == length and current.k_cache.dtype == dtype
                and current.k_cache.device == device):
            return
        for layer in self.layers:
            layer.attention.kv_cache = KVCache(c.slow.n_local_heads, length, c.slow.head_dim, dtype, device)
        for layer in self.fast_layers:
            layer.attention.kv_cache = KVCache(c.fast.n_local_heads, c.num_codebooks, c.fast.head_dim, dtype, device)
        # A causal mask row is `key_position <= query_position`; building rows on demand gives the same values as
        # slicing upstream's L x L triangle without holding it (1 GiB at 32768).
        self.register_buffer("key_positions", torch.arange(length, device=device), persistent=False)
        self.register_buffer("fast_positions", torch.arange(c.num_codebooks, device=device), persistent=False)
        self.register_buffer("fast_causal_mask",
                             torch.ones(c.num_codebooks, c.num_codebooks, dtype=torch.bool, device=device).tril(),
                             persistent=False)
        self.cache_len = length

    def causal_mask(self, input_pos: Tensor) -> Tensor:
        """Bool (1, 1, S, cache_len): True where the key position is <= the query position."""
        return (self.key_positions[None, :] <= input_pos[:, None])[None, None]

    # ------------------------------------------------------------------------- slow model

    def embed(self, tokens: Tensor, *, training: bool = False) -> Tensor:
        """(B, 1+K, S) token matrix -> (B, S, dim) input embeddings (spec §4.1, op for op).

        `training`: upstream's training forward, which never divides semantic positions by sqrt(K + 1)."""
        c = self.config
        codes = [self.codebook_embeddings(tokens[:, i + 1] + i * c.codebook_size) for i in range(c.num_codebooks)]
        vq_sum = torch.stack(codes, dim=1).sum(dim=1)  # (1, K, S, dim) -> (1, S, dim): one reduction, not a loop
        main = tokens[:, 0]
        is_semantic = (main >= c.semantic_begin_id) & (main <= c.semantic_end_id)
        vq_sum = torch.where(is_semantic[..., None], vq_sum, 0)
        x = self.embeddings(main) + vq_sum
        if c.scale_codebook_embeddings and not training:
            x = torch.where(is_semantic[..., None].expand_as(x), x / math.sqrt(c.num_codebooks + 1), x)
        return x

    def forward_slow(self, tokens: Tensor, input_pos: Tensor) -> tuple[Tensor, Tensor]:
        """Run the slow model on `tokens` (1, 1+K, S) at positions `input_pos` (S,), writing the KV cache.

        Returns the main-token logits (1, 1, vocab_size) of the LAST position and the fast model's input
        (1, 1, fast_dim). S > 1 (prefill) uses SDPA's default backend, S == 1 (decode) its math kernel, as
        upstream does; the two are different kernels, so equal math does not mean equal bits.
        """
        if self.cache_len == 0:
            raise RuntimeError("no KV cache: call setup_caches() before running the model")
        x = self.embed(tokens)  # (1, S, dim)
        mask = self.causal_mask(input_pos)  # (1, 1, S, cache_len)
        freqs_cis = self.freqs_cis[input_pos]  # (S, head_dim / 2, 2)
        # Upstream runs its decode loop under `sdpa_kernel(MATH)` and its prefill under no context at all.
        with sdpa_kernel(SDPBackend.MATH) if tokens.size(-1) == 1 else nullcontext():
            for layer in self.layers:
                x = layer(x, freqs_cis, mask, input_pos)
        if x.size(1) > 1:
            x = x[:, -1:]  # before the final norm, as upstream
        slow_out = self.norm(x)
        if self.config.tie_word_embeddings:
            logits = F.linear(slow_out, self.embeddings.weight)
        else:
            logits = self.output(slow_out)
        hidden = slow_out if self.config.norm_fastlayer_input else x
        return logits, self.fast_project_in(hidden)

    # ------------------------------------------------------------------------- fast model

    def forward_fast(self, x: Tensor, pos: int) -> Tensor:
        """One fast step: `x` (1, 1, fast_dim) at position `pos` (0..K-1) -> codebook logits (1, 1, codebook_size).

        Position 0 takes `forward_slow`'s hidden state, position k >= 1 takes `fast_embeddings(code_{k-1})`. Each
        step reads the whole K-slot cache; slots > pos are masked.
        """
        if self.cache_len == 0:
            raise RuntimeError("no KV cache: call setup_caches() before running the model")
        x = x.view(1, 1, -1)
        input_pos = self.fast_positions[pos:pos + 1]
        mask = self.fast_causal_mask[None, None, pos:pos + 1]
        freqs_cis = self.fast_freqs_cis[pos:pos + 1]
        for layer in self.fast_layers:
            x = layer(x, freqs_cis, mask, input_pos)
        return self.fast_output(self.fast_norm(x))
