"""The fast forward for several streams at once, each with its own caches and positions, in torch's ops.

A batched decode step advances B requests ("streams") by the same number of positions: the slow step by one, the
fast transformer's passes by two, then one at a time. Each stream has its own `FastCaches` and its own filled
length. Here the linear layers take the B streams' rows in one call (one pass over the weights for all of them),
and each stream's attention runs over its own cache with the very code a stream alone runs (`fast_forward.attend`,
`attend_step`), so a stream's math is its own. torch's matrix products may round a row differently beside other
rows (a GPU's do), so its bits are not promised equal to the stream alone; the engine's C++ step on the CPU
(`engine/weights/cpu_step.py: CpuStepOps.streams_step`) promises them.

This is the route of a CUDA device (and of a CPU without the C++ kernels); `engine/s2/batch.py` drives it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.nn import functional as F

from s2studio.model.dual_ar import DualAR
from s2studio.model.fast_forward import LayerCache, attend, attend_step, embed, rms_norm
from s2studio.model.transformer import TransformerBlock


def streams_layers(layers: Sequence[TransformerBlock], caches: Sequence[Sequence[LayerCache]], x: Tensor,
                   ropes: Sequence[Tensor], starts: Sequence[int], norm: torch.nn.Module) -> tuple[Tensor, Tensor]:
    """`fast_forward.block` over every layer for B streams: x (B, S, dim), stream b's S positions from starts[b]
    with RoPE rows ropes[b] and layer caches caches[b]; then `norm`. Returns (x, norm(x))."""
    seqlen = x.shape[1]
    one_step = seqlen == 1 and x.device.type == "cpu"  # as `fast_forward.attention` chooses for a stream alone
    for i, layer in enumerate(layers):
        attn, ffn = layer.attention, layer.feed_forward
        qkv = attn.wqkv.forward(rms_norm(layer.attention_norm, x))
        each = [(attend_step if one_step else attend)(attn, qkv.narrow(0, b, 1), ropes[b], own[i], starts[b])
                for b, own in enumerate(caches)]
        h = x + attn.wo.forward(torch.cat(each))
        normed = rms_norm(layer.ffn_norm, h)
        x = h + ffn.w2.forward(F.silu(ffn.w1.forward(normed)).mul_(ffn.w3.forward(normed)))
    return x, rms_norm(norm, x)


def forward_slow_streams(model: DualAR, caches: Sequence, columns: Sequence[Tensor], positions: Sequence[int],
                         head: torch.nn.Module) -> tuple[Tensor, Tensor]:
    """One slow step for B streams: columns[b] (1 + K, 1) at positions[b] of caches[b] (`FastCaches`). Returns the
    logits through `head` (B, 1, rows) and the fast model's inputs (B, 1, fast_dim), as `forward_slow` does alone."""
    x = torch.cat([embed(model, column) for column in columns])
    ropes = [c.rope.narrow(0, pos, 1) for c, pos in zip(caches, positions, strict=True)]
    x, slow_out = streams_layers(model.layers, [c.slow for c in caches], x, ropes, positions, model.norm)
    hidden = slow_out if model.config.norm_fastlayer_input else x
    return head(slow_out), model.fast_project_in(hidden)


def forward_fast_streams(model: DualAR, caches: Sequence, x: Tensor, start: int) -> Tensor:
    """The fast model for B streams at the same codebook positions start..start+S-1: x (B, S, fast_dim) ->
    each stream's last logits (B, 1, codebook), as `forward_fast` does alone."""
    seqlen = x.shape[1]
    ropes = [c.fast_rope.narrow(0, start, seqlen) for c in caches]
    _, normed = streams_layers(model.fast_layers, [c.fast for c in caches], x, ropes, [start] * len(caches),
                               model.fast_norm)
    return model.fast_output.forward(normed.narrow(1, seqlen - 1, 1))
