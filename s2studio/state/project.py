"""A studio project: script text, cast, generation settings and every line's takes (design.md §6, §7).

Saved as a `.s2proj` folder: `project.json` plus one FLAC (audio) and one `.npy` (codes) per take; the
file I/O (validation, recoverable saves) is `state/project_files.py`. Pure Python + numpy: no Qt, no torch.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from s2studio.state.schema import dataclass_kind

FORMAT_VERSION = 1
SUFFIX = ".s2proj"


@dataclass(frozen=True)
class GenerationSettings:
    """What the settings panel edits; part of each take's fingerprint."""

    seed_mode: Literal["random", "fixed"] = "random"
    seed: int = 1234
    temperature: float = 0.8
    top_p: float = 0.8
    top_k: int = 30
    max_frames: int = 1024
    batching: Literal["line", "upstream"] = "line"
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    speed: Literal["exact", "fast"] = "exact"
    """exact: bit-identical to upstream on CPU fp32; fast: prefix reuse and the fast decode path."""
    quantize: Literal["none", "int8", "int4"] = "none"

    @property
    def load_key(self) -> tuple[str, str, str, str]:
        """The settings that need the model loaded again when they change."""
        return (self.device, self.precision, self.speed, self.quantize)

    @classmethod
    def from_dict(cls, data: object, where: str = "settings") -> GenerationSettings:
        """Settings from a project file or the remembered ones, validated (`SETTINGS`): a missing key is
        its default, an unknown one is ignored, and a wrong or out-of-range value is a `SchemaError`
        (a `UserError`) naming `settings.<field>`, never silently replaced."""
        return SETTINGS.parse(data, where)


SETTINGS_LIMITS: dict[str, tuple[float, float]] = {
    "seed": (0, 2**31 - 1), "temperature": (0.05, 1.95), "top_p": (0.05, 1.0), "top_k": (1, 4096),
    "max_frames": (16, 8192),
}
"""What the settings panel offers (and the sampler accepts)."""
SETTINGS = dataclass_kind(GenerationSettings, SETTINGS_LIMITS)


@dataclass
class Take:
    take_id: str
    line_id: str
    text: str
    audio: npt.NDArray[np.float32]
    codes: npt.NDArray[np.int64]
    seed: int
    fingerprint: str


@dataclass
class LineTakes:
    takes: list[Take] = field(default_factory=list)
    picked: int = -1

    @property
    def current(self) -> Take | None:
        return self.takes[self.picked] if 0 <= self.picked < len(self.takes) else None


@dataclass
class Project:
    script: str = ""
    cast: dict[str, str] = field(default_factory=dict)
    """Speaker name -> voice id."""
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    lines: dict[str, LineTakes] = field(default_factory=dict)
    """line_id -> its takes."""
    title: str = ""
    gap_s: float = 0.4
    """Silence between lines, the same for the player's timeline and for export."""

    def add_take(self, take: Take) -> None:
        """Keep the take and make it the one heard."""
        entry = self.lines.setdefault(take.line_id, LineTakes())
        entry.takes.append(take)
        entry.picked = len(entry.takes) - 1

    def pick(self, line_id: str, index: int) -> None:
        entry = self.lines[line_id]
        if not 0 <= index < len(entry.takes):
            raise IndexError(index)
        entry.picked = index

    def current(self, line_id: str) -> Take | None:
        entry = self.lines.get(line_id)
        return entry.current if entry else None


def new_take_id() -> str:
    return uuid.uuid4().hex[:12]

