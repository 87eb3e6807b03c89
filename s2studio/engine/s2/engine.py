"""`S2Engine`: the real engine behind the studio, `s2studio synth --script` and `serve` (design.md §2, §3, §6).

It loads through `setup.load_runtime`'s recipe (as `synth --text` does), owns the `Runtime` it returns (model,
tokenizer, codec, the decoder chosen at load) and turns requests into the events of `engine/api.py`. On the fast
path many jobs run at once, each a stream of the batch (`streams.Streams`): the scheduler (engine/scheduler.py)
resumes every job's `stream`, which yields `WAIT` while its stream waits for a frame, and calls `step` once for
all of them. The exact loop runs one job at a time (`max_batch` 1). `generate` is one job alone, on the caller's
thread. Audio streams: every generated frame goes straight into the line's `IncrementalDecoder`, so a line's first
`AudioChunk` leaves after its first frame, before the next slow step (a frame is handed out as soon as it is known
not to be the dropped last one, which for the prompt's frame is known before any step: it is never checked for
`<|im_end|>`), not at the end of a batch.

Two ways to render a request:

- **line mode** (the studio's): each line is its own batch, drawn with its own generator seeded
  `seed + index`, and conditioned on the references plus the newest earlier lines (text and codes)
  that fit the context, at most `context_lines` of them, a window that moves in hops (`context.hop`).
  Earlier lines are the request's `context` followed by the lines already rendered in this request.
- **upstream mode** (parity): the lines become `<|speaker:i|>` turns grouped as upstream's
  `generate_long` groups them (`chunk_length` bytes, 5 turns), one generator for the request, every
  earlier batch kept in the prompt. A batch's audio is reported under the id of its first line, and
  `JobStarted.plan` lists those ids only.

Every method yields `JobFailed` instead of raising (the scheduler's one guard, `scheduler.guarded`).
"""

from __future__ import annotations

import gc
import logging
import re
import threading
import time
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

import numpy as np
import torch

from s2studio import garbage
from s2studio.codec.codec import Codec
from s2studio.codec.config import CodecConfig
from s2studio.codec.resample import encode_file
from s2studio.codec.streaming import IncrementalDecoder
from s2studio.engine.api import (
    WAIT, AudioChunk, ClipEncoded, EncodeRequest, Event, JobFinished, JobStarted, LineFinished, LineSpec, LineStarted,
    LoadRequest, ModelInfo, ModelLoading, ModelReady, Progress, Step, SynthesisRequest, line_seed, request_seed,
)
from s2studio.engine.plan import line_fingerprint
from s2studio.engine.s2.context import hop
from s2studio.engine.s2.generate import PROMPT_RESERVE, frame_budget, make_generator, plan_batches
from s2studio.engine.s2.setup import Runtime, load_steps
from s2studio.engine.s2.streams import Stream, Streams
from s2studio.engine.scheduler import guarded, run_alone
from s2studio.engine.weights.cpu_codec import codec_ops
from s2studio.errors import UserError
from s2studio.state.codes import check_codes
from s2studio.text.prompt import (
    Exchange, Reference, build_prompt, conversation, encoded_length, exchange_parts, split_turns,
)

log = logging.getLogger(__name__)

SPEAKER_TAG = re.compile(r"<\|speaker:\d+\|>")
TAG = re.compile(r"\[[^\]]*\]")
FRAMES_PER_CHAR = 1.1
"""Rough speech rate for the progress estimate: ~21.5 frames/s over ~18 characters/s."""


def speaker_text(speaker: int, text: str) -> str:
    return f"<|speaker:{speaker}|>{text}"


def estimate_frames(text: str) -> int:
    return max(1, round(FRAMES_PER_CHAR * len(TAG.sub("", SPEAKER_TAG.sub("", text)).strip())))


def line_decoder(codec: Codec, exact: bool, step: int) -> IncrementalDecoder:
    """A line's streaming decoder as the engine makes it (benchmarks time this one): the exact one for the exact
    loop, else the fast one, with the C++ Snake where the kernels run."""
    if exact:
        return IncrementalDecoder(codec, step=step)
    return IncrementalDecoder(codec, exact=False, step=step, ops=codec_ops(codec.device))


class S2Engine:
    """The DualAR model + codec on one device; on the engine thread, its jobs' streams batched (module docstring).

    `chunk_frames`: frames decoded per `AudioChunk` after a line's first frame (which goes out alone, for the
    earliest sound). The streaming decoder pads every push to a block of frames to round like a full decode, so
    a push of 4 frames costs about what a push of 1 does. `context_lines`: earlier lines a line may hear.
    """

    def __init__(self, chunk_frames: int = 4, context_lines: int = 6) -> None:
        if chunk_frames < 1:
            raise ValueError("chunk_frames must be at least 1")
        self.chunk_frames = chunk_frames
        self.context_lines = context_lines
        self._loaded: Runtime | None = None
        self._streams: Streams | None = None

    @property
    def info(self) -> ModelInfo | None:
        return self._loaded.info if self._loaded else None

    @property
    def max_batch(self) -> int:
        """Streams that run at once: the batch's slots on the fast path, 1 on the exact loop (or with no model)."""
        return self._streams.max_batch if self._streams is not None else 1

    @property
    def last_switch_s(self) -> float | None:
        """Seconds the last LoRA switch took (merging a voice's LoRA, or removing it)."""
        return self._streams.last_switch_s if self._streams is not None else None

    # ------------------------------------------------------------------ load

    def load(self, request: LoadRequest, cancel: threading.Event) -> Iterator[Event]:
        return guarded(request.job_id, lambda: self._load(request, cancel))  # type: ignore[return-value]

    def _load(self, request: LoadRequest, cancel: threading.Event) -> Iterator[Event]:
        job = request.job_id
        self.unload()  # never hold two models at once
        steps = load_steps(Path(request.model_dir), device=request.device, precision=request.precision,
                           quantize=request.quantize, speed=request.speed, threads=request.threads or None, streams=True,
                           max_batch=request.max_batch or None)
        while True:
            try:
                step = next(steps)
            except StopIteration as done:
                runtime: Runtime = done.value
                break
            if cancel.is_set():
                steps.close()
                yield JobFinished(job, cancelled=True)
                return
            yield ModelLoading(job, step.progress, step.message)
        if runtime.codec is not None and not runtime.exact_audio:
            yield ModelLoading(job, 0.95, "preparing the codec")
            self._audio_decoder(runtime).push(np.zeros((10, 1 + self.chunk_frames), dtype=np.int64))
        self._loaded, self._streams = runtime, Streams(runtime)
        log.info("model ready: %s; at most %d stream(s) at once", runtime.info, runtime.info.max_batch)
        yield ModelLoading(job, 1.0, "ready")
        yield ModelReady(job, runtime.info)
        yield JobFinished(job)

    def unload(self) -> None:
        if self._loaded is None:
            return
        self._loaded = self._streams = None
        gc.unfreeze()  # the studio freezes what survives a full collection: the model's cycles may be garbage now
        garbage.collect()  # done when it returns (in the studio, on the window's thread)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _require(self) -> Runtime:
        if self._loaded is None:
            raise UserError("no model is loaded; choose a model folder first")
        return self._loaded

    # ------------------------------------------------------------------ encode

    def encode(self, request: EncodeRequest, cancel: threading.Event) -> Iterator[Event]:
        return guarded(request.job_id, lambda: self._encode(request, cancel))  # type: ignore[return-value]

    def _encode(self, request: EncodeRequest, cancel: threading.Event) -> Iterator[Event]:
        loaded = self._require()
        assert loaded.codec is not None  # the engine always loads its codec
        yield JobStarted(request.job_id, tuple(c.clip_id for c in request.clips))
        for clip in request.clips:
            if cancel.is_set():
                yield JobFinished(request.job_id, cancelled=True)
                return
            codes = encode_file(loaded.codec, Path(clip.path))
            yield ClipEncoded(request.job_id, clip.clip_id, codes.astype(np.int64), loaded.info.codec_fingerprint)
        yield JobFinished(request.job_id)

    # ------------------------------------------------------------------ generate

    def generate(self, request: SynthesisRequest, cancel: threading.Event) -> Iterator[Event]:
        """The job alone, on the calling thread (the scheduler runs `stream` beside others)."""
        return run_alone(self, request.job_id, lambda: self.stream(request, cancel))

    def step(self) -> None:
        """One step for every running job's stream (`Streams.step`); the scheduler calls it."""
        if self._streams is not None:
            self._streams.step()

    def stream(self, request: SynthesisRequest, cancel: threading.Event) -> Iterator[Step]:
        """The job's events, `WAIT` wherever its stream waits for `step` (may raise: the scheduler guards it)."""
        loaded = self._require()
        assert loaded.codec is not None
        if not request.lines:
            raise UserError("nothing to synthesize: the request has no lines")
        if len({ln.line_id for ln in request.lines}) != len(request.lines):
            raise UserError("line ids in a request must be unique")
        if request.sampling.batching not in ("line", "upstream"):
            raise UserError(f"unknown batching {request.sampling.batching!r}; use 'line' or 'upstream'")
        for i, r in enumerate(request.references):
            check_reference_codes(r.codes, f"reference {i + 1} ({_snippet(r.transcript)})", loaded.codec.config)
        c = loaded.model.config
        for i, t in enumerate(request.context):
            try:
                check_codes(t.codes, f"context line {i + 1} ({_snippet(t.text)})", c.num_codebooks, c.codebook_size)
            except UserError as exc:
                raise UserError(f"{exc}; render that line again") from None
        references = [Reference(r.transcript if SPEAKER_TAG.search(r.transcript)
                                else speaker_text(r.speaker, r.transcript), r.codes)
                      for r in request.references]
        base_seed = request_seed(request.sampling)
        if request.sampling.batching == "upstream":
            yield from self._upstream(loaded, request, references, base_seed, cancel)
        else:
            yield from self._lines(loaded, request, references, base_seed, cancel)

    def _lines(self, loaded: Runtime, request: SynthesisRequest, references: list[Reference], base_seed: int,
               cancel: threading.Event) -> Iterator[Step]:
        job = request.job_id
        history = [Exchange(speaker_text(t.speaker, t.text), np.asarray(t.codes, dtype=np.int64))
                   for t in request.context]
        limit = min(int(loaded.model.config.slow.max_seq_len) - PROMPT_RESERVE,
                    loaded.decoder.length - PROMPT_RESERVE // 4)  # room to speak, in the model and the cache

        def own(text: str) -> int:  # a line's prompt without earlier lines
            return encoded_length(conversation(references, [], text), loaded.tokenizer)

        # each exchange is tokenized once; the context turns' own windows are followed as a full render made them
        lengths: list[int] = []
        start = 0
        for exchange in history:
            start = hop(start, lengths, own(exchange.text), limit, self.context_lines)
            lengths.append(encoded_length(exchange_parts(exchange), loaded.tokenizer))
        yield JobStarted(job, tuple(ln.line_id for ln in request.lines))
        for index, line in enumerate(request.lines):
            seed = line_seed(base_seed, index)
            text = speaker_text(line.speaker, line.text)
            if line.line_id in request.scene_starts:
                start = len(history)  # a heading starts a scene: its first line hears no earlier line
            start = hop(start, lengths, own(text), limit, self.context_lines)
            generator = make_generator(seed, loaded.device)
            prompt = self._prompt(loaded, references, history[start:], text)
            codes = yield from self._line(loaded, request, line, seed, text, prompt, generator,
                                          loaded.decoder.sampler(request.sampling, generator, request.ignore_eos)
                                          if self._streams.batch is None else None, cancel)  # type: ignore[union-attr]
            if codes is None:
                yield JobFinished(job, cancelled=True)
                return
            history.append(Exchange(text, codes))
            lengths.append(encoded_length(exchange_parts(history[-1]), loaded.tokenizer))
        yield JobFinished(job)

    def _upstream(self, loaded: Runtime, request: SynthesisRequest, references: list[Reference], base_seed: int,
                  cancel: threading.Event) -> Iterator[Step]:
        job = request.job_id
        if len({ln.lora for ln in request.lines}) > 1:
            raise UserError("upstream batching speaks several lines in one batch, so all its voices need the same "
                            "LoRA; use line batching for voices with different LoRAs")
        texts = [speaker_text(ln.speaker, ln.text) for ln in request.lines]
        batches = plan_batches("\n".join(texts), "upstream", request.chunk_length, upstream_exact=True)
        # each line is one or more turns; a batch holds whole turns, so it starts at some line
        owners: list[LineSpec] = []
        turn_owner = [ln for ln, t in zip(request.lines, texts) for _ in split_turns(t)]
        consumed = 0
        for batch in batches:
            owners.append(turn_owner[consumed])
            consumed += len(split_turns(batch))
        yield JobStarted(job, tuple(ln.line_id for ln in owners))
        generator = make_generator(base_seed, loaded.device)  # one for the request, never reseeded (upstream's)
        sampler = (loaded.decoder.sampler(request.sampling, generator, request.ignore_eos)  # type: ignore[union-attr]
                   if self._streams.batch is None else None)
        history: list[Exchange] = []
        for owner, text in zip(owners, batches, strict=True):
            prompt = self._prompt(loaded, references, history, text, len(history))
            codes = yield from self._line(loaded, request, owner, base_seed, text, prompt, generator, sampler, cancel)
            if codes is None:
                yield JobFinished(job, cancelled=True)
                return
            history.append(Exchange(text, codes))
        yield JobFinished(job)

    @staticmethod
    def _prompt(loaded: Runtime, references: list[Reference], kept: list[Exchange], text: str,
                index: int = 0) -> np.ndarray:
        prompt = build_prompt(loaded.tokenizer, references, kept, text, loaded.model.config.num_codebooks)
        room = int(loaded.model.config.slow.max_seq_len) - PROMPT_RESERVE
        if prompt.shape[1] > room:
            raise UserError(f"prompt is too long: {prompt.shape[1]} tokens > {room} (batch {index + 1}); use "
                            "shorter text or fewer/shorter references")
        return prompt

    def _audio_decoder(self, loaded: Runtime) -> IncrementalDecoder:
        """A line's streaming decoder (`line_decoder`) in pieces of the engine's chunk (pushing 1 + chunk frames once
        at load packs its weights for both sizes, and builds the kernels if this machine has none yet)."""
        assert loaded.codec is not None
        return line_decoder(loaded.codec, loaded.exact_audio, self.chunk_frames)

    def _line(self, loaded: Runtime, request: SynthesisRequest, line: LineSpec, seed: int, text: str,
              prompt: np.ndarray, generator: torch.Generator, sampler: object,
              cancel: threading.Event) -> Generator[Step, None, np.ndarray | None]:
        """One batch of the request (a line, or upstream's group of turns reported under its first line) as a
        stream: its frames relayed as audio; returns its codes, or None when cancelled."""
        assert self._streams is not None and loaded.codec is not None
        opened: Stream | None = yield from self._streams.open(prompt, request.sampling, generator, sampler,
                                                              line.lora, cancel, request.ignore_eos)
        if opened is None:
            return None
        try:
            return (yield from self._relay(loaded, request, line, seed, text, prompt, opened, cancel))
        finally:
            opened.close()

    def _relay(self, loaded: Runtime, request: SynthesisRequest, line: LineSpec, seed: int, text: str,
               prompt: np.ndarray, stream: Stream, cancel: threading.Event) -> Generator[Step, None, np.ndarray | None]:
        job, decoder = request.job_id, self._audio_decoder(loaded)
        if stream.switch_s is not None:
            log.info("LoRA %s merged in %.3f s", line.lora.name if line.lora else "removed", stream.switch_s)
        yield LineStarted(job, line.line_id, stream.switch_s)
        started = time.perf_counter()
        budget = frame_budget(prompt.shape[1], request.sampling.max_frames, loaded.decoder.length)
        expected = max(1, min(max(budget - 1, 0), estimate_frames(text)))
        frames: list[torch.Tensor] = []
        pending: list[torch.Tensor] = []
        chunks: list[np.ndarray] = []
        sent = 0

        def flush() -> AudioChunk:
            nonlocal sent
            samples = decoder.push(torch.stack(pending, dim=1).cpu())
            pending.clear()
            chunk = AudioChunk(job, line.line_id, sent, samples.astype(np.float32, copy=False))
            chunks.append(chunk.samples)
            sent += len(samples)
            return chunk

        for frame in stream.frames():
            if frame is WAIT:
                if cancel.is_set():
                    return None
                yield WAIT
                continue
            frames.append(frame)
            pending.append(frame)
            if len(frames) == 1 or len(pending) >= self.chunk_frames:
                yield flush()
                yield Progress(job, line.line_id, len(frames), max(expected, len(frames) + 1),
                               (time.perf_counter() - started) / (sent / loaded.info.sample_rate))
        if cancel.is_set():
            return None
        if pending:
            yield flush()
        if frames:
            codes = torch.stack(frames, dim=1).cpu().numpy().astype(np.int64)
        else:
            codes = np.zeros((loaded.model.config.num_codebooks, 0), dtype=np.int64)
        audio = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
        heard = f"{loaded.info.name}|{loaded.info.codec_fingerprint}|{request.sampling.batching}"
        fingerprint = line_fingerprint(line, request.references, request.sampling, heard, request.ignore_eos)
        yield LineFinished(job, line.line_id, uuid.uuid4().hex, codes, audio, seed, fingerprint)
        return codes


def _snippet(text: str, limit: int = 30) -> str:
    """A transcript shortened for a message, quoted."""
    return repr(text if len(text) <= limit else text[:limit - 1] + "…")


def check_reference_codes(codes: np.ndarray, what: str, codec: CodecConfig) -> None:
    """A UserError naming `what` unless `codes` are codes this codec could have made: (10, frames >= 1) integers,
    the semantic row within its codebook, the residual rows within theirs. The engine's own defence: the voice
    library validates its cache too, but a request may come from anywhere."""
    arr = np.asarray(codes)
    fix = "re-encode the voice (delete its codes.safetensors)"
    if arr.ndim != 2 or arr.shape[0] != codec.n_codes or arr.shape[1] == 0:
        raise UserError(f"{what}: codes must have shape ({codec.n_codes}, frames >= 1), got {arr.shape}; {fix}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise UserError(f"{what}: codes must be integers, got {arr.dtype}; {fix}")
    if arr.min() < 0:
        raise UserError(f"{what}: codes must not be negative (found {int(arr.min())}); {fix}")
    for rows, size, kind in ((arr[:1], codec.semantic_codebook_size, "semantic"),
                             (arr[1:], codec.codebook_size, "residual")):
        if rows.size and rows.max() >= size:
            raise UserError(f"{what}: code {int(rows.max())} is beyond the codec's {kind} codebook of {size}; {fix}")
