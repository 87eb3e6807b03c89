"""A torch-free engine that speaks in tones, for UI and pipeline tests (design.md §3).

It follows the event contract of the real engine exactly (tests/engine_contract.py checks both):

    every job ends with exactly one JobFinished or JobFailed, its last event;
    load:     ModelLoading(0.0) … ModelLoading(1.0), ModelReady, JobFinished   | … JobFailed
    encode:   JobStarted(clip ids), ClipEncoded per clip, JobFinished     | JobFailed
    generate: JobStarted(line ids), then per line: LineStarted,
              (AudioChunk, Progress) every `chunk_frames` frames, LineFinished; JobFinished
              cancel between frames -> JobFinished(cancelled=True); a bad request -> JobFailed

It batches as the real engine does (engine/scheduler.py): `stream` is a job that yields `WAIT` before every frame,
`step` is one frame for every stream at once (one `frame_latency_s` however many streams run), `max_batch` how
many streams run at once; `generate` is a job alone.

Audio is deterministic: a sine per speaker index whose level follows the line's codes (a frame's level from its
semantic code), and codes come from a generator seeded by the line's seed and text, so equal seeds give equal
takes. Seeds follow the real engine's rule: line i of a request is drawn with base + i, the base being the
request's seed or, when it has none, one seed drawn for the whole request.
`frame_latency_s`, `fail_on_load`, `fail_on_line` and `fail_on_encode` inject slowness and failures.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import soundfile as sf

from s2studio.engine.api import (
    FRAME_SAMPLES, NUM_CODEBOOKS, SAMPLE_RATE, WAIT, AudioChunk, ClipEncoded, DeviceOption, EncodeRequest, Event,
    JobFailed, JobFinished, JobStarted, LineFinished, LineStarted, LoadRequest, ModelInfo, ModelLoading, ModelReady,
    Progress, Step, SynthesisRequest, line_seed, request_seed,
)
from s2studio.engine.plan import line_fingerprint, lora_digest
from s2studio.engine.scheduler import run_alone

SEMANTIC_CODES = 4096
RESIDUAL_CODES = 1024
"""The fake codec's codebooks (S2's sizes): codebook 0 is semantic, 1..9 residual."""
_FADE_IN = np.linspace(0.0, 1.0, FRAME_SAMPLES, dtype=np.float32)
FAKE_INFO = ModelInfo(name="fake", device="cpu", precision="fp32", sample_rate=SAMPLE_RATE,
                      codec_fingerprint="fake-codec-1", max_context=4096)


def _stable_int(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()[:8], "little")


@dataclass
class FakeEngine:
    frame_latency_s: float = 0.0
    """Sleep per step, one frame for every stream (and per loading step), to look like a slow model."""
    max_batch: int = 4
    """Streams that run at once (what the real engine's memory planner gives); `ModelInfo.max_batch` after a load."""
    chunk_frames: int = 2
    """Frames per AudioChunk; the real engine's first chunk comes after at most 4 frames."""
    frames_per_char: float = 0.25
    min_frames: int = 4
    require_load: bool = False
    """If True, generate/encode before a successful load fail like the real engine does."""
    fail_on_load: bool = False
    fail_on_line: str | None = None
    """Line id whose generation fails after `fail_after_frames` frames."""
    fail_after_frames: int = 2
    fail_on_encode: bool = False
    info: ModelInfo = field(default_factory=lambda: FAKE_INFO)
    gpu: bool = False
    """Whether the fake computer has a CUDA GPU (`devices`, and loads that ask for "cuda")."""
    lora_switch_latency_s: float = 0.0
    """Sleep when a line needs other LoRA weights than the ones in place, to look like the real merge."""
    current_lora: str | None = None
    """Digest of the LoRA "merged" now (None: the base weights); a line with another one reports its switch time
    in `LineStarted.lora_switch_s`, as the real engine does."""
    loaded: bool = False
    calls: list[str] = field(default_factory=list)
    """Names of the methods called, in order (tests count them)."""
    _sines: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------------ load

    def devices(self) -> tuple[DeviceOption, ...]:
        """The fake computer's devices: the CPU, and a GPU when `gpu`."""
        return (DeviceOption("auto", True), DeviceOption("cpu", True),
                DeviceOption("cuda", self.gpu, "" if self.gpu else "no NVIDIA GPU found"),
                DeviceOption("mps", False, "only on Macs with Apple silicon"))

    def load(self, request: LoadRequest, cancel: threading.Event) -> Iterator[Event]:
        self.calls.append("load")
        self.loaded = False
        self.current_lora = None
        if request.device in ("cuda", "mps") and not (self.gpu and request.device == "cuda"):
            yield JobFailed(request.job_id, f"device {request.device!r} requested but this computer has none")
            return
        for step, message in enumerate(("reading weights", "building model", "warming up")):
            if cancel.is_set():
                yield JobFinished(request.job_id, cancelled=True)
                return
            yield ModelLoading(request.job_id, step / 3, message)
            self._sleep()
            if self.fail_on_load and step == 1:
                yield JobFailed(request.job_id, f"cannot load the model in {request.model_dir}: fake failure")
                return
        if request.max_batch:  # 0: automatic, what the memory holds
            self.max_batch = request.max_batch
        self.loaded = True
        yield ModelLoading(request.job_id, 1.0, "ready")
        yield ModelReady(request.job_id, replace(self.info, max_batch=self.max_batch))
        yield JobFinished(request.job_id)

    # ------------------------------------------------------------------ encode

    def encode_path(self, path: Path) -> np.ndarray:
        """(10, N) codes of one clip, about one frame per 2048 samples at 44.1 kHz."""
        data, sr = sf.read(str(path), dtype="float32", always_2d=True)
        frames = max(1, math.ceil(data.shape[0] * SAMPLE_RATE / sr / FRAME_SAMPLES))
        rng = np.random.default_rng(_stable_int(hashlib.sha256(data.tobytes()).hexdigest()))
        return self._codes(rng, frames)

    def encode(self, request: EncodeRequest, cancel: threading.Event) -> Iterator[Event]:
        self.calls.append("encode")
        if self.require_load and not self.loaded:
            yield JobFailed(request.job_id, "no model is loaded; load one first")
            return
        yield JobStarted(request.job_id, tuple(c.clip_id for c in request.clips))
        for clip in request.clips:
            if cancel.is_set():
                yield JobFinished(request.job_id, cancelled=True)
                return
            if self.fail_on_encode:
                yield JobFailed(request.job_id, f"cannot encode {clip.path.name}: fake failure")
                return
            try:
                codes = self.encode_path(clip.path)
            except (sf.LibsndfileError, RuntimeError, OSError) as exc:
                yield JobFailed(request.job_id, f"{clip.path.name} is not audio soundfile can read ({exc})")
                return
            self._sleep()
            yield ClipEncoded(request.job_id, clip.clip_id, codes, self.info.codec_fingerprint)
        yield JobFinished(request.job_id)

    # ------------------------------------------------------------------ generate

    def _problem(self, request: SynthesisRequest) -> str | None:
        if self.require_load and not self.loaded:
            return "no model is loaded; load one first"
        if not request.lines:
            return "nothing to synthesize: the request has no lines"
        if len({ln.line_id for ln in request.lines}) != len(request.lines):
            return "line ids in a request must be unique"
        for i, ref in enumerate(request.references):
            codes = np.asarray(ref.codes)
            what = f"reference {i + 1} ({ref.transcript[:30]!r})"
            if codes.ndim != 2 or codes.shape[0] != NUM_CODEBOOKS or codes.shape[1] == 0:
                return f"{what}: codes must be ({NUM_CODEBOOKS}, N), got {codes.shape}; re-encode the voice"
            if not np.issubdtype(codes.dtype, np.integer) or codes.min() < 0 or codes[0].max() >= SEMANTIC_CODES \
                    or codes[1:].max(initial=0) >= RESIDUAL_CODES:
                return f"{what}: codes outside the codec's codebooks; re-encode the voice"
        if any(ln.speaker < 0 for ln in request.lines):
            return "speaker indices must be >= 0"
        return None

    def generate(self, request: SynthesisRequest, cancel: threading.Event) -> Iterator[Event]:
        """The job alone (`stream`, stepped here)."""
        return run_alone(self, request.job_id, lambda: self.stream(request, cancel))

    def step(self) -> None:
        """One frame for every running stream: one frame's latency."""
        self._sleep()

    def stream(self, request: SynthesisRequest, cancel: threading.Event) -> Iterator[Step]:
        self.calls.append("generate")
        job = request.job_id
        problem = self._problem(request)
        if problem is not None:
            yield JobFailed(job, problem)
            return
        yield JobStarted(job, tuple(ln.line_id for ln in request.lines))
        base_seed = request_seed(request.sampling)
        for index, line in enumerate(request.lines):
            if cancel.is_set():
                yield JobFinished(job, cancelled=True)
                return
            seed = line_seed(base_seed, index)
            # a voice's LoRA changes the take as it would with the real model (and nothing else does)
            switching = time.perf_counter()
            lora = () if line.lora is None else (lora_digest(Path(line.lora)),)
            switch_s = None
            if (lora[0] if lora else None) != self.current_lora:
                if self.lora_switch_latency_s:
                    time.sleep(self.lora_switch_latency_s)
                self.current_lora = lora[0] if lora else None
                switch_s = time.perf_counter() - switching
            yield LineStarted(job, line.line_id, switch_s)
            rng = np.random.default_rng(_stable_int(seed, line.text, line.speaker, *lora))
            frames = max(self.min_frames, math.ceil(len(line.text.encode()) * self.frames_per_char))
            frames = min(frames, request.sampling.max_frames or frames)
            codes = self._codes(rng, frames)
            started = time.perf_counter()
            audio = self._line_audio(line.speaker, codes[0])  # made at once, handed out a frame at a time
            sent = 0
            for f in range(frames):
                yield WAIT
                if cancel.is_set():
                    yield JobFinished(job, cancelled=True)
                    return
                done = f + 1
                if self.fail_on_line == line.line_id and done >= self.fail_after_frames:
                    yield JobFailed(job, f"generation failed on line {line.line_id}: fake failure")
                    return
                if done % self.chunk_frames == 0 or done == frames:
                    chunk = audio[sent:done * FRAME_SAMPLES]
                    yield AudioChunk(job, line.line_id, sent, chunk)
                    sent += len(chunk)
                    seconds = sent / SAMPLE_RATE
                    yield Progress(job, line.line_id, done, frames, (time.perf_counter() - started) / seconds)
            yield LineFinished(job, line.line_id, uuid.uuid4().hex, codes, audio, seed,
                               line_fingerprint(line, request.references, request.sampling, "fake",
                                                request.ignore_eos))
        yield JobFinished(job)

    # ------------------------------------------------------------------ helpers

    def _sleep(self) -> None:
        if self.frame_latency_s > 0:
            time.sleep(self.frame_latency_s)

    @staticmethod
    def _codes(rng: np.random.Generator, frames: int) -> np.ndarray:
        codes = rng.integers(0, RESIDUAL_CODES, size=(NUM_CODEBOOKS, frames), dtype=np.int64)
        codes[0] = rng.integers(0, SEMANTIC_CODES, size=frames)
        return codes

    def _line_audio(self, speaker: int, semantic: np.ndarray) -> np.ndarray:
        """A line's audio, a frame per code: a sine per speaker, each frame's level from its codebook-0 code,
        fades in the first frame and out in the last (float32)."""
        samples = len(semantic) * FRAME_SAMPLES
        levels = (0.1 + 0.2 * semantic.astype(np.float32) / np.float32(SEMANTIC_CODES)).astype(np.float32)
        audio = np.repeat(levels, FRAME_SAMPLES) * self._sine(speaker, samples)
        audio[:FRAME_SAMPLES] *= _FADE_IN
        audio[-FRAME_SAMPLES:] *= _FADE_IN[::-1]
        return audio

    def _sine(self, speaker: int, samples: int) -> np.ndarray:
        """The speaker's tone (180 Hz up a fifth of an octave per speaker index), its first `samples`: made
        once per speaker and length, as a real model's cost is not what the fake stands for."""
        wave = self._sines.get(speaker)
        if wave is None or len(wave) < samples:
            n = np.arange(max(samples, 2 * len(wave) if wave is not None else 0, 1 << 18))
            wave = self._sines[speaker] = np.sin(2 * np.pi * 180.0 * 2 ** (speaker / 5) * n / SAMPLE_RATE
                                                 ).astype(np.float32)
        return wave[:samples]
