"""The codec's building blocks, written op for op as upstream runs them (spec s2-codec.md §3).

Bit-identity with upstream on CPU float32 depends on calling the same PyTorch ops in the same order on tensors
of the same memory layout (§7.3). So: causal convs are `F.pad` + a conv with padding 0, transposed convs are
cropped on the right, Snake keeps its `+ 1e-9` and `reciprocal`, the transformer keeps upstream's
`transpose(1, 2)` view without `.contiguous()`, and RoPE uses a bfloat16-rounded cos/sin table. Weight norm is
not here: `loading.py` folds it into plain `weight` parameters with the very op upstream calls every forward.

Module and attribute names mirror upstream's so that state-dict keys map one to one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import nn
from torch.nn import functional as F


LinearFn = Callable[[nn.Linear, torch.Tensor], torch.Tensor]
"""How a layer's `nn.Linear` is applied: `via(linear, x)` in place of `linear(x)`. The exact paths never pass one;
the non-exact streaming decoder passes its narrowed matrix products (`fast_stream.FastConvStack.linear`)."""


def apply_linear(linear: nn.Linear, x: torch.Tensor, via: LinearFn | None) -> torch.Tensor:
    return linear(x) if via is None else via(linear, x)


# -- streaming: each decode-path layer's own step over new frames ---------------------------------------------


class Streamer(Protocol):
    """How a streaming decoder runs the leaf ops over new frames: its layout, rounding rules and kept state.

    The two decoders (`streaming.py`, exact; `fast_stream.py`, for speed) differ only here: the walk through the
    layers is the layers' own (`stream`, each layer's `stream_step`)."""

    def conv(self, m: CausalConv, x: torch.Tensor) -> torch.Tensor: ...
    def trans_conv(self, m: CausalTransConv, x: torch.Tensor) -> torch.Tensor: ...
    def snake(self, m: Snake1d, x: torch.Tensor) -> torch.Tensor: ...
    def pointwise(self, m: ConvNeXtBlock, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor: ...


def stream(module: nn.Module, x: torch.Tensor, streamer: Streamer) -> torch.Tensor:
    """`module` over the new frames `x` only, as `streamer` runs the leaf ops: an `nn.Sequential` in order, tanh
    as it is (pointwise in time), every other layer by its own `stream_step`."""
    if isinstance(module, nn.Sequential):
        for child in module:
            x = stream(child, x, streamer)
        return x
    if isinstance(module, nn.Tanh):
        return module(x)
    step = getattr(module, "stream_step", None)
    if step is None:
        raise TypeError(f"no streaming step for {type(module).__name__}")
    return step(x, streamer)


def with_past(state: dict[int, torch.Tensor], key: nn.Module, x: torch.Tensor, keep: int, dim: int) -> torch.Tensor:
    """`x` with the last `keep` frames (along `dim`) of what `key` read before in front — zeros at the start, as a
    full decode's padding — and those of the result kept for the next push (a copy: `x` may be large)."""
    past = state.get(id(key))
    if past is None:
        shape = list(x.shape)
        shape[dim] = keep
        past = x.new_zeros(shape)
    x = torch.cat([past, x], dim=dim)
    state[id(key)] = x.narrow(dim, x.shape[dim] - keep, keep).clone()
    return x


class CausalConv(nn.Module):
    """A conv padded on the left only: output frame m sees inputs up to the end of its own hop, nothing later."""

    def __init__(self, cin: int, cout: int, kernel_size: int, stride: int = 1, dilation: int = 1,
                 groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel_size, stride=stride, dilation=dilation, groups=groups)
        self.stride = stride
        self.left_pad = (kernel_size - 1) * dilation + 1 - stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        right = -x.shape[-1] % self.stride  # zeros up to the next multiple of the stride (spec §3.1)
        x = F.pad(x, (self.left_pad, right), "constant", 0)
        return self.conv(x).contiguous()

    def stream_step(self, x: torch.Tensor, streamer: Streamer) -> torch.Tensor:
        if self.stride != 1:
            raise TypeError("strided causal convs are not on the decode path")
        return streamer.conv(self, x)


class CausalTransConv(nn.Module):
    """A transposed conv whose `kernel - stride` trailing samples are cropped, so it never looks ahead."""

    def __init__(self, cin: int, cout: int, kernel_size: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(cin, cout, kernel_size, stride=stride)
        self.stride = stride
        self.crop = kernel_size - stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return y[..., : y.shape[-1] - self.crop].contiguous()

    def stream_step(self, x: torch.Tensor, streamer: Streamer) -> torch.Tensor:
        if self.crop not in (0, self.stride):
            raise TypeError("transposed convs with kernel other than stride or 2·stride are not streamable here")
        return streamer.trans_conv(self, x)


def snake(x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """`x + reciprocal(alpha + 1e-9) · sin(alpha · x)²` in upstream's op order (dropping the 1e-9 or dividing
    instead changes bits). Without autograd the same ops run in place on one fresh buffer: same numbers, less
    memory traffic; the caller's `x` is never modified."""
    shape = x.shape
    x = x.reshape(shape[0], shape[1], -1)
    if torch.is_grad_enabled() and (x.requires_grad or alpha.requires_grad):
        return (x + (alpha + 1e-9).reciprocal() * torch.sin(alpha * x).pow(2)).reshape(shape)
    t = alpha * x
    t.sin_().pow_(2).mul_((alpha + 1e-9).reciprocal()).add_(x)
    return t.reshape(shape)


class Snake1d(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return snake(x, self.alpha)

    def stream_step(self, x: torch.Tensor, streamer: Streamer) -> torch.Tensor:
        return streamer.snake(self, x)


class ResidualUnit(nn.Module):
    """Snake → dilated k7 conv → Snake → k1 conv, added to the input."""

    def __init__(self, dim: int, dilation: int) -> None:
        super().__init__()
        self.block = nn.Sequential(Snake1d(dim), CausalConv(dim, dim, 7, dilation=dilation),
                                   Snake1d(dim), CausalConv(dim, dim, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x)

    def stream_step(self, x: torch.Tensor, streamer: Streamer) -> torch.Tensor:
        return x + stream(self.block, x, streamer)


class ConvNeXtBlock(nn.Module):
    """Causal depthwise k7 conv, LayerNorm, 4× MLP with exact GELU, layer scale, residual (spec §3.6)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = CausalConv(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.ones(dim))

    def pointwise(self, x: torch.Tensor, y: torch.Tensor, linear: LinearFn | None = None) -> torch.Tensor:
        """Everything after the depthwise conv; shared with the streaming decoders, which supply `y` themselves
        (and the non-exact one its own `linear`)."""
        y = y.permute(0, 2, 1)
        y = apply_linear(self.pwconv2, F.gelu(apply_linear(self.pwconv1, self.norm(y), linear)), linear)
        return x + (self.gamma * y).permute(0, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pointwise(x, self.dwconv(x))

    def stream_step(self, x: torch.Tensor, streamer: Streamer) -> torch.Tensor:
        return streamer.pointwise(self, x, stream(self.dwconv, x, streamer))


# -- the windowed causal transformer --------------------------------------------------------------------

_ROPE: dict[tuple[int, float], torch.Tensor] = {}


def rope_table(n: int, head_dim: int, base: float) -> torch.Tensor:
    """cos/sin for positions `0 … ≥ n`, `(rows, head_dim/2, 2)` in bfloat16, as upstream precomputes it (float32
    `pow`, float32 outer product, `torch.polar`, then rounded to bf16: the fp32 path's one bf16 island, §3.8).
    Each entry is computed elementwise, so the table's length does not change its values; it is grown on demand
    and shared between transformers of the same head size."""
    table = _ROPE.get((head_dim, base))
    if table is None or table.shape[0] < n:
        rows = max(4096, 1 << (n - 1).bit_length())
        inv = 1.0 / (base ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
        angles = torch.outer(torch.arange(rows), inv)
        cis = torch.polar(torch.ones_like(angles), angles)
        table = torch.stack([cis.real, cis.imag], dim=-1).to(torch.bfloat16)
        _ROPE[(head_dim, base)] = table
    return table


def apply_rope(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Rotate adjacent pairs of `x (B, T, H, D)` by `freqs (T, D/2, 2)`; products rounded separately (no FMA)."""
    xs = x.float().reshape(*x.shape[:-1], -1, 2)
    f = freqs.view(1, xs.size(1), 1, xs.size(3), 2)
    out = torch.stack([xs[..., 0] * f[..., 0] - xs[..., 1] * f[..., 1],
                       xs[..., 1] * f[..., 0] + xs[..., 0] * f[..., 1]], -1)
    return out.flatten(3).type_as(x)


def window_mask(q_start: int, n_q: int, k_start: int, n_k: int, window: int, device: torch.device) -> torch.Tensor:
    """Boolean `(1, 1, n_q, n_k)`: query at absolute position i sees keys j with `i - window < j ≤ i`.
    Built directly in bool (upstream goes through a float T×T `tril`: 10 GB for a 10-minute reference)."""
    i = torch.arange(q_start, q_start + n_q, device=device)[:, None]
    j = torch.arange(k_start, k_start + n_k, device=device)[None, :]
    return ((j <= i) & (j > i - window))[None, None]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        return (h * torch.rsqrt(torch.mean(h * h, dim=-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class LayerScale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mul_(self.gamma)  # in place, as upstream: same values, same layout


class KVCache:
    """Keys (after RoPE, at absolute positions) and values of the last `window - 1` frames, one per layer."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None


class Attention(nn.Module):
    def __init__(self, dim: int, n_head: int, head_dim: int) -> None:
        super().__init__()
        self.n_head, self.head_dim = n_head, head_dim
        self.wqkv = nn.Linear(dim, 3 * n_head * head_dim, bias=False)
        self.wo = nn.Linear(n_head * head_dim, dim, bias=False)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor, mask: torch.Tensor,
                cache: KVCache | None = None, keep: int = 0, new: int | None = None,
                layout: tuple[int, int] | None = None, linear: LinearFn | None = None) -> torch.Tensor:
        """Full attention over `x`, or (with `cache`) the new frames' queries over the cached keys plus their own;
        the cache then keeps the last `keep` keys of the first `new` frames of `x` (default: all of them; the
        rest is padding that later frames must not see). `layout = (lead, total)` places those keys after
        `lead` zero keys in a zero-filled row of `total` (see `WindowLimitedTransformer.step`)."""
        bsz, seqlen, _ = x.shape
        size = self.n_head * self.head_dim
        q, k, v = apply_linear(self.wqkv, x, linear).split([size, size, size], dim=-1)
        q = apply_rope(q.view(bsz, seqlen, self.n_head, self.head_dim), freqs)
        k = apply_rope(k.view(bsz, seqlen, self.n_head, self.head_dim), freqs)
        v = v.view(bsz, seqlen, self.n_head, self.head_dim)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        k, v = k.repeat_interleave(1, dim=1), v.repeat_interleave(1, dim=1)  # upstream's copy (no GQA in S2)
        if cache is not None:
            if cache.k is not None:
                k, v = torch.cat([cache.k, k], dim=2), torch.cat([cache.v, v], dim=2)
            end = k.shape[2] - seqlen + (seqlen if new is None else new)
            first = max(0, end - keep)
            cache.k, cache.v = k[:, :, first:end], v[:, :, first:end]
            if layout is not None:
                lead, total = layout
                k = F.pad(k, (0, 0, lead, total - lead - k.shape[2]))
                v = F.pad(v, (0, 0, lead, total - lead - v.shape[2]))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)
        return apply_linear(self.wo, y.transpose(1, 2).contiguous().view(bsz, seqlen, size), linear)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor, linear: LinearFn | None = None) -> torch.Tensor:
        return apply_linear(self.w2, F.silu(apply_linear(self.w1, x, linear)) * apply_linear(self.w3, x, linear),
                            linear)


class TransformerBlock(nn.Module):
    def __init__(self, dim: int, n_head: int, head_dim: int, hidden: int, eps: float) -> None:
        super().__init__()
        self.attention = Attention(dim, n_head, head_dim)
        self.feed_forward = FeedForward(dim, hidden)
        self.attention_norm = RMSNorm(dim, eps)
        self.ffn_norm = RMSNorm(dim, eps)
        self.attention_layer_scale = LayerScale(dim)
        self.ffn_layer_scale = LayerScale(dim)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor, mask: torch.Tensor,
                cache: KVCache | None = None, keep: int = 0, new: int | None = None,
                layout: tuple[int, int] | None = None, linear: LinearFn | None = None) -> torch.Tensor:
        attention = self.attention(self.attention_norm(x), freqs, mask, cache, keep, new, layout, linear)
        h = x + self.attention_layer_scale(attention)
        return h + self.ffn_layer_scale(self.feed_forward(self.ffn_norm(h), linear))


KEY_SPLIT = 256
"""SDPA's CPU kernel splits the keys into blocks and merges them with an online softmax, which rounds unlike one
block: a full decode of T frames has one block up to T = 384, two halves up to 511, and from 512 on blocks
of 256 counted from frame 0 (rounding alike only from a multiple of 512 on). So `step` lays its keys out as
such a decode does: from the multiple of 512 before the oldest cached key, in at least 512 zero-filled, masked
slots, a multiple of 256; a multiple of 16 also keeps every key out of the kernel's scalar leftover loop.
Long decodes then match exactly; one of 257-511 frames differs on the `window - 1` frames after a boundary."""


class WindowLimitedTransformer(nn.Module):
    """Channels-first causal transformer where each position attends to itself and the `window - 1` before it.

    `forward` is upstream's (positions restart at 0 every call). `step` continues a sequence: the new frames
    sit at absolute positions `start …`, so RoPE rounds exactly as in a full pass, and attend to a rolling
    cache of the previous `window - 1` frames per layer: O(window) work per frame however long the sequence."""

    def __init__(self, dim: int, n_layer: int, n_head: int, head_dim: int, hidden: int, window: int,
                 rope_base: float, eps: float) -> None:
        super().__init__()
        self.window, self.head_dim, self.rope_base = window, head_dim, rope_base
        self.layers = nn.ModuleList(TransformerBlock(dim, n_head, head_dim, hidden, eps) for _ in range(n_layer))
        self.norm = RMSNorm(dim, eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.transpose(1, 2)  # a view, as upstream: later reductions depend on this layout
        n = x.shape[1]
        mask = window_mask(0, n, 0, n, self.window, x.device)
        freqs = rope_table(n, self.head_dim, self.rope_base)[:n].to(x.device)
        for layer in self.layers:
            x = layer(x, freqs, mask)
        return self.norm(x).transpose(1, 2)

    def step(self, x: torch.Tensor, start: int, caches: list[KVCache], new: int | None = None,
             exact: bool = True, linear: LinearFn | None = None) -> torch.Tensor:
        """`x (B, D, n)`: the frames at absolute positions `start … start + n - 1`, given `caches` filled by
        the previous calls (one `KVCache` per layer). With `new`, only the first `new` frames are real and
        enter the caches; the others are padding (causal: no real frame sees them), which the streaming
        decoder adds so that every matrix product has enough rows to take the same kernel as a long pass.

        `exact=False` (the non-exact decoder) attends to the cached and new keys alone instead of laying them
        out in `KEY_SPLIT`'s zero-filled row of 512 or more (filling and attending over that row cost 1-7 % of a
        4-frame push at S2's size, measured interleaved), and `linear` applies its linears (`LinearFn`)."""
        x = x.transpose(1, 2)
        n = x.shape[1]
        cached = 0 if caches[0].k is None else caches[0].k.shape[2]
        first = start - cached  # position of the oldest cached key
        base = first // (2 * KEY_SPLIT) * (2 * KEY_SPLIT)
        total = max(2 * KEY_SPLIT, -(-(start + n - base) // KEY_SPLIT) * KEY_SPLIT)
        layout: tuple[int, int] | None = (first - base, total)
        if not exact:
            base, total, layout = first, cached + n, None
        mask = window_mask(start, n, base, total, self.window, x.device)
        freqs = rope_table(start + n, self.head_dim, self.rope_base)[start:start + n].to(x.device)
        for layer, cache in zip(self.layers, caches, strict=True):
            x = layer(x, freqs, mask, cache, self.window - 1, new, layout, linear)
        return self.norm(x).transpose(1, 2)
