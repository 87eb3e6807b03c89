"""The fast path's fused step ops on the CPU (`cpu_step.cpp`, built into the kernels' library by `kernel_build.py`).

`model/fast_forward.py` declares what a step may fuse (`StepOps`); this is the C++ implementation of it, for a
float32 model on the CPU. `step_ops` returns it where it applies, None elsewhere (CUDA, another dtype, no
kernels built, `S2STUDIO_CPU_KERNELS=0`): the torch code then runs unchanged.

A step of a few positions runs a whole stack of layers in one call (`layers_step`): the layers' weights, norms and
caches are handed to C++ once (`Stack`, built at the first step and again whenever a linear layer was replaced,
as merging a LoRA into a narrowed model does), because at batch 1 each Python call costs ~5-10 us whatever it
computes, and a small model's frame made ~200 of them. A layer type the C++ side does not know (a training
wrapper, a future kernel) keeps the per-op route (`fast_forward.step_layers` over the small ops below).
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from s2studio.engine.weights import cpu_gemv
from s2studio.engine.weights.bf16 import Bf16Linear
from s2studio.engine.weights.int4 import Int4Linear
from s2studio.engine.weights.int8 import Int8Linear
from s2studio.engine.weights.narrow import RowsLinear
from s2studio.model.dual_ar import DualAR
from s2studio.model.fast_forward import FastCaches, LayerCache, StepOps, norm_eps, step_layers
from s2studio.model.transformer import Attention, TransformerBlock

log = logging.getLogger(__name__)

FLOAT, TORCH_FLOAT, BF16, INT8, INT4 = range(5)
"""`LinearKind` of cpu_step.cpp: which kernel multiplies a layer's weights. FLOAT layers too large to stay in cache
become TORCH_FLOAT there (`kSmallFloat`: torch's threaded GEMV, as nn.Linear's); `Linear.kind()` says which."""


def linear_of(module: nn.Module) -> torch.ScriptObject | None:
    """`module` as the C++ `Linear` (its kind and weights, shared, not copied), or None for a type it does not take.

    Exact types, not isinstance: a subclass (a LoRA training wrapper) may compute something else."""
    make = torch.classes.s2studio_cpu.Linear
    kind = type(module)
    if kind is Bf16Linear:
        return make(BF16, module.bits, None, 0, module.bias)
    if kind is Int8Linear:
        return make(INT8, module.weight_q, module.scale, 0, module.bias)
    if kind is Int4Linear:
        return None if module.nibbles is None else make(INT4, module.nibbles, module.range_bits, module.group, None)
    if kind is nn.Linear or kind is RowsLinear:
        w = module.weight
        if w.dtype != torch.float32 or w.device.type != "cpu" or not w.is_contiguous():
            return None
        return make(FLOAT, w, None, 0, getattr(module, "bias", None))
    return None


def linears(layers: Sequence[TransformerBlock], output: nn.Module | None) -> list[nn.Module]:
    """Every linear layer a `Stack` holds, in a fixed order (what is checked before each step)."""
    found: list[nn.Module] = []
    for layer in layers:
        attn, ffn = layer.attention, layer.feed_forward
        found += (attn.wqkv, attn.wo, ffn.w1, ffn.w3, ffn.w2)
    if output is not None:
        found.append(output)
    return found


def build_stack(layers: Sequence[TransformerBlock], caches: Sequence[LayerCache], norm: nn.Module,
                output: nn.Module | None) -> torch.ScriptObject | None:
    """The C++ `Stack` of `layers` writing `caches`, then `norm` (and `output` after it), or None where a layer's
    type is not one it takes."""
    stack = torch.classes.s2studio_cpu.Stack(norm.weight, norm_eps(norm))
    for layer, cache in zip(layers, caches, strict=True):
        attn, ffn = layer.attention, layer.feed_forward
        made = [linear_of(m) for m in (attn.wqkv, attn.wo, ffn.w1, ffn.w3, ffn.w2)]
        if any(m is None for m in made):
            return None
        q_norm, k_norm, eps = qk_norms(attn)
        stack.add_layer(layer.attention_norm.weight, norm_eps(layer.attention_norm), layer.ffn_norm.weight,
                        norm_eps(layer.ffn_norm), q_norm, k_norm, eps, attn.n_head, attn.n_local_heads, cache.k,
                        cache.v, *made)
    if output is not None:
        head = linear_of(output)
        if head is None:
            return None
        stack.set_output(head)
    return stack


def qk_norms(attn: Attention) -> tuple[Tensor | None, Tensor | None, float]:
    """(q_norm weight, k_norm weight, their epsilon) of an attention with qk-norm, else (None, None, 0)."""
    if attn.qk_norm:
        return attn.q_norm.weight, attn.k_norm.weight, norm_eps(attn.q_norm)
    return None, None, 0.0


@dataclass
class Built:
    """A `Stack` and what it was built from: it serves a step only while every linear layer is still the one it
    holds (the stack keeps references to all of them, so their ids cannot be reused meanwhile)."""

    layers: Sequence[TransformerBlock]
    caches: Sequence[LayerCache]
    linears: list[nn.Module]
    stack: torch.ScriptObject | None


class CpuStepOps:
    """`StepOps` by the C++ kernels. A step of up to `max_positions` positions (decode steps: 1; the fast
    transformer's first pass: 2) takes this route; longer prefills keep torch's batched attention with the norms
    and silu·mul here."""

    max_positions = 2

    def __init__(self) -> None:
        self._stacks: dict[tuple[int, int], Built] = {}

    def rms_norm(self, x: Tensor, weight: Tensor, eps: float) -> Tensor:
        return torch.ops.s2studio_cpu.rms_norm(x, weight, eps)

    def add_rms_norm(self, x: Tensor, delta: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        return torch.ops.s2studio_cpu.add_rms_norm(x, delta, weight, eps)

    def silu_mul(self, a: Tensor, b: Tensor) -> Tensor:
        return torch.ops.s2studio_cpu.silu_mul(a, b)

    def attend(self, attn: Attention, qkv: Tensor, rope: Tensor, cache: LayerCache, pos: int) -> Tensor:
        q_norm, k_norm, eps = qk_norms(attn)
        return torch.ops.s2studio_cpu.attend(qkv, q_norm, k_norm, eps, rope, cache.k, cache.v, pos, attn.n_head,
                                             attn.n_local_heads)

    def layers_step(self, layers: Sequence[TransformerBlock], caches: Sequence[LayerCache], x: Tensor, rope: Tensor,
                    start: int, norm: nn.Module) -> tuple[Tensor, Tensor]:
        stack = self.stack(layers, caches, norm)
        if stack is None:
            return step_layers(layers, caches, x, rope, start, self, norm)
        return torch.ops.s2studio_cpu.stack_step(stack, x, rope, start)

    def stack(self, layers: Sequence[TransformerBlock], caches: Sequence[LayerCache], norm: nn.Module,
              output: nn.Module | None = None) -> torch.ScriptObject | None:
        """The C++ `Stack` of these layers and caches (built now if none is, or a linear layer was replaced since),
        or None where the layers are not all of types it takes."""
        key = (id(layers), id(caches), id(output))  # the fast stack with its head (fast_codes) and without
        built = self._stacks.get(key)
        current = linears(layers, output)
        if (built is None or built.layers is not layers or built.caches is not caches
                or len(built.linears) != len(current) or not all(map(operator.is_, built.linears, current))):
            try:
                stack = build_stack(layers, caches, norm, output)
            except RuntimeError as exc:  # a kernel's signature changed, a bias in another dtype: per-op route
                log.warning("fused CPU step unavailable, the per-op route serves it: %s", exc)
                stack = None
            built = self._stacks[key] = Built(layers, caches, current, stack)
        return built.stack

    # the fast sampler's draws (engine/s2/fast.py: FastSampler), not part of the model's StepOps

    def top(self, logits: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
        """`FastSampler.top` in one call: (top-k values, their rows, cumulative probabilities over all rows)."""
        return torch.ops.s2studio_cpu.top_k_cum(logits, k)

    def kept_draw(self, values: Tensor, rows: Tensor, cum: Tensor, temperature: Tensor, top_p: Tensor, u: Tensor,
                  ids: Tensor | None) -> Tensor:
        """`FastSampler.kept` then `draw` with the uniforms `u` already drawn: (1,) int32, `ids[rows]`'s winner."""
        return torch.ops.s2studio_cpu.kept_draw(values, rows, cum, temperature, top_p, u, ids)

    def main_token(self, logits: Tensor, ids: Tensor, generator: torch.Generator, constants: Sequence[Tensor],
                   top_k: int, size: int, window: Tensor, check: bool, slot: int, semantic: tuple[int, int]) -> Tensor:
        """`FastSampler.main_token` and its window update in one call: `top`, the main draw and the repetition
        fallback's draw over `size` uniforms each (`constants`: temperature, top-p, and the fallback's), the check
        against `window` (`check`) for a token in the `semantic` id range, then window[slot] = the token (slot >= 0)."""
        return torch.ops.s2studio_cpu.main_token(logits, ids, generator, *constants, top_k, size, window, check, slot,
                                                 *semantic)

    def fast_codes(self, model: DualAR, caches: FastCaches, hidden: Tensor, code0: int, generator: torch.Generator,
                   temperature: Tensor, top_p: Tensor, top_k: int, size: int) -> Tensor | None:
        """`FastSampler.codes` after code 0 in one call: the fast transformer's passes, each with `top` and `pick`
        over `size` uniforms from `generator`; codes 1..K-1 as int32, or None where the fast layers are not all of
        types the C++ stack takes (the caller then runs its own loop)."""
        stack = self.stack(model.fast_layers, caches.fast, model.fast_norm, model.fast_output)
        if stack is None:
            return None
        return torch.ops.s2studio_cpu.fast_codes(stack, model.fast_embeddings.weight, hidden, code0, generator,
                                                 caches.fast_rope, temperature, top_p, top_k, size,
                                                 model.config.num_codebooks)


    # several streams at once (engine/s2/batch.py), each through its own caches' stacks

    def streams_step(self, stacks: Sequence[torch.ScriptObject], x: Tensor, rope: Tensor, positions: Sequence[int]
                     ) -> tuple[Tensor, Tensor]:
        """`layers_step` for B streams: stream b's rows x[b] (S, dim) through stacks[b] (the same layers, its own
        caches) at positions[b].. with RoPE rows rope[b]; every row the bits it gets alone (`Stack::steps`)."""
        return torch.ops.s2studio_cpu.stacks_step(list(stacks), x, rope, list(positions))

    def fast_codes_streams(self, stacks: Sequence[torch.ScriptObject], model: DualAR, rope: Tensor, hidden: Tensor,
                           code0: Sequence[int], generators: Sequence[torch.Generator], temperature: Tensor,
                           top_p: Tensor, top_k: Sequence[int], size: int) -> Tensor:
        """`fast_codes` for B streams at once: stream b's codes 1..K-1 (row b of the (B, K - 1) int32 result) through
        stacks[b] (the fast stack with its head, its own caches; `rope` the fast RoPE table they share), drawn from
        generators[b] at temperature[b], top_p[b] (float32) and top_k[b], in the order of a stream alone."""
        return torch.ops.s2studio_cpu.fast_codes_batch(list(stacks), model.fast_embeddings.weight, hidden,
                                                       list(code0), list(generators), rope, temperature, top_p,
                                                       list(top_k), size, model.config.num_codebooks)

def step_ops(device: torch.device, dtype: torch.dtype) -> StepOps | None:
    """The C++ step ops for a model on `device` in `dtype`, or None where they do not apply (then torch's)."""
    if device.type != "cpu" or dtype != torch.float32 or not cpu_gemv.available():
        return None
    return CpuStepOps()
