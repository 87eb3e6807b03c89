"""S2's sampler, op for op as upstream's `inference.py` (spec §6).

Bit-exactness with upstream's seeded runs depends on more than the formula: the order of the ops
(top-p is decided on the *un-tempered* logits, temperature is applied after masking), the dtype of
temperature and top-p (0-d tensors in the model dtype, so bf16 rounds 0.8 to 0.80078125), and the
exact sequence of random draws. Every frame consumes 2 vocabulary-sized and 9 codebook-sized
uniform vectors from the request's generator, in this order, whether or not a draw is used:

1. main token at the request's temperature/top-p, 2. the repetition-aware fallback at 1.0/0.9,
3..11. codebooks 1..9 from the fast transformer.

A draw is `argmax(probs / -log(u))` (an exponential race, no `torch.multinomial` sync). We draw
`u` with `uniform_` from a per-request `torch.Generator`; on CPU its stream equals upstream's
`rand_like` on the global generator after `torch.manual_seed` (tested).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

RAS_WINDOW = 10
"""Frames of main tokens the repetition check looks back over."""
RAS_TEMPERATURE = 1.0
RAS_TOP_P = 0.9


def request_constants(temperature: float, top_p: float, device: torch.device | str,
                      dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(temperature, top-p, the repetition fallback's temperature and top-p) as 0-d tensors in the model dtype, made
    once per request as upstream makes them (so bf16 rounds 0.8 to 0.80078125); both samplers hold these."""
    return tuple(torch.tensor(v, device=device, dtype=dtype)  # type: ignore[return-value]
                 for v in (temperature, top_p, RAS_TEMPERATURE, RAS_TOP_P))


def logits_to_probs(logits: Tensor, temperature: Tensor, top_p: Tensor, top_k: int) -> Tensor:
    """Top-k, top-p and temperature on 1-D logits; returns probabilities of the same dtype.

    The token whose cumulative probability first exceeds `top_p` is itself removed (`>`, no
    shift), and the best token is always kept.
    """
    sorted_logits, sorted_idx = torch.sort(logits, descending=True)
    cum = torch.cumsum(torch.softmax(sorted_logits, dim=-1), dim=-1)
    ranks = torch.arange(sorted_logits.shape[-1], device=logits.device)
    remove = (cum > top_p) | (ranks >= top_k)
    remove[..., 0].fill_(False)  # a view write, so no device round trip on GPU
    remove = remove.scatter(-1, sorted_idx, remove)
    logits = torch.where(remove, float("-inf"), logits)
    logits = logits / torch.clip(temperature, min=1e-5)
    return torch.softmax(logits, dim=-1)


def draw(probs: Tensor, generator: torch.Generator) -> Tensor:
    """One index from `probs` (1-D) as a (1,) int32 tensor; consumes `probs.numel()` uniforms."""
    u = torch.empty_like(probs).uniform_(generator=generator)
    return torch.argmax(probs / -torch.log(u), dim=-1, keepdim=True).to(torch.int32)


def sample(logits: Tensor, temperature: Tensor, top_p: Tensor, top_k: int, generator: torch.Generator) -> Tensor:
    """`sample`: draw from the last position of (1, S, V) logits."""
    return draw(logits_to_probs(logits[0, -1], temperature, top_p, top_k), generator)


class FastModel(Protocol):
    """The part of DualAR a frame needs after the slow step."""

    fast_embeddings: torch.nn.Embedding

    def forward_fast(self, x: Tensor, pos: int) -> Tensor: ...


class FrameSampler:
    """Turns one slow step's logits and hidden state into a frame (1 + codebooks, 1), int32.

    Holds the request's constants, made once as upstream makes them: the -inf/0 bias that allows
    only semantic tokens and `<|im_end|>` (not `<|im_end|>` with `ignore_eos`), and `request_constants`.
    """

    def __init__(self, *, vocab_size: int, codebook_size: int, num_codebooks: int, semantic_begin_id: int,
                 semantic_end_id: int, im_end_id: int, temperature: float, top_p: float, top_k: int,
                 generator: torch.Generator, device: torch.device | str, dtype: torch.dtype,
                 ignore_eos: bool = False) -> None:
        self.codebook_size = codebook_size
        self.num_codebooks = num_codebooks
        self.semantic_begin_id = semantic_begin_id
        self.semantic_end_id = semantic_end_id
        self.im_end_id = im_end_id
        self.top_k = top_k
        self.generator = generator
        self.temperature, self.top_p, self.ras_temperature, self.ras_top_p = request_constants(
            temperature, top_p, device, dtype)
        bias = torch.full((1, 1, vocab_size), float("-inf"), device=device, dtype=dtype)
        bias[0, 0, semantic_begin_id:semantic_end_id + 1] = 0.0
        if not ignore_eos:
            bias[0, 0, im_end_id] = 0.0
        self.bias = bias

    def frame(self, model: FastModel, logits: Tensor, hidden: Tensor, previous: Tensor | None) -> Tensor:
        """`decode_one_token_ar` after the slow forward. `previous`: the (1 + K, RAS_WINDOW) window of
        recent frames, or None for the prompt's frame (no repetition check)."""
        g = self.generator
        biased = logits + self.bias
        main = sample(biased, self.temperature, self.top_p, self.top_k, g)
        fallback = sample(biased, self.ras_temperature, self.ras_top_p, self.top_k, g)
        if previous is not None:
            repeated = (previous[0] == main).any()
            semantic = (main >= self.semantic_begin_id) & (main <= self.semantic_end_id)
            main = torch.where(repeated & semantic, fallback, main)
        codes = [main]
        model.forward_fast(hidden, 0)  # position 0 fills the fast cache; its logits are not used
        code = torch.clamp(main - self.semantic_begin_id, min=0, max=self.codebook_size - 1)
        codes.append(code)
        for k in range(1, self.num_codebooks):
            x = model.fast_embeddings(code).view(1, 1, -1)
            code = sample(model.forward_fast(x, k), self.temperature, self.top_p, self.top_k, g)
            codes.append(code)
        return torch.stack(codes, dim=1).T
