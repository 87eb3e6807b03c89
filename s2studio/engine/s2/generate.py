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

Both run on a `Decoder`: `ExactDecoder` (upstream's loop, `generate_frames`) or `fast.FastDecoder` (the fast
path), one interface, chosen once when the model is loaded (`setup.load_runtime`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, Union

import numpy as np
import torch
from torch import Tensor

from s2studio.engine.api import SEED_RANGE, Batching
from s2studio.engine.s2.sampling import RAS_WINDOW, FrameSampler
from s2studio.errors import UserError
from s2studio.model.dual_ar import DualAR
from s2studio.settings import Sampling
from s2studio.state.codes import check_codes
from s2studio.text.prompt import Exchange, Reference, TokenizerLike, build_prompt, line_batches, upstream_batches

PROMPT_RESERVE = 2048
"""`generate_long` refuses a prompt longer than `max_seq_len - 2048`."""

ContextPolicy = Callable[[Sequence[Exchange], str], Sequence[Exchange]]
"""(history so far, next batch text) -> the exchanges to keep in the next prompt, oldest first."""

S = TypeVar("S")


class Decoder(Protocol[S]):
    """Prompt in, kept frames out: the exact loop or the fast path, behind one small interface."""

    model: DualAR
    length: int
    """Positions a prompt and its frames may fill (the cache's length)."""

    def sampler(self, sampling: Sampling, generator: torch.Generator, ignore_eos: bool = False) -> S:
        """The request's sampler, made once per request (its constants, its repetition window); `ignore_eos`: the
        request's (`SynthesisRequest.ignore_eos`)."""
        ...

    def frames(self, prompt: np.ndarray | Tensor, sampler: S, max_new_tokens: int = 0,
               cancel: threading.Event | None = None) -> Iterator[Tensor]:
        """The kept frames of one batch, each a (num_codebooks,) int64 tensor on the model's device."""
        ...

    def weights_changed(self) -> None:
        """The model's weights were changed in place (a LoRA merged or removed): drop what was computed from them."""
        ...


# ----------------------------------------------------------------------------- model helpers


def model_device_dtype(model: torch.nn.Module) -> tuple[torch.device, torch.dtype]:
    p = next(model.parameters())
    return p.device, p.dtype


def max_seq_len(model: Any) -> int:
    return int(model.config.slow.max_seq_len)


def make_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """The request's generator; its CPU stream equals `torch.manual_seed(seed)`'s."""
    if not SEED_RANGE[0] <= seed < SEED_RANGE[1]:
        raise UserError(f"seed must be between -2**63 and 2**64 - 1, got {seed}")
    return torch.Generator(device=device).manual_seed(seed)


def make_sampler(model: Any, sampling: Sampling, generator: torch.Generator,
                 im_end_id: int | None = None, ignore_eos: bool = False) -> FrameSampler:
    """The request's exact sampler; `im_end_id` is needed only when the model's config lacks it; `ignore_eos`:
    never end at `<|im_end|>` (`SynthesisRequest.ignore_eos`)."""
    c = model.config
    device, dtype = model_device_dtype(model)
    im_end_id = c.im_end_id if c.im_end_id is not None else im_end_id
    if im_end_id is None:
        raise UserError("the model does not know its <|im_end|> token id; load it with its tokenizer")
    return FrameSampler(
        vocab_size=c.vocab_size, codebook_size=c.codebook_size, num_codebooks=c.num_codebooks,
        semantic_begin_id=c.semantic_begin_id, semantic_end_id=c.semantic_end_id, im_end_id=im_end_id,
        temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
        generator=generator, device=device, dtype=dtype, ignore_eos=ignore_eos,
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


class ExactDecoder:
    """Upstream's loop (`generate_frames`, `FrameSampler`) over static caches of the model's whole context: the
    path whose codes equal upstream's bit for bit on CPU float32."""

    def __init__(self, model: DualAR, im_end_id: int | None = None) -> None:
        self.model = model
        self.im_end_id = im_end_id
        self.length = max_seq_len(model)
        ensure_caches(model)

    def sampler(self, sampling: Sampling, generator: torch.Generator, ignore_eos: bool = False) -> FrameSampler:
        return make_sampler(self.model, sampling, generator, self.im_end_id, ignore_eos)

    def frames(self, prompt: np.ndarray | Tensor, sampler: FrameSampler, max_new_tokens: int = 0,
               cancel: threading.Event | None = None) -> Iterator[Tensor]:
        return generate_frames(self.model, prompt, sampler, max_new_tokens, cancel)

    def weights_changed(self) -> None:
        """Nothing is kept between batches: every prompt is prefilled again."""


def generate_batches(decoder: Decoder[Any], tokenizer: TokenizerLike, batches: Sequence[str], *,
                     references: Sequence[Reference] = (), sampling: Sampling = Sampling(),
                     generator: torch.Generator, context: ContextPolicy | None = None,
                     cancel: threading.Event | None = None, ignore_eos: bool = False) -> Iterator[BatchEvent]:
    """`generate_long` (one sample) over prepared batch texts on `decoder`, yielding progress as it goes.

    The fast path's decoder keeps its cached prefix between calls (and requests); the exact one re-prefills."""
    model = decoder.model
    references = check_references(model, references)
    seq_len = max_seq_len(model)
    sampler = decoder.sampler(sampling, generator, ignore_eos)
    history: list[Exchange] = []
    for index, text in enumerate(batches):
        kept = history if context is None else list(context(tuple(history), text))
        prompt = build_prompt(tokenizer, references, kept, text, model.config.num_codebooks)
        length = prompt.shape[1]
        if length > seq_len - PROMPT_RESERVE:
            raise UserError(f"prompt is too long: {length} tokens > {seq_len - PROMPT_RESERVE} "
                            f"(batch {index + 1}); use shorter text or fewer/shorter references")
        yield BatchStarted(index, len(batches), text, length,
                           max(frame_budget(length, sampling.max_frames, decoder.length) - 1, 0))
        frames: list[Tensor] = []
        for frame in decoder.frames(prompt, sampler, sampling.max_frames, cancel):
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


def generate_long(decoder: Decoder[Any], tokenizer: TokenizerLike, text: str, *,
                  references: Sequence[Reference] = (), sampling: Sampling = Sampling(),
                  generator: torch.Generator | None = None, batching: Batching = "upstream",
                  chunk_length: int = 300, upstream_exact: bool = True, context: ContextPolicy | None = None,
                  cancel: threading.Event | None = None, ignore_eos: bool = False) -> Iterator[BatchEvent]:
    """Text in, batch events out; the generator is seeded with a fixed `sampling.seed` here unless one is given (a
    library call has no engine to draw and report a seed, so one of the two is required)."""
    batches = plan_batches(text, batching, chunk_length, upstream_exact)
    if not batches:
        raise UserError("the text is empty; nothing to say")
    if generator is None:
        if sampling.fixed_seed is None:
            raise ValueError("generate_long needs a seed (a fixed sampling.seed) or a generator")
        generator = make_generator(sampling.fixed_seed, model_device_dtype(decoder.model)[0])
    yield from generate_batches(decoder, tokenizer, batches, references=references, sampling=sampling,
                                generator=generator, context=context, cancel=cancel, ignore_eos=ignore_eos)


def generate_codes(*args: Any, **kwargs: Any) -> list[np.ndarray]:
    """`generate_long` collected: each batch's (K, frames) int64 codes, in order."""
    return [e.codes for e in generate_long(*args, **kwargs) if isinstance(e, BatchFinished)]
