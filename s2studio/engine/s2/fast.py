"""The fast generation path: the exact loop's rules with cheaper kernels and prefix reuse.

`generate_frames_fast` keeps every rule of `generate.generate_frames` (prompt frame never checked for
`<|im_end|>`, last frame dropped, the same 2 + 9 draws per frame from the same generator, RAS) so that its
codes equal the exact path's for almost every seed; only the float bits of the logits differ (see
`model/fast_forward.py`). What it changes:

- `FastDecoder` owns static KV caches sized to the context it serves and remembers which token columns they
  hold. A prompt is always prefilled in the same pieces (`piece_ends`), so a new prompt that starts with cached
  pieces (system prompt, references, earlier lines) is prefilled from the first piece that differs only, and
  still gives the bits of a prefill on a fresh decoder (see `FastDecoder` for the contract).
- `FastSampler` draws with top-k first (`torch.topk` over the 4097 allowed rows instead of sorting 155776
  logits twice per frame), never writes a Python scalar into a device tensor, and keeps the RAS window as a
  ring buffer. It still draws a full vocabulary-sized (and codebook-sized) uniform vector per draw and reads
  it at the kept tokens, so the random stream is the exact path's.
- one host read per frame: the `<|im_end|>` check.
- on the CPU in float32 the model's steps and the sampler's draws run through the C++ kernels (`cpu_step.py`):
  one call per slow step, one for the fast transformer's passes and draws of a frame, one for the main token's
  draws with the repetition check, instead of hundreds of torch ops, each with a fixed cost at batch 1.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor
from torch.nn import functional as F

from s2studio.engine.s2.sampling import RAS_WINDOW, request_constants
from s2studio.engine.weights.cpu_step import CpuStepOps, step_ops
from s2studio.engine.weights.narrow import narrow_head, narrowing_of
from s2studio.errors import UserError
from s2studio.model.dual_ar import DualAR
from s2studio.model.fast_forward import FastCaches, forward_fast, forward_slow
from s2studio.settings import Sampling


def allowed_ids(model: DualAR, im_end_id: int) -> Tensor:
    """Ascending vocabulary ids the slow sampler may draw; every other id has a -inf bias (spec §6.3)."""
    c = model.config
    ids = torch.arange(c.semantic_begin_id, c.semantic_end_id + 1)
    return torch.unique(torch.cat([ids, torch.tensor([im_end_id])]))


def head_weight(model: DualAR, ids: Tensor) -> Tensor:
    table = model.embeddings.weight if model.config.tie_word_embeddings else model.output.weight
    return table[ids.to(table.device)].clone()


PREFILL_PIECE = 128
"""Longest piece a prompt is prefilled in (`piece_ends`), besides its messages: bounded, so that a prefill can be
interleaved with running streams and a long message's first pieces are reused when it changes near its end; not
shorter, because every piece is one more pass over the weights (`bench/prefill_pieces.py`)."""


def piece_ends(prompt: Tensor, im_end_id: int, start: int = 0, piece: int = PREFILL_PIECE) -> list[int]:
    """Where the pieces of `prompt`'s prefill end, after column `start` (a piece boundary): after every message
    (the column after each `<|im_end|>`), at every multiple of `piece`, and at the prompt's end.

    The boundaries depend on the prompt's own columns only, never on what a cache held before, so every decoder
    splits a prompt the same way: that is what lets a cached piece be reused bit for bit (`FastDecoder`)."""
    length = prompt.shape[1]
    ends = set(range((start // piece + 1) * piece, length, piece))
    after = (prompt[0, start:length - 1] == im_end_id).nonzero().view(-1) + start + 1
    ends.update(after.tolist())
    ends.add(length)
    return sorted(ends)


class FastDecoder:
    """Static caches plus the record of what they hold; one per loaded model, reused across requests. A
    `generate.Decoder`: `sampler` and `frames` are what generation calls.

    **The cache's contract: what a request computes never depends on what ran before.** A render on a decoder that
    has served any other requests (repeats, longer or shorter prompts, cancels, other voices) gives the same bits
    as on a freshly made one. Kernels round differently for different shapes (a position computed alone, as a
    decode step, or among 300 others in a prefill's matrix product), so reuse may only take keys and values that a
    fresh decoder would have computed in exactly the same call. Hence:

    - a prompt is prefilled in fixed pieces (`piece_ends`: after each message, at multiples of `piece`, at its
      end), one forward call each, whatever the cache holds; each piece's keys and values are a function of the
      prompt's columns up to its end, bit for bit, given the device, dtype, weights and thread count;
    - `settled` is the end of the last prefill: columns `[0, settled)` were computed as such pieces. A new prompt
      reuses the longest prefix that matches `tokens` within `settled`, cut back to one of its own piece
      boundaries and short of its last column (whose logits start the frames). The columns that generated frames
      added after `settled` are decode steps, never reused: a fresh decoder would prefill them in a piece;
    - a cache position is only ever read after this request wrote it (attention reads `[0, filled)`), so what
      earlier requests left beyond it cannot leak in; the fast transformer's cache is rewritten every frame;
    - a change of weights (a LoRA merged or removed) settles nothing (`weights_changed`).

    A batched decoder keeps the same contract per stream (`batch.BatchDecoder`: its slots are decoders of this kind).

    `tokens[:, :filled]` are the columns whose keys/values sit at positions 0..filled-1 of every slow layer.
    `prefilled` counts the columns the slow model has been asked to prefill (tests and benchmarks read it).
    The head over the allowed rows is narrowed like the model's linear layers (`narrow.narrow_head`).
    """

    def __init__(self, model: DualAR, im_end_id: int, length: int | None = None,
                 allowed: Tensor | None = None, piece: int = PREFILL_PIECE) -> None:
        c = model.config
        p = model.embeddings.weight
        self.model = model
        self.device, self.dtype = p.device, p.dtype
        self.length = min(length or c.slow.max_seq_len, c.slow.max_seq_len)
        # a float32 model on the CPU steps through the C++ kernels' fused ops (cpu_step.py); elsewhere torch's
        self.caches = FastCaches.allocate(model, self.length, self.dtype, self.device,
                                          ops=step_ops(self.device, self.dtype))
        # `allowed`: a subset of the sampler's ids (benchmarks leave out <|im_end|> so that runs never stop)
        self.ids = (allowed_ids(model, im_end_id) if allowed is None else allowed).to(self.device)
        self.head = narrow_head(head_weight(model, self.ids), narrowing_of(model).mode)
        self.im_end_id = im_end_id
        self.piece = piece
        self.tokens = torch.zeros((c.num_codebooks + 1, self.length), dtype=torch.long, device=self.device)
        self.filled = 0
        self.settled = 0
        self.prefilled = 0

    def weights_changed(self) -> None:
        """A LoRA was merged or removed: the head's rows are copied again and no cached prefix is reused."""
        self.head = narrow_head(head_weight(self.model, self.ids), narrowing_of(self.model).mode)
        self.filled = self.settled = 0

    def reusable(self, prompt: Tensor) -> int:
        """Leading columns of `prompt` whose keys/values the cache holds as a fresh prefill of it computes them: the
        matching settled prefix, cut back to a piece boundary of `prompt`; at least its last piece is recomputed."""
        n = min(self.settled, prompt.shape[1] - 1)
        if n <= 0:
            return 0
        same = int((self.tokens[:, :n] == prompt[:, :n]).all(dim=0).to(torch.int32).cumprod(dim=0).sum())
        return max([0] + [end for end in piece_ends(prompt, self.im_end_id, 0, self.piece) if end <= same])

    def prefill(self, prompt: Tensor, reuse: bool = True) -> tuple[Tensor, Tensor]:
        """Run the slow model over `prompt` (1 + K, T) in its pieces, from the first one not already cached."""
        for end in self.plan(prompt, reuse):
            logits, hidden = self.prefill_piece(prompt, end)
        return logits, hidden

    def plan(self, prompt: Tensor, reuse: bool = True) -> list[int]:
        """Start a prefill of `prompt`: the ends of its pieces still to run (`prefill_piece`, in order), after the
        cached prefix it reuses. Until they have run, only that prefix (and each piece run since) is valid."""
        start = self.reusable(prompt) if reuse else 0
        self.filled = self.settled = start
        return piece_ends(prompt, self.im_end_id, start, self.piece)

    def prefill_piece(self, prompt: Tensor, end: int) -> tuple[Tensor, Tensor]:
        """The next piece of a planned prefill: `prompt`'s columns from the settled end to `end`, one forward call;
        the logits and fast input of its last column."""
        start = self.settled
        logits, hidden = forward_slow(self.model, self.caches, prompt[:, start:end], start, self.head)
        self.tokens[:, start:end] = prompt[:, start:end]
        self.filled = self.settled = end
        self.prefilled += end - start
        return logits, hidden

    def grow(self, length: int) -> None:
        """Caches of `length` positions (more than now) in place of these, keeping the settled prefix (the same
        bits, moved); what generated frames added after it is dropped, as reuse never takes it."""
        c = self.model.config
        length = min(length, c.slow.max_seq_len)
        caches = FastCaches.allocate(self.model, length, self.dtype, self.device,
                                     ops=step_ops(self.device, self.dtype))
        for new, old in zip(caches.slow, self.caches.slow, strict=True):
            new.k.narrow(2, 0, self.settled).copy_(old.k.narrow(2, 0, self.settled))
            new.v.narrow(2, 0, self.settled).copy_(old.v.narrow(2, 0, self.settled))
        tokens = torch.zeros((c.num_codebooks + 1, length), dtype=torch.long, device=self.device)
        tokens[:, :self.settled] = self.tokens[:, :self.settled]
        self.caches, self.tokens, self.length, self.filled = caches, tokens, length, self.settled

    def sampler(self, sampling: Sampling, generator: torch.Generator, ignore_eos: bool = False) -> FastSampler:
        return FastSampler(self, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                           generator=generator, ignore_eos=ignore_eos)

    def frames(self, prompt: np.ndarray | Tensor, sampler: FastSampler, max_new_tokens: int = 0,
               cancel: threading.Event | None = None) -> Iterator[Tensor]:
        return generate_frames_fast(self, prompt, sampler, max_new_tokens, cancel)

    def step(self, column: Tensor) -> tuple[Tensor, Tensor]:
        """One slow step on a generated frame (1 + K, 1) at the next free position."""
        logits, hidden = forward_slow(self.model, self.caches, column, self.filled, self.head)
        self.record(column)
        return logits, hidden

    def record(self, column: Tensor) -> None:
        """A generated frame (1 + K, 1) was stepped at the next free position (by `step`, or a batched step)."""
        pos = self.filled
        self.tokens[:, pos:pos + 1] = column
        self.filled = pos + 1


class FastSampler:
    """`FrameSampler` with top-k first; the same draws in the same order from the same generator."""

    def __init__(self, decoder: FastDecoder, *, temperature: float, top_p: float, top_k: int,
                 generator: torch.Generator, graphs: bool = False, ignore_eos: bool = False) -> None:
        c = decoder.model.config
        device, dtype = decoder.device, decoder.dtype
        self.decoder = decoder
        self.generator = generator
        self.vocab_size = c.vocab_size
        self.codebook_size = c.codebook_size
        self.num_codebooks = c.num_codebooks
        self.semantic_begin_id = c.semantic_begin_id
        self.semantic_end_id = c.semantic_end_id
        self.im_end_id = decoder.im_end_id
        self.top_k = top_k
        self.dtype = dtype
        self.constants = request_constants(temperature, top_p, device, dtype)
        self.temperature, self.top_p, self.ras_temperature, self.ras_top_p = self.constants
        self.semantic = (self.semantic_begin_id, self.semantic_end_id)
        self.eos_mask = None
        """With `ignore_eos`: -inf at `<|im_end|>`'s row of the allowed ids (if it is one), 0 elsewhere."""
        if ignore_eos:
            self.eos_mask = torch.where(decoder.ids == decoder.im_end_id, float("-inf"), 0.0).to(dtype)
        self.window = torch.zeros(RAS_WINDOW, dtype=torch.int32, device=device)
        self.not_first = torch.arange(top_k, device=device) > 0
        self.kernels = decoder.caches.ops if isinstance(decoder.caches.ops, CpuStepOps) else None
        """The C++ draws (`top`, `kept_draw`, `main_token`, `fast_codes`) where the decoder steps through the C++
        ops, else None: torch's."""
        self.made = 0
        self.tail = None
        """With `graphs` (CUDA only): the frame after the slow step replayed as one CUDA graph (graphs.py)."""
        if graphs:
            from s2studio.engine.s2.graphs import FrameTailGraph

            self.tail = FrameTailGraph(self)

    def reset_window(self) -> None:
        self.window.zero_()
        self.made = 0
        if self.tail is not None:
            self.tail.slot.zero_()

    def top(self, logits: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The top-k (values, row indices, cumulative probabilities) of 1-D `logits`.

        The cumulative probability uses the softmax over ALL rows (via logsumexp) of the un-tempered logits, as
        `sampling.logits_to_probs` does, so it serves every temperature and top-p drawn from the same logits.
        """
        if self.kernels is not None:
            return self.kernels.top(logits, self.top_k)
        values, rows = torch.topk(logits, min(self.top_k, logits.shape[-1]))
        return values, rows, torch.cumsum(torch.exp(values - torch.logsumexp(logits, dim=-1)), dim=-1)

    def kept(self, values: Tensor, cum: Tensor, temperature: Tensor, top_p: Tensor) -> Tensor:
        """Probabilities over the top-k rows: the row that first crosses top-p is removed, the best always kept."""
        remove = (cum > top_p) & self.not_first[:values.shape[-1]]
        values = torch.where(remove, float("-inf"), values) / torch.clip(temperature, min=1e-5)
        return torch.softmax(values, dim=-1)

    def probs(self, logits: Tensor, temperature: Tensor, top_p: Tensor) -> tuple[Tensor, Tensor]:
        """(probabilities, row indices) of the top-k rows of 1-D `logits`: `sampling.logits_to_probs` in math."""
        values, rows, cum = self.top(logits)
        return self.kept(values, cum, temperature, top_p), rows

    def draw(self, probs: Tensor, ids: Tensor, size: int) -> Tensor:
        """Consume `size` uniforms as the exact draw does and race only the kept ids; (1,) int32 id."""
        u = torch.empty(size, dtype=self.dtype, device=probs.device).uniform_(generator=self.generator)
        best = torch.argmax(probs / -torch.log(u.index_select(0, ids)), dim=-1, keepdim=True)
        return ids.index_select(0, best).to(torch.int32)

    def pick(self, values: Tensor, rows: Tensor, cum: Tensor, temperature: Tensor, top_p: Tensor, size: int,
             table: Tensor | None = None) -> Tensor:
        """`draw(kept(...))` over the top-k rows, of the ids `table[rows]` (or the rows themselves); (1,) int32."""
        if self.kernels is not None:
            u = torch.empty(size, dtype=self.dtype, device=values.device).uniform_(generator=self.generator)
            return self.kernels.kept_draw(values, rows, cum, temperature, top_p, u, table)
        ids = rows if table is None else table.index_select(0, rows)
        return self.draw(self.kept(values, cum, temperature, top_p), ids, size)

    def masked(self, logits: Tensor) -> Tensor:
        """The main token's logits as one row, `<|im_end|>` masked out with `ignore_eos`."""
        return logits.reshape(-1) if self.eos_mask is None else logits.reshape(-1) + self.eos_mask

    def main_token(self, logits: Tensor, check: bool | Tensor) -> Tensor:
        """Draw 1 and 2 and the repetition check; `check` is False for the prompt's frame (a 0-d bool tensor in
        a CUDA graph, where Python cannot branch on it)."""
        values, rows, cum = self.top(self.masked(logits))
        table = self.decoder.ids
        if self.kernels is None:  # the ids once for both draws
            rows, table = table.index_select(0, rows), None
        main = self.pick(values, rows, cum, self.temperature, self.top_p, self.vocab_size, table)
        fallback = self.pick(values, rows, cum, self.ras_temperature, self.ras_top_p, self.vocab_size, table)
        if check is not False:
            repeated = (self.window == main).any() & check
            semantic = (main >= self.semantic_begin_id) & (main <= self.semantic_end_id)
            main = torch.where(repeated & semantic, fallback, main)
        return main

    def frame(self, logits: Tensor, hidden: Tensor) -> Tensor:
        """One frame (1 + K, 1) int32 after a slow step, as `FrameSampler.frame`."""
        if self.tail is not None:
            frame = self.tail.run(logits, hidden, self.made > 0)
            self.made += 1
            return frame
        main = self.next_main(logits)
        self.made += 1
        return self.codes(main, hidden)

    def next_main(self, logits: Tensor) -> Tensor:
        """This frame's main token (`main_token`, checked from the second frame on), entered in the repetition
        window; on the C++ route the draws, the check and the window's update are one call."""
        slot = (self.made - 1) % RAS_WINDOW if self.made else -1  # the prompt's frame never enters the window
        if self.kernels is not None:
            return self.kernels.main_token(self.masked(logits), self.decoder.ids, self.generator, self.constants,
                                           self.top_k, self.vocab_size, self.window, self.made > 0, slot,
                                           self.semantic)
        main = self.main_token(logits, self.made > 0)
        if slot >= 0:
            self.window[slot] = main[0]
        return main

    def codes(self, main: Tensor, hidden: Tensor) -> Tensor:
        """The frame (1 + K, 1) int32 from the main token: code 0 from it, codes 1..K-1 from the fast model."""
        model, caches = self.decoder.model, self.decoder.caches
        code = torch.clamp(main - self.semantic_begin_id, min=0, max=self.codebook_size - 1)
        if self.kernels is not None and self.num_codebooks > 1:  # the passes and their draws in one C++ call
            rest = self.kernels.fast_codes(model, caches, hidden, int(code), self.generator, self.temperature,
                                           self.top_p, self.top_k, self.codebook_size)
            if rest is not None:
                return torch.cat([main, code, rest]).view(-1, 1)
        codes = [main, code]
        # positions 0 (the slow state) and 1 (code 0) in one step
        table = model.fast_embeddings.weight
        x = torch.cat([hidden.view(1, 1, -1), F.embedding(code, table).view(1, 1, -1)], dim=1)
        start = 0
        for k in range(1, self.num_codebooks):
            fast_logits = forward_fast(model, caches, x, start).reshape(-1)
            values, rows, cum = self.top(fast_logits)
            code = self.pick(values, rows, cum, self.temperature, self.top_p, self.codebook_size)
            codes.append(code)
            start += x.shape[1]
            x = F.embedding(code, table).view(1, 1, -1)
        if self.num_codebooks == 1:
            forward_fast(model, caches, x[:, :1], 0)  # keep the exact path's single fast pass
        return torch.stack(codes, dim=1).T


def fitted(model: DualAR, prompt: np.ndarray | Tensor, device: torch.device, length: int, max_new_tokens: int
           ) -> tuple[Tensor, int]:
    """`prompt` as a (1 + K, T) long tensor on `device`, and the frames it makes at most in a context of `length`
    (`max_new_tokens`, 0: the rest of it; the dropped last frame included); a UserError when it does not fit."""
    prompt_t = torch.as_tensor(prompt, dtype=torch.long).to(device).view(model.config.num_codebooks + 1, -1)
    columns = prompt_t.shape[1]
    if columns >= length:
        raise UserError(f"prompt of {columns} tokens does not fit the fast path's context of {length}")
    room = length - columns
    return prompt_t, min(max_new_tokens, room) if max_new_tokens else room


def generate_frames_fast(decoder: FastDecoder, prompt: np.ndarray | Tensor, sampler: FastSampler,
                         max_new_tokens: int = 0, cancel: threading.Event | None = None,
                         reuse: bool = True) -> Iterator[Tensor]:
    """`generate.generate_frames` on the fast path: the same frames kept and dropped, the same stop rule."""
    prompt_t, budget = fitted(decoder.model, prompt, decoder.device, decoder.length, max_new_tokens)
    if cancel is not None and cancel.is_set():
        return
    sampler.reset_window()
    with torch.inference_mode():
        logits, hidden = decoder.prefill(prompt_t, reuse)
        frame = sampler.frame(logits, hidden)
    for _ in range(1, budget):
        yield frame[1:, 0].to(torch.long)
        if cancel is not None and cancel.is_set():
            return
        with torch.inference_mode():
            logits, hidden = decoder.step(frame.to(torch.long))
            frame = sampler.frame(logits, hidden)
        if int(frame[0, 0]) == sampler.im_end_id:
            return
