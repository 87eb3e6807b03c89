"""The random stream from the seed to the first batch, as upstream consumes it (spec s2-lora.md §2).

Upstream seeds torch's CPU generator, builds the whole model with random weights (every layer's constructor,
then `_init_weights`), overwrites them with the checkpoint, builds each loralib layer (its base weight initialised
twice) and draws A (linear) or B (embedding), and only then draws the data loader's base seed, which seeds every
sample. To get upstream's batches for the same seed, the generator must be where upstream's is, without building
a random model: the draws are counted from the shapes (spec §2.3: a float32 `uniform_` takes one raw word per
element, a `normal_` of n >= 16 elements n words plus 16 when n is not a multiple of 16) and made as raw draws of
the same count, in large blocks. Only a `normal_` of fewer than 16 elements (never met in S2's shapes) has a
serial path with a cached value, and is made for real.

About 18 G words for S2's shape: a minute of block draws on one core, done once per run.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from s2studio.model.config import DualARConfig, TransformerConfig
from s2studio.train.layers import LoraInit
from s2studio.train.presets import LoraPreset, lora_targets

BLOCK = 1 << 24
"""Raw words drawn per block when advancing (64 MiB of float32)."""


class Draws:
    """Counts raw words and draws them in blocks before the next real draw (`flush`)."""

    def __init__(self, generator: torch.Generator | None = None) -> None:
        self.generator = generator or torch.default_generator
        self.pending = 0
        self.total = 0

    def skip(self, words: int) -> None:
        self.pending += words
        self.total += words

    def flush(self) -> None:
        advance(self.generator, self.pending)
        self.pending = 0

    def normal(self, numel: int) -> None:
        """`normal_()` on a float32 tensor of `numel` elements."""
        if numel < 16:
            self.flush()
            torch.empty(numel).normal_(generator=self.generator)
        else:
            self.skip(numel + (16 if numel % 16 else 0))

    def linear(self, n_in: int, n_out: int, bias: bool) -> None:
        """`nn.Linear.reset_parameters`: kaiming-uniform weight, uniform bias."""
        self.skip(n_in * n_out + (n_out if bias else 0))


def advance(generator: torch.Generator, words: int) -> None:
    """Move `generator` on by `words` raw 32-bit draws (float32 `uniform_` draws one word per element)."""
    if words <= 0:
        return
    block = torch.empty(min(words, BLOCK))
    while words > 0:
        n = min(words, BLOCK)
        block[:n].uniform_(generator=generator)
        words -= n


def _linears(c: TransformerConfig) -> list[tuple[int, int, bool]]:
    one = [(c.dim, c.q_size + 2 * c.kv_size, c.qkv_bias), (c.q_size, c.dim, c.o_bias),
           (c.dim, c.intermediate_size, False), (c.dim, c.intermediate_size, False), (c.intermediate_size, c.dim, False)]
    return one * c.n_layer


def model_init_draws(config: DualARConfig, draws: Draws) -> None:
    """What `DualARTransformer(config)` draws on upstream: the constructors, then `_init_weights`' normal_(0, 0.02)
    over every Linear and Embedding weight (biases zeroed, norms untouched)."""
    c = config
    embeddings = [c.vocab_size * c.slow.dim, c.codebook_size * c.num_codebooks * c.slow.dim, c.codebook_size * c.fast.dim]
    linears = _linears(c.slow)
    if not c.tie_word_embeddings:
        linears.append((c.slow.dim, c.vocab_size, False))
    if c.fast_has_projection:
        linears.append((c.slow.dim, c.fast.dim, True))
    linears += _linears(c.fast) + [(c.fast.dim, c.codebook_size, False)]
    for numel in embeddings:
        draws.normal(numel)
    for n_in, n_out, bias in linears:
        draws.linear(n_in, n_out, bias)
    for numel in embeddings:
        draws.normal(numel)
    for n_in, n_out, _ in linears:
        draws.normal(n_in * n_out)


def initial_lora(config: DualARConfig, preset: LoraPreset, injected: LoraInit | None = None,
                 generator: torch.Generator | None = None) -> LoraInit:
    """Upstream's initial A and B, drawn where upstream draws them (after the model's random init and each loralib
    layer's two base initialisations). With `injected`, its A/B are used instead, but the generator still moves
    exactly as far as the real draws would have moved it, so the batches that follow are upstream's."""
    draws = Draws(generator)
    model_init_draws(config, draws)
    out: LoraInit = {}
    for t in lora_targets(config, preset):
        if t.embedding:
            draws.normal(t.n_in * t.n_out)
            draws.normal(t.n_in * t.n_out)
            a, b = torch.zeros((preset.r, t.n_in)), torch.empty((t.n_out, preset.r))
            if injected is None:
                draws.flush()
                nn.init.normal_(b, generator=draws.generator)
            else:
                draws.normal(b.numel())
        else:
            draws.linear(t.n_in, t.n_out, t.bias)
            draws.linear(t.n_in, t.n_out, t.bias)
            a, b = torch.empty((preset.r, t.n_in)), torch.zeros((t.n_out, preset.r))
            if injected is None:
                draws.flush()
                nn.init.kaiming_uniform_(a, a=math.sqrt(5), generator=draws.generator)
            else:
                draws.skip(a.numel())
        out[t.path] = (a, b)
    draws.flush()
    if injected is None:
        return out
    return {path: _injected(injected, path, a.shape, b.shape) for path, (a, b) in out.items()}


def _injected(injected: LoraInit, path: str, a_shape: torch.Size, b_shape: torch.Size) -> tuple[torch.Tensor, torch.Tensor]:
    if path not in injected:
        raise ValueError(f"the initial LoRA has no {path}")
    a, b = injected[path]
    if tuple(a.shape) != tuple(a_shape) or tuple(b.shape) != tuple(b_shape):
        raise ValueError(f"the initial LoRA's {path} is {tuple(a.shape)}/{tuple(b.shape)}, the preset needs "
                         f"{tuple(a_shape)}/{tuple(b_shape)}")
    return a.detach().to(torch.float32).clone(), b.detach().to(torch.float32).clone()


def base_seed(generator: torch.Generator | None = None) -> int:
    """The data loader's base seed: one int64 `random_()` on the generator (two raw words)."""
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())
