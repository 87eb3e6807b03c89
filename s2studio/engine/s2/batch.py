"""Many streams at once on the fast path: `BatchDecoder`, driven by a scheduler one frame at a time.

A decode step reads every weight of the model once; on a CPU that read is most of its time at one stream, so
stepping B requests ("streams") together costs little more than one until the multiplies catch up. Each stream keeps
everything a request alone has: its prompt and position, its own KV caches (a slot: a `FastDecoder` sized to the
request, which keeps its prefix for the next request on that slot), its own `FastSampler` (generator, constants,
repetition window). A step advances every running stream by one frame: each stream's main token from its own
logits and generator, the fast transformer's nine passes for all streams at once, then one slow step for all of
them. On the CPU (float32, the C++ kernels: `CpuStepOps`) the linear layers take the streams' rows in one pass
over their weights and compute each row as it would be alone (`cpu_gemv.cpp`'s tiles), the attention and the draws
are each stream's own: **a stream's codes are the codes of the same request alone** (`generate_frames_fast` on a
fresh `FastDecoder` of the same `length` and `piece`), bit for bit, whatever streams run beside it and whenever
they joined or left. Elsewhere (CUDA, or a CPU without the kernels) the same step runs in torch's ops
(`model/stream_forward.py`): the same math, one product per layer for all streams, whose rounding may depend on
the batch. The exact mode stays one stream (`generate.ExactDecoder`).

How a scheduler drives it (one engine thread; nothing here is thread-safe):

    decoder = BatchDecoder(model, tokenizer.im_end_id, length=FAST_CONTEXT)
    loop:
        while queue and (slot := decoder.admit(prompt, sampling, generator)) is not None:
            remember slot -> request                 # None: no free slot or no memory now; keep it queued
        decoder.prefill()                            # one piece of the oldest prompt not yet prefilled (or none)
        for frame in decoder.step():                 # every prefilled stream advances one frame
            if frame.codes is not None: hand frame.codes ((K,) int64) to that request's audio
            if frame.finished: that request ended ("end": <|im_end|>, "limit": its frame budget), its slot is free
        for a request cancelled meanwhile: decoder.cancel(slot)   # that stream only, at once

- `admit` takes the request's (1 + K, T) prompt, its `Sampling` (`max_new_tokens` its frame limit, 0: the
  rest of `length`) and its own `torch.Generator` (seeded as the request alone would be). It picks the free slot
  whose cache holds the longest reusable prefix of the prompt (the next line of a scene comes back to its slot).
  It returns None when every slot is busy or the caches would not fit the memory planned for streams
  (`memory.stream_bytes`: its real length, prompt plus frames): keep the request queued and try again after a
  stream ends. A request that could not fit even alone is a `UserError` (what to shorten).
- `prefill` runs one piece (`fast.piece_ends`: at most `piece` columns, a message at most) of the oldest admitted
  prompt, so that running streams wait about one piece between frames; call it once per step (or in a loop while
  nothing runs). A stream joins the next `step` once its prompt is in; its first frame comes from that step.
- `step` returns one `StreamFrame` per running stream, in slot order: `codes` is a kept frame, or None when the
  stream ended without one (a frame that is `<|im_end|>`, or the last frame a request makes, which the rules of
  `generate_frames_fast` drop); `finished` says it ended and why. An ended stream's slot is free at once.
- `cancel(slot)` drops a stream (prefilling or running) between steps; its slot keeps the prefix it settled.
- `weights_changed()` after a LoRA is merged or removed (every stream shares the weights: only when none runs).
- `max_batch` is the number of slots: from the memory planner (`memory.max_streams` over the free memory at
  construction, streams of `memory.TYPICAL_STREAM` positions) unless given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from s2studio.engine.s2 import memory
from s2studio.engine.s2.fast import PREFILL_PIECE, FastDecoder, FastSampler, allowed_ids, fitted, head_weight
from s2studio.engine.weights.bf16 import Bf16Linear
from s2studio.engine.weights.cpu_step import CpuStepOps, linear_of
from s2studio.engine.weights.int4 import Int4Linear
from s2studio.engine.weights.int8 import Int8Linear
from s2studio.engine.weights.narrow import narrow_head, narrowing_of
from s2studio.errors import UserError
from s2studio.model.dual_ar import DualAR
from s2studio.model.fast_forward import embed
from s2studio.model.stream_forward import forward_fast_streams, forward_slow_streams
from s2studio.settings import Sampling

SLOT_GRAIN = 256
"""A slot's cache holds a multiple of this many positions, so that a scene's growing prompts rarely need a new one."""
KERNEL_LAYERS = (Bf16Linear, Int8Linear, Int4Linear)


@dataclass(frozen=True)
class StreamFrame:
    slot: int
    codes: Tensor | None
    """The kept frame, (num_codebooks,) int64 on the model's device; None when the stream ended without one."""
    finished: str | None = None
    """None while the stream runs on; "end" (`<|im_end|>`) or "limit" (its frame budget, or the context) once ended."""


@dataclass
class Stream:
    """One admitted request on its slot."""

    slot: int
    prompt: Tensor
    sampler: FastSampler
    budget: int
    """Frames it makes at most, the dropped last one included (`generate_frames_fast`'s budget)."""
    ends: list[int] = field(default_factory=list)
    """Where the pieces of its prefill still to run end (`FastDecoder.plan`); empty once its prompt is in."""
    logits: Tensor | None = None
    hidden: Tensor | None = None
    """What the next frame starts from: the last slow step's (or the prefill's) logits and fast input."""
    order: int = field(default=0)


class BatchDecoder:
    """Slots of `FastDecoder` caches over one model and the streams that run on them; see the module's docstring."""

    def __init__(self, model: DualAR, im_end_id: int, *, length: int | None = None, max_batch: int | None = None,
                 memory_bytes: int | None = None, allowed: Tensor | None = None, piece: int = PREFILL_PIECE) -> None:
        c = model.config
        p = model.embeddings.weight
        self.model = model
        self.im_end_id = im_end_id
        self.device, self.dtype = p.device, p.dtype
        self.length = min(length or c.slow.max_seq_len, c.slow.max_seq_len)
        """The context a stream may fill (prompt and frames), as a `FastDecoder` of this length allows alone."""
        self.piece = piece
        self.ids = (allowed_ids(model, im_end_id) if allowed is None else allowed).to(self.device)
        self.head = narrow_head(head_weight(model, self.ids), narrowing_of(model).mode)
        self.dtype_bytes = torch.finfo(self.dtype).bits // 8
        if memory_bytes is None:
            free = memory.free_memory(str(self.device))
            memory_bytes = None if free is None else max(0, free - memory.STREAM_HEADROOM)
        self.memory_bytes = memory_bytes
        """Bytes the streams' caches may take: the free memory at construction less headroom, unless given (None:
        not known on this device; then only `max_batch` limits the streams)."""
        if max_batch is None:
            max_batch = memory.planned_batch(c, room=self.memory_bytes, length=self.length,
                                             dtype_bytes=self.dtype_bytes, device=self.device.type)
        self.max_batch = max(1, max_batch)
        self.slots: list[FastDecoder | None] = [None] * self.max_batch
        self.streams: dict[int, Stream] = {}
        self._admitted = 0
        self._rows: dict[int, tuple[nn.Module, torch.ScriptObject]] = {}
        self._going: list[tuple[Stream, Tensor]] = []
        """The streams `draw` made a frame for, and the frame: their slow step is `advance`'s."""

    # ------------------------------------------------------------------ admission

    def admit(self, prompt: np.ndarray | Tensor, sampling: Sampling, generator: torch.Generator,
              max_new_tokens: int | None = None, ignore_eos: bool = False) -> int | None:
        """Take a request into a free slot (see the module's docstring); its slot, or None to wait.
        `max_new_tokens`: its frame limit (None: `sampling.max_frames`; 0: the rest of the context); `ignore_eos`:
        the request's (`SynthesisRequest.ignore_eos`)."""
        if max_new_tokens is None:
            max_new_tokens = sampling.max_frames
        prompt_t, budget = fitted(self.model, prompt, self.device, self.length, max_new_tokens)
        length = prompt_t.shape[1]
        positions = min(self.length, -(-(length + budget) // SLOT_GRAIN) * SLOT_GRAIN)
        need = memory.stream_bytes(self.model.config, positions, self.dtype_bytes)
        if self.memory_bytes is not None and need > self.memory_bytes:
            raise UserError(f"this request needs {need / memory.GB:.1f} GB for its cache ({length} prompt tokens and "
                            f"up to {budget} frames) but only {self.memory_bytes / memory.GB:.1f} GB is free for "
                            "streams; use a shorter text, fewer references or a lower frame limit")
        free = [slot for slot in range(self.max_batch) if slot not in self.streams]
        if not free:
            return None
        slot = max(free, key=lambda s: self._reusable(s, prompt_t))
        if not self._make_room(slot, positions):
            return None
        decoder = self.slots[slot]
        if decoder is None or decoder.length < positions:
            decoder = self._slot_decoder(slot, positions)
        sampler = decoder.sampler(sampling, generator, ignore_eos)
        sampler.reset_window()
        self._admitted += 1
        self.streams[slot] = Stream(slot, prompt_t, sampler, budget, decoder.plan(prompt_t), order=self._admitted)
        return slot

    def _reusable(self, slot: int, prompt: Tensor) -> int:
        decoder = self.slots[slot]
        return -1 if decoder is None else decoder.reusable(prompt)

    def _slot_bytes(self, slot: int) -> int:
        decoder = self.slots[slot]
        return 0 if decoder is None else memory.stream_bytes(self.model.config, decoder.length, self.dtype_bytes)

    def _make_room(self, slot: int, positions: int) -> bool:
        """Whether `slot` can hold a stream of `positions` within the memory for streams, dropping the caches that
        idle slots keep (their prefixes) as needed, the least recently used first."""
        if self.memory_bytes is None:
            return True
        decoder = self.slots[slot]
        need = 0 if decoder is not None and decoder.length >= positions else (
            memory.stream_bytes(self.model.config, positions, self.dtype_bytes) - self._slot_bytes(slot))
        used = sum(self._slot_bytes(s) for s in range(self.max_batch))
        idle = [s for s in range(self.max_batch) if s != slot and s not in self.streams and self.slots[s] is not None]
        while used + need > self.memory_bytes and idle:
            dropped = idle.pop(0)
            used -= self._slot_bytes(dropped)
            self.slots[dropped] = None
        return used + need <= self.memory_bytes

    def _slot_decoder(self, slot: int, positions: int) -> FastDecoder:
        """The slot's decoder with room for `positions`: a new one, or its old one grown (keeping its prefix)."""
        decoder = self.slots[slot]
        if decoder is None:
            decoder = FastDecoder(self.model, self.im_end_id, length=positions, allowed=self.ids, piece=self.piece)
            decoder.head = self.head  # one head for every slot
        else:
            decoder.grow(positions)
        self.slots[slot] = decoder
        return decoder

    # ------------------------------------------------------------------ prefill, cancel, weights

    def prefill(self) -> int | None:
        """One piece of the oldest admitted prompt not yet in; the slot whose stream it completed (it runs from the
        next `step`), or None (more pieces to go, or nothing to prefill)."""
        waiting = [s for s in self.streams.values() if s.ends]
        if not waiting:
            return None
        stream = min(waiting, key=lambda s: s.order)
        with torch.inference_mode():
            stream.logits, stream.hidden = stream.sampler.decoder.prefill_piece(stream.prompt, stream.ends.pop(0))
        return None if stream.ends else stream.slot

    @property
    def waiting(self) -> bool:
        """Whether a prompt is still being prefilled."""
        return any(s.ends for s in self.streams.values())

    @property
    def running(self) -> list[int]:
        """The slots whose streams step (prefilled)."""
        return sorted(s.slot for s in self.streams.values() if not s.ends)

    def cancel(self, slot: int) -> None:
        """Drop the stream on `slot` (prefilling or running), at once; nothing else changes."""
        self.streams.pop(slot, None)  # its decoder keeps the pieces it settled

    def weights_changed(self) -> None:
        """A LoRA was merged or removed: every slot's prefix is dropped and the head copied again."""
        if self.streams:
            raise RuntimeError("the weights changed while streams run; merge a LoRA between requests only")
        self._going = []
        self.head = narrow_head(head_weight(self.model, self.ids), narrowing_of(self.model).mode)
        for decoder in self.slots:
            if decoder is not None:
                decoder.weights_changed()
                decoder.head = self.head
        self._rows.clear()

    # ------------------------------------------------------------------ one frame for every running stream

    def step(self) -> list[StreamFrame]:
        """Every running stream's next frame and the slow step after it: `draw`, then `advance`."""
        out = self.draw()
        self.advance()
        return out

    def draw(self) -> list[StreamFrame]:
        """Every running stream's next frame (see the module's docstring), without the slow step that lets the
        streams going on draw again (`advance`): a scheduler hands the frames out (and decodes their audio) first,
        so a line's first frame is heard one slow step sooner. A stream cancelled or ended before `advance` is
        not stepped; its slot is free at once."""
        self.advance()
        streams = [self.streams[slot] for slot in self.running]
        if not streams:
            return []
        c = self.model.config
        out: list[StreamFrame] = []
        going: list[tuple[Stream, Tensor]] = []
        with torch.inference_mode():
            mains = []
            for s in streams:  # each from its own logits and generator, as `FastSampler.frame` draws them
                mains.append(s.sampler.next_main(s.logits))
                s.sampler.made += 1
            rest = self._fast_codes(streams, mains)
            for s, main, codes in zip(streams, mains, rest, strict=True):
                made = s.sampler.made
                if made > 1 and int(main[0]) == self.im_end_id:
                    out.append(StreamFrame(s.slot, None, "end"))
                elif made >= s.budget:
                    out.append(StreamFrame(s.slot, None, "limit"))
                else:
                    code = torch.clamp(main - c.semantic_begin_id, min=0, max=c.codebook_size - 1)
                    frame = torch.cat([main, code, codes.to(main.dtype)]).view(-1, 1)
                    out.append(StreamFrame(s.slot, frame[1:, 0].to(torch.long)))
                    going.append((s, frame.to(torch.long)))
            for frame in out:
                if frame.finished:
                    del self.streams[frame.slot]
        self._going = going
        return out

    def advance(self) -> None:
        """The slow step of the frames `draw` made, for the streams still running."""
        going, self._going = [(s, f) for s, f in self._going if self.streams.get(s.slot) is s], []
        if going:
            with torch.inference_mode():
                self._slow_step(going)

    def _cpp(self, streams: Sequence[Stream]) -> bool:
        """Whether the streams step through the C++ kernels (float32 on the CPU)."""
        return all(isinstance(s.sampler.kernels, CpuStepOps) for s in streams)

    def _fast_codes(self, streams: Sequence[Stream], mains: Sequence[Tensor]) -> list[Tensor]:
        """Codes 1..K-1 of each stream's frame: the fast transformer's passes for all streams at once."""
        model, c = self.model, self.model.config
        codes0 = [torch.clamp(main - c.semantic_begin_id, min=0, max=c.codebook_size - 1) for main in mains]
        if c.num_codebooks == 1:  # no draws; the pass a stream alone makes
            return [s.sampler.codes(main, s.hidden)[2:, 0] for s, main in zip(streams, mains, strict=True)]
        hidden = torch.cat([s.hidden.view(1, 1, -1) for s in streams])
        if self._cpp(streams):
            stacks = [s.sampler.kernels.stack(model.fast_layers, s.sampler.decoder.caches.fast, model.fast_norm,
                                              model.fast_output) for s in streams]
            if all(stack is not None for stack in stacks):
                samplers = [s.sampler for s in streams]
                rest = streams[0].sampler.kernels.fast_codes_streams(
                    stacks, model, streams[0].sampler.decoder.caches.fast_rope, hidden.view(len(streams), -1),
                    [int(code) for code in codes0], [s.generator for s in samplers],
                    torch.stack([s.temperature for s in samplers]), torch.stack([s.top_p for s in samplers]),
                    [s.top_k for s in samplers], c.codebook_size)
                return list(rest)
        caches = [s.sampler.decoder.caches for s in streams]
        table = model.fast_embeddings.weight
        x = torch.cat([hidden, torch.cat([nn.functional.embedding(code, table).view(1, 1, -1) for code in codes0])],
                      dim=1)
        drawn: list[list[Tensor]] = [[] for _ in streams]
        start = 0
        for _ in range(1, c.num_codebooks):
            logits = forward_fast_streams(model, caches, x, start)
            for b, s in enumerate(streams):
                values, rows, cum = s.sampler.top(logits[b].reshape(-1))
                drawn[b].append(s.sampler.pick(values, rows, cum, s.sampler.temperature, s.sampler.top_p,
                                               c.codebook_size))
            start += x.shape[1]
            x = torch.cat([nn.functional.embedding(codes[-1], table).view(1, 1, -1) for codes in drawn])
        return [torch.cat(codes) for codes in drawn]

    def _slow_step(self, going: Sequence[tuple[Stream, Tensor]]) -> None:
        """One slow step for the streams that go on, each on its frame at its next position."""
        model = self.model
        streams = [s for s, _ in going]
        decoders = [s.sampler.decoder for s in streams]
        positions = [d.filled for d in decoders]
        columns = [frame for _, frame in going]
        stacks = None
        if self._cpp(streams):
            stacks = [s.sampler.kernels.stack(model.layers, d.caches.slow, model.norm)
                      for s, d in zip(streams, decoders, strict=True)]
        if stacks is not None and all(stack is not None for stack in stacks):
            x = torch.cat([embed(model, column) for column in columns])
            rope = torch.stack([d.caches.rope.narrow(0, pos, 1) for d, pos in zip(decoders, positions, strict=True)])
            x, slow_out = streams[0].sampler.kernels.streams_step(stacks, x, rope, positions)
            hidden = slow_out if model.config.norm_fastlayer_input else x
            logits, hidden = self._each_row(self.head, slow_out), self._each_row(model.fast_project_in, hidden)
        else:
            logits, hidden = forward_slow_streams(model, [d.caches for d in decoders], columns, positions, self.head)
        for b, (s, column) in enumerate(going):
            s.sampler.decoder.record(column)
            s.logits, s.hidden = logits[b:b + 1], hidden[b:b + 1]

    def _each_row(self, layer: nn.Module, x: Tensor) -> Tensor:
        """`layer(x)` with each row (B, 1, dim) computed as the layer computes it alone: the C++ kernels' layers in one
        pass over their weights (`Linear.rows`), others a row at a time."""
        if isinstance(layer, nn.Identity):
            return x
        if isinstance(layer, KERNEL_LAYERS) and getattr(layer, "kernel", True):
            kept = self._rows.get(id(layer))
            if kept is None or kept[0] is not layer:
                made = linear_of(layer)
                kept = self._rows[id(layer)] = (layer, made)
            if kept[1] is not None:
                return kept[1].rows(x)
        return torch.cat([layer(x[b:b + 1]) for b in range(x.shape[0])])
