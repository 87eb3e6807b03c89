"""`S2Engine`: the real engine behind the studio and `s2studio synth --script` (design.md §3, §6).

It owns the DualAR model, the tokenizer and the codec, and turns requests into the events of
`engine/api.py`. Audio streams: every generated frame goes straight into an `IncrementalDecoder`, so a
line's first `AudioChunk` leaves after its first kept frame (two generated frames: the generation
loop only hands out a frame once it knows it is not the dropped last one), not at the end of a batch.

Two ways to render a request:

- **line mode** (the studio's): each line is its own batch, drawn with its own generator seeded
  `seed + index`, and conditioned on the references plus the newest earlier lines (text and codes)
  that fit the context, at most `context_lines` of them. Earlier lines are the request's `context`
  followed by the lines already rendered in this request.
- **upstream mode** (parity): the lines become `<|speaker:i|>` turns grouped as upstream's
  `generate_long` groups them (`chunk_length` bytes, 5 turns), one generator for the request, every
  earlier batch kept in the prompt. A batch's audio is reported under the id of its first line, and
  `JobStarted.plan` lists those ids only.

Every method yields `JobFailed` instead of raising; the worker never sees an exception from here.
"""

from __future__ import annotations

import gc
import logging
import re
import secrets
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from s2studio.engine.api import (
    AudioChunk, ClipEncoded, EncodeRequest, Event, JobFailed, JobFinished, JobStarted, LineFinished, LineSpec,
    LineStarted, LoadRequest, ModelInfo, ModelLoading, ModelReady, Progress, SynthesisRequest,
)
from s2studio.engine.plan import line_fingerprint
from s2studio.errors import UserError

log = logging.getLogger(__name__)

SPEAKER_TAG = re.compile(r"<\|speaker:\d+\|>")
TAG = re.compile(r"\[[^\]]*\]")
FAST_CONTEXT = 8192
"""Positions of the fast path's KV cache: S2 Pro's 32768 would cost 9.7 GB in float32 (1.2 GB at 8192 in bf16)."""
FRAMES_PER_CHAR = 1.1
"""Rough speech rate for the progress estimate: ~21.5 frames/s over ~18 characters/s."""


@dataclass
class _Loaded:
    model: torch.nn.Module
    tokenizer: object
    codec: torch.nn.Module
    info: ModelInfo
    decoder: object | None = None
    """The fast path's `FastDecoder` (LoadRequest.fast): its KV cache keeps the last prompt's prefix."""


def _guard(job_id: str, events: Iterator[Event]) -> Iterator[Event]:
    """Turn any exception of a job into its `JobFailed`, so the engine thread survives it."""
    try:
        yield from events
    except UserError as exc:
        yield JobFailed(job_id, str(exc))
    except (torch.OutOfMemoryError, MemoryError):
        log.exception("job %s ran out of memory", job_id)
        yield JobFailed(job_id, "out of memory: choose a smaller precision or device, or close other programs")
    except Exception as exc:  # a bug: keep the details in the log, the engine usable
        log.exception("job %s failed", job_id)
        yield JobFailed(job_id, f"internal error ({type(exc).__name__}: {exc}); details are in the log")


def speaker_text(speaker: int, text: str) -> str:
    return f"<|speaker:{speaker}|>{text}"


def estimate_frames(text: str) -> int:
    return max(1, round(FRAMES_PER_CHAR * len(TAG.sub("", SPEAKER_TAG.sub("", text)).strip())))


class S2Engine:
    """The DualAR model + codec on one device; one request at a time, on the engine thread.

    `chunk_frames`: frames decoded per `AudioChunk` after a line's first frame (which goes out alone, for the
    earliest sound). The streaming decoder pads every push to a block of frames to round like a full decode, so
    a push of 4 frames costs about what a push of 1 does. `context_lines`: earlier lines a line may hear.
    """

    def __init__(self, chunk_frames: int = 4, context_lines: int = 6) -> None:
        if chunk_frames < 1:
            raise ValueError("chunk_frames must be at least 1")
        self.chunk_frames = chunk_frames
        self.context_lines = context_lines
        self._loaded: _Loaded | None = None

    @property
    def info(self) -> ModelInfo | None:
        return self._loaded.info if self._loaded else None

    # ------------------------------------------------------------------ load

    def load(self, request: LoadRequest, cancel: threading.Event) -> Iterator[Event]:
        return _guard(request.job_id, self._load(request, cancel))

    def _load(self, request: LoadRequest, cancel: threading.Event) -> Iterator[Event]:
        from s2studio.codec.loading import codec_fingerprint, load_codec
        from s2studio.engine import cpu_gemv
        from s2studio.engine.bf16_linear import cpu_fast_path_keeps_bf16
        from s2studio.engine.device import PRECISIONS, resolve_device, resolve_dtype, set_threads
        from s2studio.engine.generate import ensure_caches
        from s2studio.engine.memory import check_fits, codec_bytes_of
        from s2studio.engine.quantize import load_quantized
        from s2studio.model.config import load_config
        from s2studio.text.tokenizer import S2Tokenizer

        job, folder = request.job_id, Path(request.model_dir)
        yield ModelLoading(job, 0.0, "reading the tokenizer")
        device = resolve_device(request.device)
        dtype = resolve_dtype(request.precision, device)
        set_threads(request.threads)
        self.unload()  # never hold two models at once
        if not (folder / "tokenizer.json").is_file():
            raise UserError(f"{folder} is not an S2 model folder: tokenizer.json is missing")
        tokenizer = S2Tokenizer.from_file(folder / "tokenizer.json")
        if cancel.is_set():
            yield JobFinished(job, cancelled=True)
            return
        precision = next(name for name, value in PRECISIONS.items() if value == dtype)
        fast = request.fast if request.fast is not None else not (device.type == "cpu" and dtype == torch.float32)
        if device.type == "cpu" and (fast or request.quantize != "none"):
            yield ModelLoading(job, 0.05, "preparing the CPU kernels (built once, a few seconds)")
            cpu_gemv.available()
        keep_bf16 = fast and cpu_fast_path_keeps_bf16(device, request.quantize)
        yield ModelLoading(job, 0.1, "loading the language model")
        # refuse before reading gigabytes that cannot fit, naming a setting that does
        check_fits(load_config(folder), str(device), precision=precision, quantize=request.quantize,
                   context=FAST_CONTEXT if fast else None, codec_bytes=codec_bytes_of(folder),
                   bf16_linears=keep_bf16)
        model = load_quantized(folder, device=device, dtype=dtype, mode=request.quantize,
                               semantic_range=(tokenizer.semantic_begin_id, tokenizer.semantic_end_id),
                               im_end_id=tokenizer.im_end_id, keep_bf16_linears=keep_bf16)
        if cancel.is_set():
            yield JobFinished(job, cancelled=True)
            return
        yield ModelLoading(job, 0.7, "loading the codec")
        codec = load_codec(folder, device=device)  # the codec always runs in float32 (spec s2-codec.md §7.4)
        yield ModelLoading(job, 0.9, "allocating the caches")
        decoder = None
        if fast:
            from s2studio.engine.fast import FastDecoder

            decoder = FastDecoder(model, tokenizer.im_end_id, length=FAST_CONTEXT)
        else:
            ensure_caches(model)
        info = ModelInfo(name=folder.name, device=str(device), precision=str(dtype).removeprefix("torch.")
                         + ("" if request.quantize == "none" else f"+{request.quantize}")
                         + (", bf16 weights" if keep_bf16 and dtype != torch.bfloat16 else ""),
                         sample_rate=codec.sample_rate, codec_fingerprint=codec_fingerprint(codec),
                         max_context=int(model.config.slow.max_seq_len))
        self._loaded = _Loaded(model, tokenizer, codec, info, decoder)
        log.info("model ready: %s", info)
        yield ModelLoading(job, 1.0, "ready")
        yield ModelReady(job, info)
        yield JobFinished(job)

    def unload(self) -> None:
        if self._loaded is None:
            return
        self._loaded = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _require(self) -> _Loaded:
        if self._loaded is None:
            raise UserError("no model is loaded; choose a model folder first")
        return self._loaded

    # ------------------------------------------------------------------ encode

    def encode(self, request: EncodeRequest, cancel: threading.Event) -> Iterator[Event]:
        return _guard(request.job_id, self._encode(request, cancel))

    def _encode(self, request: EncodeRequest, cancel: threading.Event) -> Iterator[Event]:
        from s2studio.codec.resample import encode_file

        loaded = self._require()
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
        return _guard(request.job_id, self._generate(request, cancel))

    def _generate(self, request: SynthesisRequest, cancel: threading.Event) -> Iterator[Event]:
        from s2studio.text.prompt import Reference

        loaded = self._require()
        if not request.lines:
            raise UserError("nothing to synthesize: the request has no lines")
        if len({ln.line_id for ln in request.lines}) != len(request.lines):
            raise UserError("line ids in a request must be unique")
        if request.batching not in ("line", "upstream"):
            raise UserError(f"unknown batching {request.batching!r}; use 'line' or 'upstream'")
        references = [Reference(r.transcript if SPEAKER_TAG.search(r.transcript)
                                else speaker_text(r.speaker, r.transcript), r.codes)
                      for r in request.references]
        base_seed = request.sampling.seed if request.sampling.seed is not None else secrets.randbits(31)
        if request.batching == "upstream":
            yield from self._generate_upstream(loaded, request, references, base_seed, cancel)
        else:
            yield from self._generate_lines(loaded, request, references, base_seed, cancel)

    def _settings(self, request: SynthesisRequest):
        from s2studio.engine.generate import GenerationSettings

        s = request.sampling
        return GenerationSettings(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                                  max_new_tokens=s.max_new_tokens)

    def _generate_lines(self, loaded: _Loaded, request: SynthesisRequest, references: list,
                        base_seed: int, cancel: threading.Event) -> Iterator[Event]:
        from s2studio.engine.generate import generate_batches, make_generator
        from s2studio.text.prompt import Exchange

        job = request.job_id
        history = [Exchange(speaker_text(t.speaker, t.text), np.asarray(t.codes, dtype=np.int64))
                   for t in request.context]
        yield JobStarted(job, tuple(ln.line_id for ln in request.lines))
        device = next(loaded.model.parameters()).device
        for index, line in enumerate(request.lines):
            seed = base_seed + index
            text = speaker_text(line.speaker, line.text)
            kept = self._fitting_context(loaded, references, history, text)
            batches = generate_batches(loaded.model, loaded.tokenizer, [text], references=references,
                                       settings=self._settings(request), generator=make_generator(seed, device),
                                       context=lambda _history, _text, kept=kept: kept, cancel=cancel,
                                       decoder=loaded.decoder)
            finished = yield from self._stream(loaded, request, line, seed, batches)
            if finished is None:
                yield JobFinished(job, cancelled=True)
                return
            history.append(Exchange(text, finished))
        yield JobFinished(job)

    def _fitting_context(self, loaded: _Loaded, references: list, history: Sequence, text: str) -> list:
        """The newest earlier exchanges (at most `context_lines`) whose prompt still leaves room to speak."""
        from s2studio.engine.generate import PROMPT_RESERVE
        from s2studio.text.prompt import build_prompt

        limit = int(loaded.model.config.slow.max_seq_len) - PROMPT_RESERVE
        if loaded.decoder is not None:  # the fast path's cache may be shorter; keep room for a line there too
            limit = min(limit, loaded.decoder.length - PROMPT_RESERVE // 4)
        kept: list = []
        for exchange in reversed(history[-self.context_lines:] if self.context_lines else []):
            candidate = [exchange, *kept]
            length = build_prompt(loaded.tokenizer, references, candidate, text,
                                  loaded.model.config.num_codebooks).shape[1]
            if length > limit:
                break
            kept = candidate
        return kept

    def _generate_upstream(self, loaded: _Loaded, request: SynthesisRequest, references: list,
                           base_seed: int, cancel: threading.Event) -> Iterator[Event]:
        from s2studio.engine.generate import generate_batches, make_generator, plan_batches
        from s2studio.text.prompt import split_turns

        job = request.job_id
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
        device = next(loaded.model.parameters()).device
        events = generate_batches(loaded.model, loaded.tokenizer, batches, references=references,
                                  settings=self._settings(request), generator=make_generator(base_seed, device),
                                  cancel=cancel, decoder=loaded.decoder)
        for owner in owners:
            finished = yield from self._stream(loaded, request, owner, base_seed, events)
            if finished is None:
                yield JobFinished(job, cancelled=True)
                return
        yield JobFinished(job)

    def _stream(self, loaded: _Loaded, request: SynthesisRequest, line: LineSpec, seed: int,
                batch_events: Iterator) -> Iterator[Event]:
        """Relay one batch's frames as audio; returns its codes, or None when cancelled."""
        from s2studio.codec.streaming import IncrementalDecoder
        from s2studio.engine.generate import BatchFinished, BatchStarted, FrameReady

        job, decoder = request.job_id, IncrementalDecoder(loaded.codec)
        yield LineStarted(job, line.line_id)
        started = time.perf_counter()
        expected = estimate_frames(line.text)
        pending: list[torch.Tensor] = []
        chunks: list[np.ndarray] = []
        sent = frames = 0

        def flush() -> AudioChunk:
            nonlocal sent
            samples = decoder.push(torch.stack(pending, dim=1).cpu())
            pending.clear()
            chunk = AudioChunk(job, line.line_id, sent, samples.astype(np.float32, copy=False))
            chunks.append(chunk.samples)
            sent += len(samples)
            return chunk

        for event in batch_events:
            if isinstance(event, BatchStarted):
                expected = max(1, min(event.max_frames, estimate_frames(event.text)))
            elif isinstance(event, FrameReady):
                pending.append(event.codes)
                frames += 1
                if frames == 1 or len(pending) >= self.chunk_frames:
                    yield flush()
                    seconds = sent / loaded.info.sample_rate
                    yield Progress(job, line.line_id, frames, max(expected, frames + 1),
                                   (time.perf_counter() - started) / seconds)
            elif isinstance(event, BatchFinished):
                if pending:
                    yield flush()
                audio = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
                fingerprint = line_fingerprint(line, request.references, request.sampling,
                                               f"{loaded.info.name}|{loaded.info.codec_fingerprint}|{request.batching}")
                yield LineFinished(job, line.line_id, uuid.uuid4().hex, event.codes, audio, seed, fingerprint)
                return event.codes
        return None
