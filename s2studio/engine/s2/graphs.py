"""The fast path's frame tail as one CUDA graph (NVIDIA only; opt-in, `FastSampler(graphs=True)`).

On a GPU an eager frame is bound by kernel launches, not by the GPU: S2's fast part alone is ~1,200 small
kernels (9 passes of 4 layers, 11 draws), each ~5-10 µs of host time. Everything after the slow step has fixed
shapes — the 4097 allowed logits, the fast model's 10-slot cache, positions 0..9 — so it is captured once and
replayed per frame: the two main-token draws, the repetition check, the ten fast positions and their nine draws.
The slow step stays eager: its attention reads a cache prefix that grows every frame.

What makes one graph serve every frame:
- inputs are copied into fixed tensors (`logits`, `hidden`); "is this the prompt's frame" is a 0-d bool tensor
  (`check`), and the RAS window's write position a 0-d tensor (`slot`), so nothing branches in Python;
- the draws come from the request's generator, registered with the graph, so each replay advances its stream as
  the eager kernels would; the warm-up runs on a copy of the generator so that it consumes nothing.

Status: written and reviewed without a GPU at hand; tests/test_fast_cuda.py checks it (codes equal to the eager
fast path's) wherever CUDA is present.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import Tensor

from s2studio.engine.s2.sampling import RAS_WINDOW

WARMUP_RUNS = 2
"""Eager runs on a side stream before capture, as torch's CUDA-graph notes ask (lazy init, allocator)."""


class TailSampler(Protocol):
    """What the graph needs of `fast.FastSampler` (named here so that this module does not import fast.py, which
    imports it): its decoder, generator and repetition window, and the two graph-safe halves of a frame."""

    decoder: Any
    generator: torch.Generator
    window: Tensor

    def main_token(self, logits: Tensor, check: bool | Tensor) -> Tensor: ...

    def codes(self, main: Tensor, hidden: Tensor) -> Tensor: ...


class FrameTailGraph:
    def __init__(self, sampler: TailSampler) -> None:
        d = sampler.decoder
        if d.device.type != "cuda":
            raise ValueError("CUDA graphs need the model on a CUDA device")
        self.sampler = sampler
        self.logits = torch.zeros((1, 1, d.ids.numel()), dtype=d.dtype, device=d.device)
        self.hidden = torch.zeros((1, 1, d.model.config.fast.dim), dtype=d.dtype, device=d.device)
        self.check = torch.zeros((), dtype=torch.bool, device=d.device)
        self.slot = torch.zeros((), dtype=torch.long, device=d.device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.out: Tensor | None = None

    def body(self) -> Tensor:
        """`FastSampler.frame` on the fixed tensors, graph-safe."""
        s = self.sampler
        main = s.main_token(self.logits, self.check)
        frame = s.codes(main, self.hidden)
        slot = self.slot.view(1)
        s.window.index_copy_(0, slot, torch.where(self.check, main, s.window.index_select(0, slot)))
        self.slot.copy_((self.slot + self.check.long()) % RAS_WINDOW)
        return frame

    def capture(self) -> None:
        s = self.sampler
        request = s.generator
        scratch = torch.Generator(device=request.device)
        scratch.set_state(request.get_state())
        window, slot = s.window.clone(), self.slot.clone()
        side = torch.cuda.Stream(device=self.logits.device)
        side.wait_stream(torch.cuda.current_stream())
        try:
            s.generator = scratch  # the warm-up must not move the request's random stream
            with torch.cuda.stream(side):
                for _ in range(WARMUP_RUNS):
                    self.body()
            torch.cuda.current_stream().wait_stream(side)
            s.generator = request
            s.window.copy_(window)
            self.slot.copy_(slot)
            graph = torch.cuda.CUDAGraph()
            graph.register_generator_state(request)
            with torch.cuda.graph(graph):
                self.out = self.body()
        finally:
            s.generator = request
        self.graph = graph

    def run(self, logits: Tensor, hidden: Tensor, check: bool) -> Tensor:
        """The frame (1 + K, 1) int32, a copy (the next replay overwrites the graph's output)."""
        self.logits.copy_(logits.view_as(self.logits))
        self.hidden.copy_(hidden.view_as(self.hidden))
        self.check.fill_(check)
        if self.graph is None:
            self.capture()
        self.graph.replay()
        return self.out.clone()
