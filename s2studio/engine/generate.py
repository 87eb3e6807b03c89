"""The generation loop: prompt -> frames, and upstream's `generate_long` over batches of text.

`generate_frames` is upstream's `generate` reshaped as a Python generator: it yields each kept
frame as soon as it is known not to be the last, so the engine can decode audio while the model
is still generating. The rules it keeps (spec §6.6, §7):

- the prompt is prefilled in one call; each later frame is one slow step at the next position;
- at most `max_new_tokens` frames (0 = the rest of the context), never past `max_seq_len`;
- the prompt's own frame is never checked for `<|im_end|>` (upstream feeds it back even then);
  any later `<|im_end|>` frame ends the batch;
- the last frame is always dropped, whether it is `<|im_end|>` or a real frame cut by the limit;
- `cancel` is checked before every slow step.

`generate_batches` is `generate_long` for one sample: one generator for the whole request, never
reseeded; the conversation grows batch by batch with copies of the generated codes and is
re-prefilled from position 0 for every batch. `context` lets a caller bound the history (line
mode in the studio); without it every earlier batch stays in the prompt, as upstream.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Union

import numpy as np
import torch
from torch import Tensor

from s2studio.engine.sampling import RAS_WINDOW, TOP_K, FrameSampler
from s2studio.errors import UserError
from s2studio.text.prompt import Exchange, Reference, TokenizerLike, build_prompt, check_codes, line_batches, upstream_batches

PROMPT_RESERVE = 2048
"""`generate_long` refuses a prompt longer than `max_seq_len - 2048`."""

Batching = Literal["upstream", "line"]
ContextPolicy = Callable[[Sequence[Exchange], str], Sequence[Exchange]]
"""(history so far, next batch text) -> the exchanges to keep in the next prompt, oldest first."""


@dataclass(frozen=True)
class GenerationSettings:
    """Sampler settings; the defaults are upstream's command line (temperature 1.0, top-p 0.9)."""

    temperature: float = 1.0
    top_p: float = 0.9
    top_k: int = TOP_K
    max_new_tokens: int = 0
    """Frames per batch including the dropped last one; 0 = as many as the context leaves."""
    fast: bool = False
    """The fast path (`engine/fast.py`): attention over the filled cache only, prefix reuse, top-k sampling.
    Its codes equal the exact path's for almost every seed but not all; the exact path is the default."""

    def __post_init__(self) -> None:
        if not 0.0 < self.temperature < 2.0:
            raise UserError(f"temperature must be in (0, 2), got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise UserError(f"top-p must be in (0, 1], got {self.top_p}")
        if self.top_k < 1:
            raise UserError(f"top-k must be at least 1, got {self.top_k}")
        if self.max_new_tokens < 0:
            raise UserError(f"max-new-tokens must be 0 (no limit) or more, got {self.max_new_tokens}")


# ----------------------------------------------------------------------------- model helpers


def model_device_dtype(model: torch.nn.Module) -> tuple[torch.device, torch.dtype]:
    p = next(model.parameters())
    return p.device, p.dtype


def max_seq_len(model: Any) -> int:
    return int(model.config.slow.max_seq_len)


def make_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """The request's generator; its CPU stream equals `torch.manual_seed(seed)`'s."""
    if not -(2**63) <= seed < 2**64:
        raise UserError(f"seed must be between -2**63 and 2**64 - 1, got {seed}")
    return torch.Generator(device=device).manual_seed(seed)


def make_sampler(model: Any, settings: GenerationSettings, generator: torch.Generator,
                 im_end_id: int | None = None) -> FrameSampler:
    """The request's sampler; `im_end_id` is needed only when the model's config lacks it."""
    c = model.config
    device, dtype = model_device_dtype(model)
    im_end_id = c.im_end_id if c.im_end_id is not None else im_end_id
    if im_end_id is None:
        raise UserError("the model does not know its <|im_end|> token id; load it with its tokenizer")
    return FrameSampler(
        vocab_size=c.vocab_size, codebook_size=c.codebook_size, num_codebooks=c.num_codebooks,
        semantic_begin_id=c.semantic_begin_id, semantic_end_id=c.semantic_end_id, im_end_id=im_end_id,
        temperature=settings.temperature, top_p=settings.top_p, top_k=settings.top_k,
        generator=generator, device=device, dtype=dtype,
    )


def ensure_caches(model: Any) -> None:
    """Static KV caches over the model's whole context, allocated once (the call is a no-op after).

    Upstream allocates them once per process and never clears them: every slot a step reads was
    written earlier in the same batch or is masked, so stale values cannot change a result.
    """
    _, dtype = model_device_dtype(model)
    model.setup_caches(max_seq_len(model), dtype)


# ----------------------------------------------------------------------------- one batch


def frame_budget(prompt_length: int, max_new_tokens: int, seq_len: int) -> int:
    """Frames `generate` produces at most, the dropped last one included."""
    room = seq_len - prompt_length
    return min(max_new_tokens, room) if max_new_tokens else room


def generate_frames(model: Any, prompt: np.ndarray | Tensor, sampler: FrameSampler, max_new_tokens: int = 0,
                    cancel: threading.Event | None = None) -> Iterator[Tensor]:
    """Yield the kept frames of one batch, each a (num_codebooks,) int64 tensor on the model's device.

    `prompt` is the (1 + K, T) matrix. With `max_new_tokens == 1` upstream crashes; we produce
    the one frame and drop it, so nothing is yielded (the draws are still consumed).
    """
    device, _ = model_device_dtype(model)
    seq_len = max_seq_len(model)
    rows = model.config.num_codebooks + 1
    prompt_t = torch.as_tensor(prompt, dtype=torch.long).to(device)
    length = prompt_t.shape[1]
    if length >= seq_len:
        raise UserError(f"prompt of {length} tokens does not fit the model's context of {seq_len}")
    budget = frame_budget(length, max_new_tokens, seq_len)
    ensure_caches(model)
    if cancel is not None and cancel.is_set():
        return
    with torch.inference_mode():
        logits, hidden = model.forward_slow(prompt_t.view(1, rows, length), torch.arange(length, device=device))
        frame = sampler.frame(model, logits, hidden, None)
        window = torch.zeros((rows, RAS_WINDOW), dtype=torch.int32, device=device)
    for made in range(1, budget):
        # `frame` is not the last one, so it is kept
        yield frame[1:, 0].to(torch.long)
        if cancel is not None and cancel.is_set():
            return
        with torch.inference_mode():
            pos = torch.tensor([length + made - 1], dtype=torch.long, device=device)
            logits, hidden = model.forward_slow(frame.view(1, rows, 1).to(torch.long), pos)
            frame = sampler.frame(model, logits, hidden, window)
            window = window.roll(-1, dims=1)
            window[:, -1] = frame[:, 0]
        if int(frame[0, 0]) == sampler.im_end_id:
            return


# ----------------------------------------------------------------------------- many batches


@dataclass(frozen=True)
class BatchStarted:
    index: int
    count: int
    text: str
    prompt_length: int
    max_frames: int
    """Upper bound on the frames this batch can keep."""


@dataclass(frozen=True)
class FrameReady:
    index: int
    """Batch index."""
    frame: int
    """Frame number within the batch."""
    codes: Tensor
    """(num_codebooks,) int64 on the model's device."""


@dataclass(frozen=True)
class BatchFinished:
    index: int
    text: str
    codes: np.ndarray
    """(num_codebooks, frames) int64 on the CPU (a copy: the conversation keeps its own)."""


BatchEvent = Union[BatchStarted, FrameReady, BatchFinished]


def plan_batches(text: str, batching: Batching, chunk_length: int, upstream_exact: bool = True) -> list[str]:
    """The texts rendered one after another: upstream's grouped turns, or one per line."""
    if batching == "upstream":
        if chunk_length < 1:
            raise UserError(f"chunk length must be at least 1 byte, got {chunk_length}")
        return upstream_batches(text, chunk_length, upstream_exact)
    if batching == "line":
        return line_batches(text)
    raise UserError(f"unknown batching {batching!r}; use 'upstream' or 'line'")


def check_references(model: Any, references: Sequence[Reference]) -> list[Reference]:
    c = model.config
    return [Reference(r.text, check_codes(r.codes, f"reference {i + 1} codes", c.num_codebooks, c.codebook_size))
            for i, r in enumerate(references)]


def generate_batches(model: Any, tokenizer: TokenizerLike, batches: Sequence[str], *,
                     references: Sequence[Reference] = (), settings: GenerationSettings = GenerationSettings(),
                     generator: torch.Generator, context: ContextPolicy | None = None,
                     cancel: threading.Event | None = None, decoder: Any = None) -> Iterator[BatchEvent]:
    """`generate_long` (one sample) over prepared batch texts, yielding progress as it goes.

    `decoder`: a `fast.FastDecoder` to run the fast path on (it keeps its cached prefix between calls);
    with `settings.fast` and no decoder, one is made for this call.
    """
    references = check_references(model, references)
    seq_len = max_seq_len(model)
    sampler = make_sampler(model, settings, generator, getattr(tokenizer, "im_end_id", None))
    if decoder is None and settings.fast:
        from s2studio.engine.fast import FastDecoder

        decoder = FastDecoder(model, sampler.im_end_id)
    if decoder is not None:
        from s2studio.engine.fast import FastSampler

        sampler = FastSampler(decoder, temperature=settings.temperature, top_p=settings.top_p,
                              top_k=settings.top_k, generator=generator)
    history: list[Exchange] = []
    for index, text in enumerate(batches):
        kept = history if context is None else list(context(tuple(history), text))
        prompt = build_prompt(tokenizer, references, kept, text, model.config.num_codebooks)
        length = prompt.shape[1]
        if length > seq_len - PROMPT_RESERVE:
            raise UserError(f"prompt is too long: {length} tokens > {seq_len - PROMPT_RESERVE} "
                            f"(batch {index + 1}); use shorter text or fewer/shorter references")
        yield BatchStarted(index, len(batches), text, length,
                           max(frame_budget(length, settings.max_new_tokens,
                                            seq_len if decoder is None else decoder.length) - 1, 0))
        frames: list[Tensor] = []
        if decoder is None:
            frames_of = generate_frames(model, prompt, sampler, settings.max_new_tokens, cancel)
        else:
            from s2studio.engine.fast import generate_frames_fast

            frames_of = generate_frames_fast(decoder, prompt, sampler, settings.max_new_tokens, cancel)
        for frame in frames_of:
            yield FrameReady(index, len(frames), frame)
            frames.append(frame)
        if cancel is not None and cancel.is_set():
            return
        if frames:
            codes = torch.stack(frames, dim=1).cpu().numpy().astype(np.int64)
        else:
            codes = np.zeros((model.config.num_codebooks, 0), dtype=np.int64)
        history.append(Exchange(text, codes.copy()))
        yield BatchFinished(index, text, codes)


def generate_long(model: Any, tokenizer: TokenizerLike, text: str, *, references: Sequence[Reference] = (),
                  settings: GenerationSettings = GenerationSettings(), seed: int = 42,
                  generator: torch.Generator | None = None, batching: Batching = "upstream",
                  chunk_length: int = 300, upstream_exact: bool = True, context: ContextPolicy | None = None,
                  cancel: threading.Event | None = None) -> Iterator[BatchEvent]:
    """Text in, batch events out; the seeded generator is made here unless one is given."""
    batches = plan_batches(text, batching, chunk_length, upstream_exact)
    if not batches:
        raise UserError("the text is empty; nothing to say")
    if generator is None:
        generator = make_generator(seed, model_device_dtype(model)[0])
    yield from generate_batches(model, tokenizer, batches, references=references, settings=settings,
                                generator=generator, context=context, cancel=cancel)


def generate_codes(*args: Any, **kwargs: Any) -> list[np.ndarray]:
    """`generate_long` collected: each batch's (K, frames) int64 codes, in order."""
    return [e.codes for e in generate_long(*args, **kwargs) if isinstance(e, BatchFinished)]
