"""The fast path's fused step ops on the CPU (`cpu_step.cpp`, built into the kernels' library by `cpu_gemv.py`).

`model/fast_forward.py` declares what a step may fuse (`StepOps`); this is the C++ implementation of it, for a
float32 model on the CPU. `step_ops` returns it where it applies, None elsewhere (CUDA, another dtype, no
compiler, `S2STUDIO_CPU_KERNELS=0`): the torch code then runs unchanged.
"""

from __future__ import annotations

import torch
from torch import Tensor

from s2studio.engine.weights import cpu_gemv
from s2studio.model.fast_forward import LayerCache, StepOps, norm_eps
from s2studio.model.transformer import Attention


class CpuStepOps:
    """`StepOps` by the C++ kernels. A step of up to `max_positions` positions (decode steps: 1; the fast
    transformer's first pass: 2) takes this route; longer prefills keep torch's batched kernels."""

    max_positions = 2

    def rms_norm(self, x: Tensor, weight: Tensor, eps: float) -> Tensor:
        return torch.ops.s2studio_cpu.rms_norm(x, weight, eps)

    def add_rms_norm(self, x: Tensor, delta: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        return torch.ops.s2studio_cpu.add_rms_norm(x, delta, weight, eps)

    def silu_mul(self, a: Tensor, b: Tensor) -> Tensor:
        return torch.ops.s2studio_cpu.silu_mul(a, b)

    def attend(self, attn: Attention, qkv: Tensor, rope: Tensor, cache: LayerCache, pos: int) -> Tensor:
        if attn.qk_norm:
            q_norm, k_norm, eps = attn.q_norm.weight, attn.k_norm.weight, norm_eps(attn.q_norm)
        else:
            q_norm = k_norm = None
            eps = 0.0
        return torch.ops.s2studio_cpu.attend(qkv, q_norm, k_norm, eps, rope, cache.k, cache.v, pos, attn.n_head,
                                             attn.n_local_heads)

    # the fast sampler's draws (engine/s2/fast.py: FastSampler), not part of the model's StepOps

    def top(self, logits: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
        """`FastSampler.top` in one call: (top-k values, their rows, cumulative probabilities over all rows)."""
        return torch.ops.s2studio_cpu.top_k_cum(logits, k)

    def kept_draw(self, values: Tensor, rows: Tensor, cum: Tensor, temperature: Tensor, top_p: Tensor, u: Tensor,
                  ids: Tensor | None) -> Tensor:
        """`FastSampler.kept` then `draw` with the uniforms `u` already drawn: (1,) int32, `ids[rows]`'s winner."""
        return torch.ops.s2studio_cpu.kept_draw(values, rows, cum, temperature, top_p, u, ids)


def step_ops(device: torch.device, dtype: torch.dtype) -> StepOps | None:
    """The C++ step ops for a model on `device` in `dtype`, or None where they do not apply (then torch's)."""
    if device.type != "cpu" or dtype != torch.float32 or not cpu_gemv.available():
        return None
    return CpuStepOps()
