"""The seam between the studio and whatever produces speech (design.md §3).

Torch-free on purpose: the worker, the window and the tests import this module without paying
for torch. An engine is anything with `load`, `encode` and `generate` that yields the events
below; `S2Engine` (real) and `FakeEngine` (tones) both do.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, Union

import numpy as np
import numpy.typing as npt

from s2studio.settings import CHOICES, LIMITS, Batching, Device, Loading, Precision, Quantize, Sampling, Speed  # noqa: F401 - re-exported
from s2studio.units import FRAME_SAMPLES, NUM_CODEBOOKS, SAMPLE_RATE  # noqa: F401 - re-exported: every engine's

DEVICES, PRECISIONS, QUANTIZE_MODES, SPEEDS = (CHOICES[name] for name in ("device", "precision", "quantize", "speed"))
SEED_RANGE = (-(2**63), 2**64)
"""Seeds torch's generators take (a negative seed wraps around 2**64); the upper bound is excluded."""
SEED_LIMIT = int(LIMITS["seed"].hi) + 1
"""Request seeds are below this (`s2studio.settings.LIMITS` is the one table of generation limits), and so is
every line's seed (`line_seed`), so any seed an engine reports can be asked for again."""


def line_seed(base: int, index: int) -> int:
    """The seed line `index` of a request with base seed `base` is drawn with: `base + index`, wrapping below
    `SEED_LIMIT`."""
    return (base + index) % SEED_LIMIT


def request_seed(sampling: Sampling) -> int:
    """A request's base seed: the fixed one, or one drawn now (line i is then drawn with `line_seed`). Every engine
    draws it here, so the fake, the remote and the real engine keep one contract."""
    fixed = sampling.fixed_seed
    return fixed if fixed is not None else secrets.randbelow(SEED_LIMIT)


# ----------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class LoadRequest(Loading):
    """Load (or replace) the model and codec in `model_dir` with the `Loading` settings (keywords, validated
    against `s2studio.settings.LIMITS`; threads and max_batch 0: automatic, `ModelInfo.max_batch` says what the
    memory planner gave)."""

    job_id: str
    model_dir: Path


@dataclass(frozen=True)
class Reference:
    """One reference clip, already encoded: its transcript and its (10, N) codes."""

    speaker: int
    transcript: str
    codes: npt.NDArray[np.int64]
    clip: Path | None = None
    """The audio file the codes were encoded from, for engines that send references as audio (the remote
    engine on a server that is not `s2studio serve`); None where only codes exist."""


@dataclass(frozen=True)
class LineSpec:
    """One utterance to speak: the text as the model sees it (tags included) and its speaker index."""

    line_id: str
    speaker: int
    text: str
    lora: Path | None = None
    """The speaker's voice's LoRA (`lora.safetensors`), merged into the model for this line; None: the base model."""


@dataclass(frozen=True)
class ContextTurn:
    """An already rendered line that came before the request's first line: its text and codes.

    Line mode conditions each line on the newest earlier lines that fit the context; when only some
    lines are rendered (a stale line, the line under the cursor), the caller passes their predecessors'
    kept takes here so the line sounds as it would in a full render."""

    speaker: int
    text: str
    codes: npt.NDArray[np.int64]


@dataclass(frozen=True)
class SynthesisRequest:
    job_id: str
    lines: tuple[LineSpec, ...]
    references: tuple[Reference, ...] = ()
    sampling: Sampling = field(default_factory=Sampling)
    """How the lines are sampled and batched (`sampling.batching`)."""
    chunk_length: int = 200
    """UTF-8 bytes per batch in upstream batching (upstream's API default)."""
    context: tuple[ContextTurn, ...] = ()
    """Line mode only: earlier lines to condition on, oldest first."""
    scene_starts: frozenset[str] = frozenset()
    """Ids of the lines a heading (`# …`) comes before: each starts a scene, which the render plan
    (engine/fleet.py) may send to another engine."""
    ignore_eos: bool = False
    """Never end a batch at `<|im_end|>` (it is masked out of the sampler): every batch runs to
    `sampling.max_frames` or the context. For benchmarks, which need exactly N frames."""


@dataclass(frozen=True)
class ClipToEncode:
    clip_id: str
    path: Path


@dataclass(frozen=True)
class EncodeRequest:
    """Encode reference clips to codes (the voice library caches the result)."""

    job_id: str
    clips: tuple[ClipToEncode, ...]


# ----------------------------------------------------------------------------- events


@dataclass(frozen=True)
class ModelInfo:
    name: str
    device: str
    precision: str
    sample_rate: int
    codec_fingerprint: str
    max_context: int
    """Largest prompt + generation length in frames/tokens the model accepts."""
    kernels: str = ""
    """Which CPU kernels the fast path runs ("C++ kernels (AVX2)", "torch's kernels (slower)"); empty where none
    apply (the exact loop, a GPU)."""
    kernels_note: str = ""
    """Why torch's slower kernels run instead of the C++ ones, when they do."""
    max_batch: int = 1
    """Streams the engine runs at once (lines of several scenes, takes, server requests): the memory planner's
    largest batch or the one asked for (`LoadRequest.max_batch`); 1 for the exact loop, which runs one."""

    def settings_text(self) -> str:
        """How it computes, for a log line or the status bar: "float32, bf16 weights; C++ kernels (AVX2)"."""
        return f"{self.precision}; {self.kernels}" if self.kernels else self.precision


@dataclass(frozen=True)
class DeviceOption:
    """A device the model may run on (`Device`), whether this computer has it, and why not (or which it is)."""

    name: str
    available: bool
    reason: str = ""


@dataclass(frozen=True)
class DevicesRequest:
    """Which devices does this computer have? (The studio asks once; the engine thread answers.)"""

    job_id: str


@dataclass(frozen=True)
class DevicesFound:
    job_id: str
    devices: tuple[DeviceOption, ...]


@dataclass(frozen=True)
class ModelLoading:
    job_id: str
    progress: float
    """0..1."""
    message: str = ""


@dataclass(frozen=True)
class ModelReady:
    job_id: str
    info: ModelInfo


@dataclass(frozen=True)
class JobStarted:
    job_id: str
    plan: tuple[str, ...]
    """The line ids in the order they will be rendered."""


@dataclass(frozen=True)
class LineStarted:
    job_id: str
    line_id: str
    lora_switch_s: float | None = None
    """Seconds it took to change the model's LoRA for this line (merge a voice's, or go back to the base
    weights) before it started; None when the weights in place were this line's already."""


@dataclass(frozen=True)
class Progress:
    job_id: str
    line_id: str
    frames: int
    """Frames generated so far for this line."""
    expected: int
    """Estimate of this line's total frames."""
    rtf: float
    """Wall seconds per second of audio produced so far (below 1 is faster than real time)."""


@dataclass(frozen=True)
class AudioChunk:
    job_id: str
    line_id: str
    start_sample: int
    """Offset of `samples` from the start of this line's audio."""
    samples: npt.NDArray[np.float32]


@dataclass(frozen=True)
class Backend:
    """Which engine made a take: what the takes list shows and what says whether its seed re-renders it."""

    kind: str
    """"local" (this computer), or a server's protocol: "s2studio", "vllm", "sglang", "fish", "fishcloud",
    "openai"."""
    url: str = ""
    model: str = ""
    """The model name the engine reported."""
    seed_reproduces: bool = True
    """False where the server does not take the seed (vllm-omni, Fish's cloud, OpenAI-style servers)."""

    def describe(self) -> str:
        where = self.url.split("://", 1)[-1] if self.url else "this computer"
        seed = "" if self.seed_reproduces else ", seed not reproducible"
        return f"{self.model or self.kind} on {where} ({self.kind}{seed})"


@dataclass(frozen=True)
class LineFinished:
    job_id: str
    line_id: str
    take_id: str
    codes: npt.NDArray[np.int64]
    """(10, frames)."""
    audio: npt.NDArray[np.float32]
    seed: int
    fingerprint: str
    """Hash of text + voices + settings: a take is stale when this changes."""
    backend: Backend | None = None
    """The engine that made it; None: the local engine (the render plan fills it in for every take)."""


@dataclass(frozen=True)
class ClipEncoded:
    job_id: str
    clip_id: str
    codes: npt.NDArray[np.int64]
    codec_fingerprint: str


@dataclass(frozen=True)
class JobFinished:
    job_id: str
    cancelled: bool = False


@dataclass(frozen=True)
class JobFailed:
    job_id: str
    error: str
    """One line a person can act on; details go to the log."""


Event = Union[
    ModelLoading, ModelReady, JobStarted, LineStarted, Progress, AudioChunk, LineFinished,
    ClipEncoded, DevicesFound, JobFinished, JobFailed,
]


class Wait:
    """What a job yields, between its events, when its stream needs the engine's next step: the scheduler then
    resumes the other jobs and steps the engine once for all of their streams (engine/scheduler.py). Only `WAIT`,
    the one instance, is ever yielded; callers never see it (`Engine.generate` steps the engine itself)."""

    _instance: Wait | None = None

    def __new__(cls) -> Wait:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "WAIT"


WAIT = Wait()
Step = Union[Event, Wait]
"""What a job yields on the scheduler: its events, and `WAIT` where its stream waits for the next step."""


class Engine(Protocol):
    """What the scheduler drives. Every method runs on the engine thread and never raises for
    user-caused problems: it yields `JobFailed` instead. `cancel` is checked between frames.

    `generate` runs one job alone, to its end (a caller that iterates it sees events only)."""

    def load(self, request: LoadRequest, cancel: threading.Event) -> Iterator[Event]: ...

    def encode(self, request: EncodeRequest, cancel: threading.Event) -> Iterator[Event]: ...

    def generate(self, request: SynthesisRequest, cancel: threading.Event) -> Iterator[Event]: ...


class BatchEngine(Engine, Protocol):
    """An engine that runs many jobs' streams at once (design.md §2): the scheduler resumes `stream(request)` of
    each running job, which yields `WAIT` whenever its stream needs a frame, and calls `step` once for all of them
    (one prefill piece, one frame for every running stream). `max_batch` is how many streams run at once."""

    max_batch: int

    def stream(self, request: SynthesisRequest, cancel: threading.Event) -> Iterator[Step]: ...

    def step(self) -> None: ...
