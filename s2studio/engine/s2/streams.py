"""The engine's side of the batch: which job's stream sits on which slot, the frames each step made for it, and the
weights they share (design.md §2).

A job opens a stream for each line it speaks (`Streams.open`): it waits, yielding `WAIT`, until the model holds
the line's LoRA (or none) and a slot is free, then reads the stream's frames (`Stream.frames`, `WAIT` between
them). The scheduler calls `step` once for every stream: one prefill piece of the oldest prompt not yet in (all
of them while nothing runs), the slow step of the frames handed out last time, and a new frame for every running
stream (`BatchDecoder.draw`), routed to its stream. A frame is handed out before its slow step, so a line's first
audio leaves after one prefill and one draw.

Every stream shares the model's weights, so a LoRA is merged or removed only while no stream runs: the first job
that needs other weights claims the switch, no stream is admitted until it is done (the streams running finish
their lines), and its line starts first under the new weights. The weights are checked and the slot taken in one
go, so no stream ever runs under weights that are not its line's.

Where the runtime has no `BatchDecoder` (the exact loop: one stream, upstream's bits) a stream's frames come
straight from its decoder, with no waiting: the scheduler runs one such job at a time (`max_batch` is 1).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generator

import numpy as np
import torch
from torch import Tensor

from s2studio.engine.api import WAIT, Wait
from s2studio.engine.s2.batch import BatchDecoder
from s2studio.engine.s2.setup import Runtime
from s2studio.settings import Sampling


@dataclass
class _Ticket:
    """What the steps made for one stream on the batch since its job last read it."""

    frames: list[Tensor] = field(default_factory=list)
    finished: bool = False


class Stream:
    """One line's frames for one job: from the batch (`WAIT` while the next one is being made) or straight from
    a decoder that runs alone. `close` (always, in a `finally`) takes it off the batch at once if it still runs."""

    def __init__(self, owner: Streams, switch_s: float | None, slot: int | None = None,
                 alone: Iterator[Tensor] | None = None) -> None:
        self.owner, self.switch_s, self.slot, self._alone = owner, switch_s, slot, alone
        self._ticket = owner.tickets[slot] if slot is not None else None

    def frames(self) -> Iterator[Tensor | Wait]:
        if self._alone is not None:
            yield from self._alone
            return
        ticket = self._ticket
        assert ticket is not None
        while not ticket.finished:
            yield WAIT
            made, ticket.frames = ticket.frames, []
            yield from made

    def close(self) -> None:
        if self._alone is not None:
            self._alone = None
        elif self.slot is not None and self._ticket is not None:
            self.owner.leave(self.slot, self._ticket)
            self.slot = self._ticket = None


class Streams:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.batch = runtime.decoder if isinstance(runtime.decoder, BatchDecoder) else None
        self.tickets: dict[int, _Ticket] = {}
        self._switching: object | None = None
        """The job waiting for the running streams to end so that it can change the LoRA (none admitted meanwhile)."""
        self.last_switch_s: float | None = None

    @property
    def max_batch(self) -> int:
        return self.batch.max_batch if self.batch is not None else 1

    def open(self, prompt: np.ndarray, sampling: Sampling, generator: torch.Generator, sampler: Any,
             lora: Path | None, cancel: threading.Event,
             ignore_eos: bool = False) -> Generator[Wait, None, Stream | None]:
        """The line's stream once its weights are in place and a slot is free (module docstring); None when
        `cancel` was set meanwhile. `sampler`: the request's, for a decoder that runs alone; `ignore_eos`: the
        request's, for a sampler made here."""
        claim = object()
        try:
            while True:
                if cancel.is_set():
                    return None
                need_switch = not self.runtime.holds_lora(lora)
                if need_switch and self._switching is None:
                    self._switching = claim
                free_to_switch = self._switching is claim and (self.batch is None or not self.batch.streams)
                if need_switch and free_to_switch:
                    switch_s = self._switch(lora)
                    self._switching = None
                elif not need_switch and self._switching is None:
                    switch_s = None
                else:
                    yield WAIT
                    continue
                if self.batch is None:
                    frames = self.runtime.decoder.frames(prompt, sampler, sampling.max_frames, cancel)
                    return Stream(self, switch_s, alone=frames)
                slot = self.batch.admit(prompt, sampling, generator, ignore_eos=ignore_eos)
                if slot is not None:
                    self.tickets[slot] = _Ticket()
                    return Stream(self, switch_s, slot=slot)
                yield WAIT  # every slot busy, or no memory for its cache until a stream ends
        finally:
            if self._switching is claim:
                self._switching = None

    def _switch(self, lora: Path | None) -> float | None:
        started = time.perf_counter()
        if not self.runtime.use_lora(lora):
            return None
        self.last_switch_s = time.perf_counter() - started
        return self.last_switch_s

    def leave(self, slot: int, ticket: _Ticket) -> None:
        """A job is done with its stream on `slot`: off the batch at once if it still runs (the slot may serve
        another stream already when this one ended: that one stays)."""
        if self.tickets.get(slot) is ticket:
            del self.tickets[slot]
            if self.batch is not None:
                self.batch.cancel(slot)

    def step(self) -> None:
        """One step for every stream (module docstring)."""
        batch = self.batch
        if batch is None:
            return
        batch.advance()
        if batch.running:
            batch.prefill()
        else:
            while batch.waiting and not batch.running:
                batch.prefill()
        for frame in batch.draw():
            ticket = self.tickets.get(frame.slot)
            if ticket is None:
                continue
            if frame.codes is not None:
                ticket.frames.append(frame.codes)
            if frame.finished:
                ticket.finished = True
                del self.tickets[frame.slot]
