"""The training forward and losses of upstream's `DualARTransformer.forward` / `TextToSemantic._step`
(spec s2-lora.md §4).

Differences from inference, all upstream's: the codebook embeddings are summed without the 1/sqrt(K + 1) scale;
the whole batch runs at once with no cache, each query attending to the earlier non-padding keys of its own row;
each layer is recomputed in the backward pass (reentrant checkpointing, which replays the dropout masks and
restores the generator, so it changes neither values nor the random stream); the tied head reads the frozen base
table. The fast transformer runs on every position whose label is a semantic token, teacher-forced with that
frame's codes, position 0 included.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from s2studio.model.dual_ar import DualAR
from s2studio.train.data import CODEBOOK_PAD, IGNORE, Batch

# The model trains in the checkpoint's dtype with float32 activations, as upstream does: torch's RMSNorm of the
# q/k norms then takes its composite path (the values upstream's run computes) and says so once per process in a
# UserWarning that only alarms a person watching the terminal. That notice, and only it, is silenced.
warnings.filterwarnings("ignore", message=r"Mismatch dtype between input and weight: .*Cannot dispatch to fused",
                        category=UserWarning)


def _layer(layer: torch.nn.Module, x: Tensor, freqs_cis: Tensor, mask: Tensor) -> Tensor:
    """One block, checkpointed as upstream trains it; without a gradient to carry there is nothing to save."""
    if x.requires_grad and torch.is_grad_enabled():
        return checkpoint(layer, x, freqs_cis, mask, None, use_reentrant=True)  # type: ignore[return-value]
    return layer(x, freqs_cis, mask, None)


def forward_train(model: DualAR, batch: Batch) -> tuple[Tensor, Tensor]:
    """(token logits (B, S, V), codebook logits (M, K, C)) for a collated batch."""
    c = model.config
    inputs, labels = batch.inputs, batch.labels
    seq_len = inputs.size(2)
    x = model.embed(inputs, training=True)
    freqs_cis = model.freqs_cis[:seq_len]
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=inputs.device).tril()
    mask = causal[None, None] & batch.padding[:, None, None, :].logical_not()
    for layer in model.layers:
        x = _layer(layer, x, freqs_cis, mask)
    slow_out = model.norm(x)
    token_logits = F.linear(slow_out, model.embeddings.weight) if c.tie_word_embeddings else model.output(slow_out)
    hidden = slow_out if c.norm_fastlayer_input else x

    n = c.num_codebooks
    fast_mask = torch.ones(n, n, dtype=torch.bool, device=inputs.device).tril()[None, None]
    fast_freqs_cis = model.fast_freqs_cis[:n]
    token_labels = labels[:, 0]
    semantic = (token_labels >= c.semantic_begin_id) & (token_labels <= c.semantic_end_id)
    h = hidden[semantic]
    if h.shape[0] == 0:  # upstream's dummy when no position needs the fast transformer
        h = torch.zeros((4, c.slow.dim), device=h.device, dtype=h.dtype)
        codebooks = torch.zeros((h.shape[0], n - 1), device=h.device, dtype=torch.int)
    else:
        codebooks = labels[:, 1:, :].permute(0, 2, 1)[semantic][:, :-1]
    h = model.fast_project_in(h)
    h = torch.cat([h[:, None], model.fast_embeddings(codebooks)], dim=1)
    for layer in model.fast_layers:
        h = _layer(layer, h, fast_freqs_cis, fast_mask)
    return token_logits, model.fast_output(model.fast_norm(h))


@dataclass(frozen=True)
class Losses:
    loss: Tensor
    base_loss: Tensor
    semantic_loss: Tensor
    top_5_accuracy: Tensor


def losses(model: DualAR, batch: Batch) -> Losses:
    """Upstream's loss: next-token cross-entropy on the labelled positions plus the codebooks' cross-entropy."""
    c = model.config
    labels = batch.labels
    token_logits, codebook_logits = forward_train(model, batch)
    base_loss = F.cross_entropy(token_logits.view(-1, token_logits.size(-1)), labels[:, 0].reshape(-1),
                                ignore_index=IGNORE)
    ids = labels[:, 0]
    semantic = (ids >= c.semantic_begin_id) & (ids <= c.semantic_end_id)
    codebook_labels = labels[:, 1:1 + c.num_codebooks].permute(0, 2, 1)[semantic]
    semantic_loss = F.cross_entropy(codebook_logits.reshape(-1, codebook_logits.size(-1)), codebook_labels.reshape(-1),
                                    ignore_index=IGNORE)
    return Losses(base_loss + semantic_loss, base_loss, semantic_loss, _top5(codebook_logits, codebook_labels))


@torch.no_grad()
def _top5(logits: Tensor, labels: Tensor) -> Tensor:
    """Share of real codes (not ignored, not the pad code 0) found among the 5 best logits."""
    mask = (labels != IGNORE) & (labels != CODEBOOK_PAD)
    if mask.sum() == 0:
        return torch.tensor(0.0, device=logits.device)
    _, indices = logits.topk(5, dim=-1)
    correct = indices.eq(labels.unsqueeze(-1))
    correct[~mask] = 0
    return correct.sum() / mask.sum()
