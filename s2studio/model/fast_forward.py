"""The fast (non-exact) forward of DualAR: the same weights and the same math, cheaper kernels.

The exact forward in `dual_ar.py`/`transformer.py` reproduces upstream's bits, and so reads the whole
preallocated slow KV cache (32768 keys for S2) under a boolean mask on every step. Here:

- attention reads only the filled part of a static cache (`k[:, :, :end]`, a view: nothing grows or is copied),
  through `scaled_dot_product_attention(enable_gqa=True)`, or for one query on the CPU two batched products
  (`decode_attention`), so the key/value heads are never repeated;
- positions are Python ints and every cache write is a slice, so no step needs a host-device round trip;
- a prefill may start at any position (`start > 0`): the keys before it are a prefix kept from an earlier call;
- the slow head computes only the rows the sampler may pick (semantic tokens and `<|im_end|>`), 4097 of S2's
  155776: about 10 % of the weight bytes of a frame;
- the fast transformer takes its positions 0 and 1 as one 2-token step (the input of position 1 is known as soon
  as the main token is drawn), which saves one of its ten weight passes per frame;
- the last slow layer of a prefill computes only the last position past its keys and values (nothing reads the
  others): for a line's 38 new columns on the mid model that skips 37 of 38 rows of an eighth of the work;
- a one-position step on the CPU keeps the heads as rows of one matrix (`attention_step`), a third fewer ops;
- with a `StepOps` backend (the engine's C++ kernels on the CPU in float32), a step of one or two positions
  (every decode step, every fast-transformer pass) runs as one call for the whole stack of layers
  (`StepOps.layers_step`; `step_layers` is the same step as a handful of calls per layer) instead of ~50 torch
  ops per layer, and a prefill's norms and silu·mul go through it too: at batch 1 the fixed cost per op is most
  of a small layer's time.

Mathematically this is the exact forward; in floating point the logits differ in the last bits (spec §10, ~1e-5
on the tiny model), so the codes equal the exact path's for almost every seed, not all.

Caches are owned by the caller (`FastCaches`), not by the modules, so the exact path and this one never overwrite
each other and a model can serve both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor
from torch.nn import functional as F

from s2studio.model.dual_ar import DualAR
from s2studio.model.transformer import Attention, TransformerBlock


@dataclass
class LayerCache:
    k: Tensor
    """(1, kv_heads, length, head_dim)"""
    v: Tensor


class StepOps(Protocol):
    """Fused ops for a step of up to `max_positions` positions, with the math of the torch code in this module
    (only the order of additions may differ). The model does not know who implements them: the engine passes its
    C++ kernels (`engine/weights/cpu_step.py`) through `FastCaches.ops`; without them the torch code runs."""

    max_positions: int

    def rms_norm(self, x: Tensor, weight: Tensor, eps: float) -> Tensor:
        """`F.rms_norm(x, (dim,), weight, eps)`."""
        ...

    def add_rms_norm(self, x: Tensor, delta: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        """(h, rms_norm(h, weight, eps)) for h = x + delta."""
        ...

    def silu_mul(self, a: Tensor, b: Tensor) -> Tensor:
        """`F.silu(a) * b`."""
        ...

    def attend(self, attn: Attention, qkv: Tensor, rope: Tensor, cache: LayerCache, pos: int) -> Tensor:
        """`attention` between `wqkv` and `wo`: qkv (1, S, (H + 2 KV) D) of positions pos..pos+S-1 -> (1, S, H D),
        with the keys and values written into `cache`."""
        ...

    def layers_step(self, layers: Sequence[TransformerBlock], caches: Sequence[LayerCache], x: Tensor, rope: Tensor,
                    start: int, norm: torch.nn.Module) -> tuple[Tensor, Tensor]:
        """`step_layers(layers, caches, x, rope, start, self, norm)` for a step of up to `max_positions`
        positions: every layer and the norm after them, where an implementation may fuse them into one call."""
        ...


@dataclass
class FastCaches:
    """Static KV caches for the slow and the fast transformer, allocated once and written in place."""

    slow: list[LayerCache]
    fast: list[LayerCache]
    length: int
    """Positions the slow cache holds: the longest prompt plus frames it can serve."""
    rope: Tensor
    """The slow RoPE table as complex64 (positions, head_dim / 2): the bf16-rounded values of `freqs_cis`."""
    fast_rope: Tensor
    ops: StepOps | None = None
    """Fused step ops for these caches' device and dtype (None: torch's ops throughout)."""

    @classmethod
    def allocate(cls, model: DualAR, length: int, dtype: torch.dtype, device: torch.device,
                 ops: StepOps | None = None) -> FastCaches:
        c = model.config

        def zeros(heads: int, n: int, head_dim: int) -> LayerCache:
            shape = (1, heads, n, head_dim)
            return LayerCache(torch.zeros(shape, dtype=dtype, device=device),
                              torch.zeros(shape, dtype=dtype, device=device))

        return cls(slow=[zeros(c.slow.n_local_heads, length, c.slow.head_dim) for _ in range(c.slow.n_layer)],
                   fast=[zeros(c.fast.n_local_heads, c.num_codebooks, c.fast.head_dim) for _ in range(c.fast.n_layer)],
                   length=length, rope=complex_table(model.freqs_cis[:length], device),
                   fast_rope=complex_table(model.fast_freqs_cis, device), ops=ops)


def complex_table(freqs_cis: Tensor, device: torch.device) -> Tensor:
    return torch.view_as_complex(freqs_cis.to(device=device, dtype=torch.float32).contiguous())


def rotate(x: Tensor, rope: Tensor) -> Tensor:
    """RoPE on adjacent pairs (B, S, H, D) as one complex product: `rope.apply_rotary_emb` in 3 ops, not 12."""
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * rope[None, :, None]).flatten(3).type_as(x)


def rms_norm(norm: torch.nn.Module, x: Tensor) -> Tensor:
    """The block norms as torch's one fused call (upstream's form normalises in float32 and casts back)."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), norm.weight, norm.eps)
    return F.rms_norm(x.float(), (x.shape[-1],), None, norm.eps).type_as(x) * norm.weight


def causal_mask(start: int, end: int, device: torch.device) -> Tensor | None:
    """Bool (S, end) mask for queries start..end-1 over keys 0..end-1; None when SDPA needs none or has a flag."""
    if end - start == 1:
        return None  # one query sees every filled key
    keys = torch.arange(end, device=device)
    return keys[None, :] <= keys[start:, None]


def decode_attention(q: Tensor, keys: Tensor, values: Tensor) -> Tensor:
    """One query position (1, H, 1, D) over the filled cache (1, KV, L, D) as two batched products.

    On the CPU, SDPA's kernel takes 1.5-2.5x the time of reading the keys and values once at batch 1 (measured
    with S2's heads: 216 vs 138 us at 600 cached positions, 1.85 vs 0.72 ms at 3000, two threads), and a
    decode step reads the whole cache in every slow layer. Query head h reads key/value head h // (H / KV),
    as `enable_gqa` does, so the grouped heads are one batch entry each and nothing is repeated.
    """
    heads, kv, dim = q.shape[1], keys.shape[1], q.shape[-1]
    grouped = q.reshape(kv, heads // kv, dim) * dim ** -0.5
    weights = torch.softmax(torch.bmm(grouped, keys[0].transpose(1, 2)), dim=-1)  # (KV, H / KV, L)
    return torch.bmm(weights, values[0]).reshape(1, heads, 1, dim)


def attention(attn: Attention, x: Tensor, rope: Tensor, cache: LayerCache, start: int, last_only: bool = False
              ) -> Tensor:
    """`Attention.forward` over the filled cache only: writes positions start..start+S-1, reads 0..start+S-1.

    `last_only`: every position's keys and values are written, but only the last position attends and comes out
    (1, 1, dim): what the last layer of a prefill needs (see `forward_slow`)."""
    if x.shape[1] == 1 and x.device.type == "cpu":
        return attention_step(attn, x, rope, cache, start)
    return attn.wo.forward(attend(attn, attn.wqkv.forward(x), rope, cache, start, last_only))


def attend(attn: Attention, qkv: Tensor, rope: Tensor, cache: LayerCache, start: int, last_only: bool = False
           ) -> Tensor:
    """`attention` between `wqkv` and `wo`: qkv (B, S, (H + 2 KV) D) -> (B, S, H D), or (B, 1, H D) `last_only`."""
    bsz, seqlen, _ = qkv.shape
    q_size, kv_size = attn.n_head * attn.head_dim, attn.n_local_heads * attn.head_dim
    qk, v = qkv.split([q_size + kv_size, kv_size], dim=-1)
    qk = qk.view(bsz, seqlen, attn.n_head + attn.n_local_heads, attn.head_dim)
    v = v.view(bsz, seqlen, attn.n_local_heads, attn.head_dim)
    if attn.qk_norm:  # each with its own weights, then rotated together
        q, k = qk.split([attn.n_head, attn.n_local_heads], dim=2)
        qk = torch.cat([attn.q_norm(q), attn.k_norm(k)], dim=2)
    q, k = rotate(qk, rope).transpose(1, 2).split([attn.n_head, attn.n_local_heads], dim=1)  # (B, H, S, D)
    end = start + seqlen
    # narrow() rather than slicing syntax: the same views, without Python's index parsing on every layer-step
    cache.k.narrow(2, start, seqlen).copy_(k)
    cache.v.narrow(2, start, seqlen).copy_(v.transpose(1, 2))
    keys, values = cache.k.narrow(2, 0, end), cache.v.narrow(2, 0, end)
    if last_only:  # the last query sees every filled key, as a decode step does
        q, seqlen = q.narrow(2, seqlen - 1, 1), 1
        y = (decode_attention(q, keys, values) if qkv.device.type == "cpu"
             else F.scaled_dot_product_attention(q, keys, values, enable_gqa=True))
    elif start == 0 and seqlen > 1:
        y = F.scaled_dot_product_attention(q, keys, values, is_causal=True, enable_gqa=True)
    else:
        y = F.scaled_dot_product_attention(q, keys, values, attn_mask=causal_mask(start, end, qkv.device),
                                           enable_gqa=True)
    return y.transpose(1, 2).reshape(bsz, seqlen, q_size)


def attention_step(attn: Attention, x: Tensor, rope: Tensor, cache: LayerCache, pos: int) -> Tensor:
    """`attention` for one position on the CPU, the same values with a third fewer ops (a frame runs it 36-44
    times at S2's depth, and at batch 1 each op's fixed cost is a good part of a small layer's time)."""
    return attn.wo.forward(attend_step(attn, attn.wqkv.forward(x), rope, cache, pos))


def attend_step(attn: Attention, qkv: Tensor, rope: Tensor, cache: LayerCache, pos: int) -> Tensor:
    """`attention_step` between `wqkv` and `wo`: qkv (1, 1, (H + 2 KV) D) -> (1, 1, H D).

    The heads stay rows of one (heads, head_dim) matrix from the projection to the output: no batch or sequence
    dimension to split, transpose and reshape around. Every arithmetic op is the one `attend` runs on the same
    values (the rotation's complex product, the norms per head, `decode_attention`), so the results are equal."""
    heads, kv, dim = attn.n_head, attn.n_local_heads, attn.head_dim
    qkv = qkv.view(heads + 2 * kv, dim)
    qk = qkv.narrow(0, 0, heads + kv)
    if attn.qk_norm:
        qk = torch.cat([attn.q_norm(qk.narrow(0, 0, heads)), attn.k_norm(qk.narrow(0, heads, kv))])
    pairs = torch.view_as_complex(qk.float().reshape(heads + kv, dim // 2, 2))
    rotated = torch.view_as_real(pairs * rope).view(heads + kv, dim).type_as(qkv)
    cache.k.select(2, pos).copy_(rotated.narrow(0, heads, kv))
    cache.v.select(2, pos).copy_(qkv.narrow(0, heads + kv, kv))
    y = decode_attention(rotated.narrow(0, 0, heads).view(1, heads, 1, dim), cache.k.narrow(2, 0, pos + 1),
                         cache.v.narrow(2, 0, pos + 1))
    return y.view(1, 1, heads * dim)


def block(layer: TransformerBlock, x: Tensor, rope: Tensor, cache: LayerCache, start: int,
          last_only: bool = False) -> Tensor:
    """One transformer layer; `last_only`: keys and values of every position, the output of the last (1, 1, dim)."""
    # `.forward` instead of calling the module: the same computation without torch's hook dispatch per call
    attended = attention(layer.attention, rms_norm(layer.attention_norm, x), rope, cache, start, last_only)
    h = (x.narrow(1, x.shape[1] - 1, 1) if last_only else x) + attended
    ffn, normed = layer.feed_forward, rms_norm(layer.ffn_norm, h)
    return h + ffn.w2.forward(F.silu(ffn.w1.forward(normed)).mul_(ffn.w3.forward(normed)))


def norm_eps(norm: torch.nn.Module) -> float:
    """The epsilon a norm adds (torch's RMSNorm may hold None: then its dtype's machine epsilon)."""
    return torch.finfo(torch.float32).eps if norm.eps is None else float(norm.eps)


def step_layers(layers: Sequence[TransformerBlock], caches: Sequence[LayerCache], x: Tensor, rope: Tensor,
                start: int, ops: StepOps, norm: torch.nn.Module, last_only: bool = False) -> tuple[Tensor, Tensor]:
    """`block` over every layer with `ops`' norms and silu·mul, then `norm`: (x, norm(x)).

    Each residual add is fused with the norm that follows it (the next layer's, and at the end `norm`), so a
    layer of a step of up to `ops.max_positions` positions is 9 calls: norm, wqkv, attend, wo, norm, w1, w3,
    silu_mul, w2. A longer input (a prefill) keeps torch's batched attention (`attention`) between them, and with
    `last_only` its last layer computes only the last position, as `block`'s."""
    seqlen = x.shape[1]
    fused = seqlen <= ops.max_positions
    first = layers[0].attention_norm
    normed = ops.rms_norm(x, first.weight, norm_eps(first))
    delta = None
    last = len(layers) - 1
    for i, (layer, cache) in enumerate(zip(layers, caches)):
        if delta is not None:
            x, normed = ops.add_rms_norm(x, delta, layer.attention_norm.weight, norm_eps(layer.attention_norm))
        attn, ffn = layer.attention, layer.feed_forward
        if fused:
            attended = attn.wo.forward(ops.attend(attn, attn.wqkv.forward(normed), rope, cache, start))
        else:
            attended = attention(attn, normed, rope, cache, start, last_only and i == last)
            if last_only and i == last:
                x = x.narrow(1, seqlen - 1, 1)
        x, normed = ops.add_rms_norm(x, attended, layer.ffn_norm.weight, norm_eps(layer.ffn_norm))
        delta = ffn.w2.forward(ops.silu_mul(ffn.w1.forward(normed), ffn.w3.forward(normed)))
    return ops.add_rms_norm(x, delta, norm.weight, norm_eps(norm))


def embed(model: DualAR, tokens: Tensor) -> Tensor:
    """(1 + K, S) token matrix -> (1, S, dim): `DualAR.embed` with one gather for all codebooks."""
    c = model.config
    offsets = torch.arange(c.num_codebooks, device=tokens.device)[:, None] * c.codebook_size
    vq_sum = model.codebook_embeddings(tokens[1:] + offsets).sum(dim=0)  # (K, S, dim) -> (S, dim)
    main = tokens[0]
    is_semantic = ((main >= c.semantic_begin_id) & (main <= c.semantic_end_id))[:, None]
    x = model.embeddings(main) + torch.where(is_semantic, vq_sum, 0)
    if c.scale_codebook_embeddings:
        x = torch.where(is_semantic, x / math.sqrt(c.num_codebooks + 1), x)
    return x[None]


def forward_slow(model: DualAR, caches: FastCaches, tokens: Tensor, start: int, head: torch.nn.Module
                 ) -> tuple[Tensor, Tensor]:
    """Slow model on the (1 + K, S) columns at positions start..start+S-1.

    Returns the last position's logits through `head` (a Linear over the sampler's allowed rows, see
    `FastDecoder`) as (1, 1, rows), and the fast model's input (1, 1, fast_dim).
    """
    seqlen = tokens.shape[-1]
    if start + seqlen > caches.length:
        raise ValueError(f"positions up to {start + seqlen} do not fit the {caches.length}-position cache")
    x = embed(model, tokens)
    rope = caches.rope.narrow(0, start, seqlen)
    ops = caches.ops
    if ops is not None:
        if seqlen <= ops.max_positions:
            x, slow_out = ops.layers_step(model.layers, caches.slow, x, rope, start, model.norm)
        else:  # a prefill: torch's attention over all its positions, the norms and silu·mul in `ops`
            x, slow_out = step_layers(model.layers, caches.slow, x, rope, start, ops, model.norm, last_only=True)
        x, slow_out = x.narrow(1, x.shape[1] - 1, 1), slow_out.narrow(1, x.shape[1] - 1, 1)
        hidden = slow_out if model.config.norm_fastlayer_input else x
        return head(slow_out), model.fast_project_in(hidden)
    last = len(model.layers) - 1
    for i, (layer, cache) in enumerate(zip(model.layers, caches.slow)):
        # nothing reads the last layer's output at the earlier positions (only their keys and values, written
        # by its attention): a prefill of S columns skips S - 1 rows of its attention, `wo` and feed-forward
        x = block(layer, x, rope, cache, start, last_only=i == last)
    slow_out = rms_norm(model.norm, x)
    hidden = slow_out if model.config.norm_fastlayer_input else x
    return head(slow_out), model.fast_project_in(hidden)


def forward_fast(model: DualAR, caches: FastCaches, x: Tensor, start: int) -> Tensor:
    """Fast model on `x` (1, S, fast_dim) at codebook positions start..start+S-1 -> last logits (1, 1, codebook)."""
    seqlen = x.shape[1]
    rope = caches.fast_rope.narrow(0, start, seqlen)
    if caches.ops is not None and seqlen <= caches.ops.max_positions:
        _, normed = caches.ops.layers_step(model.fast_layers, caches.fast, x, rope, start, model.fast_norm)
        return model.fast_output.forward(normed.narrow(1, seqlen - 1, 1))
    for layer, cache in zip(model.fast_layers, caches.fast):
        x = block(layer, x, rope, cache, start)
    return model.fast_output.forward(rms_norm(model.fast_norm, x[:, -1:]))
