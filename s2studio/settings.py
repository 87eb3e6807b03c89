"""The generation settings, named and bounded once: the settings panel, the command line, the server and the engine
all read this table, so a bound changed here changes everywhere and nowhere else.

Two frozen types: `Sampling` (what the model is asked: seed, temperature, top-p, top-k, the longest line, batching)
and `Loading` (how it runs: device, precision, speed, quantization, threads, streams at once). The project keeps
both as one `state.project.GenerationSettings`; the engine takes them as they are: a synthesis request carries a
`Sampling` (`engine.api.SynthesisRequest.sampling`), a load request is a `Loading` with a job and a folder
(`engine.api.LoadRequest`). This module imports nothing above `errors`, so every layer may read it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, get_args

from s2studio.errors import UserError

SeedMode = Literal["random", "fixed"]
Batching = Literal["line", "upstream"]
Device = Literal["auto", "cpu", "cuda", "mps"]
Precision = Literal["auto", "fp32", "bf16"]
Speed = Literal["auto", "exact", "fast"]
"""exact: upstream's loop, bit-identical to upstream on CPU float32; fast: the fast path (attention over the filled
cache, prefix reuse); auto: fast everywhere except float32 on the CPU."""
Quantize = Literal["none", "int8", "int4"]
"""Weight-only quantization of the transformers' linear layers: int8 rows or int4 groups (engine/weights/)."""

CHOICES: dict[str, tuple[str, ...]] = {
    "seed_mode": get_args(SeedMode), "batching": get_args(Batching), "device": get_args(Device),
    "precision": get_args(Precision), "speed": get_args(Speed), "quantize": get_args(Quantize),
}
"""The values each choice accepts, on every side (the panel's lists, the command line's, the engine's)."""


def _shown(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


@dataclass(frozen=True)
class Limit:
    """The range of one numeric setting, its default and the step a spin box takes."""

    lo: float
    hi: float
    default: float
    step: float
    label: str
    """Its name in a message ("top-p must be between ...")."""
    auto: int | None = None
    """The value that means "automatic" (the lowest), or None when every value is a plain number."""

    @property
    def integer(self) -> bool:
        return isinstance(self.default, int) and isinstance(self.step, int)

    def range_text(self) -> str:
        """"between 0.05 and 1.95", or "0 (automatic) or between 1 and 256"."""
        if self.auto is not None:
            return f"{_shown(self.auto)} (automatic) or between {_shown(self.lo + 1)} and {_shown(self.hi)}"
        return f"between {_shown(self.lo)} and {_shown(self.hi)}"

    def check(self, value: float, label: str | None = None) -> None:
        """A `UserError` saying the range when `value` is outside it."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not self.lo <= value <= self.hi:
            raise UserError(f"{label or self.label} must be {self.range_text()}, got {value}")


LIMITS: dict[str, Limit] = {
    "seed": Limit(0, 2**31 - 1, 1234, 1, "seed"),
    "temperature": Limit(0.05, 1.95, 0.8, 0.05, "temperature"),
    "top_p": Limit(0.05, 1.0, 0.8, 0.05, "top-p"),
    "top_k": Limit(1, 4096, 30, 1, "top-k"),
    "max_frames": Limit(16, 8192, 1024, 1, "the longest line in frames"),
    "threads": Limit(0, 256, 0, 1, "threads", auto=0),
    "max_batch": Limit(0, 256, 0, 1, "the largest batch", auto=0),
}
"""Every numeric generation setting: its bounds, default, step and (where it has one) its automatic value."""


CHOICE_LABELS = {"seed_mode": "seed mode", "quantize": "quantization"}
"""A choice's name in a message, where it is not the field's name."""


def check_choice(name: str, value: str, label: str | None = None) -> None:
    """A `UserError` listing the choices when `value` is not one of `CHOICES[name]`."""
    if value not in CHOICES[name]:
        label = label or CHOICE_LABELS.get(name, name)
        raise UserError(f"unknown {label} {value!r}; choose one of {', '.join(CHOICES[name])}")


def check_limits(settings: Any, skip: tuple[str, ...] = ()) -> None:
    """A `UserError` for the first field of `settings` outside its limit or choices (`skip`: fields left out)."""
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if f.name in skip:
            continue
        if f.name in LIMITS:
            LIMITS[f.name].check(value)
        elif f.name in CHOICES:
            check_choice(f.name, value)


def _default(name: str) -> Any:
    return LIMITS[name].default


@dataclass(frozen=True, kw_only=True)
class Sampling:
    """What the model is asked for a line besides its text and voice: a take made with other values is stale.

    The project's settings are one (`state.project.GenerationSettings`), and the engine's requests carry one as
    it is (`engine.api.SynthesisRequest.sampling`; the defaults are upstream's API server's)."""

    seed_mode: SeedMode = "random"
    """random: the engine draws one base seed per request and reports it on every line (`LineFinished.seed`);
    fixed: `seed` is the base (line i of a request is drawn with `engine.api.line_seed(seed, i)`)."""
    seed: int = _default("seed")
    temperature: float = _default("temperature")
    top_p: float = _default("top_p")
    top_k: int = _default("top_k")
    max_frames: int = _default("max_frames")
    """Frames per batch, the dropped last one included. A person's settings keep to `LIMITS["max_frames"]` (the
    project's and the panel's, checked by `GenerationSettings`); a request may ask any count, or 0: as many as
    the context leaves (the command line's `--max-new-tokens 0` and `--frames`, a server's own limit)."""
    batching: Batching = "line"

    def __post_init__(self) -> None:
        check_limits(self, skip=("max_frames",))
        frames = self.max_frames
        if isinstance(frames, bool) or not isinstance(frames, int) or frames < 0:
            raise UserError(f"{LIMITS['max_frames'].label} must be 0 (no limit) or more, got {frames}")

    @property
    def fixed_seed(self) -> int | None:
        """The seed asked for, or None where the engine draws one."""
        return self.seed if self.seed_mode == "fixed" else None

    def later(self, lines: int) -> Sampling:
        """These settings for a request that starts `lines` lines further on: a fixed seed moves on as many (line
        i is drawn with seed + i), a random one stays random."""
        return self if self.seed_mode != "fixed" else dataclasses.replace(self, seed=self.seed + lines)

    @property
    def sampling(self) -> Sampling:
        """These settings alone (of a type that holds more, e.g. the project's), as a request carries them."""
        return Sampling(**{f.name: getattr(self, f.name) for f in dataclasses.fields(Sampling)})


@dataclass(frozen=True, kw_only=True)
class Loading:
    """How the model is loaded and runs: changing one loads it again; never makes a take stale."""

    device: Device = "auto"
    precision: Precision = "auto"
    speed: Speed = "auto"
    """Chosen once, at load (see `Speed`)."""
    quantize: Quantize = "none"
    """Independent of `speed`."""
    threads: int = _default("threads")
    """CPU threads for the model; 0: automatic, the cores that were free at start (`s2studio/threads.py`)."""
    max_batch: int = _default("max_batch")
    """Lines rendered at once on the fast path (scenes, takes side by side); 0: what the memory holds (the engine's
    memory planner, at most 8 on a CPU)."""

    def __post_init__(self) -> None:
        check_limits(self)

    @property
    def loading(self) -> Loading:
        """These settings alone (of a type that holds more, e.g. a project's or a request's)."""
        return Loading(**{name: getattr(self, name) for name in LOAD_FIELDS})


def seed_fields(seed: int | None) -> dict[str, Any]:
    """`Sampling`'s seed fields for a seed that may be absent, as the command line and the servers take one:
    None: drawn by the engine ("random"), a number: that one ("fixed")."""
    return {"seed_mode": "random"} if seed is None else {"seed_mode": "fixed", "seed": seed}


LOAD_FIELDS = tuple(f.name for f in dataclasses.fields(Loading))
"""The settings that need the model loaded again when they change."""
