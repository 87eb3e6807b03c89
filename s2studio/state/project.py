"""A studio project: script text, cast, generation settings and every line's takes (design.md §6, §7).

Saved as a `.s2proj` folder: `project.json` plus one FLAC (audio) and one `.npy` (codes) per take.
Every write goes to a temporary sibling folder that replaces the old one, so a crash mid-save never
leaves a half-written project. Pure Python + numpy + soundfile: no Qt, no torch.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import soundfile as sf

from s2studio.errors import UserError

FORMAT_VERSION = 1
SAMPLE_RATE = 44100
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
    quantize: Literal["none", "int8"] = "none"

    @property
    def load_key(self) -> tuple[str, str, str, str]:
        """The settings that need the model loaded again when they change."""
        return (self.device, self.precision, self.speed, self.quantize)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GenerationSettings:
        """Tolerant: unknown keys are ignored and bad values fall back to the default."""
        default = cls()
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            value = data.get(f.name, getattr(default, f.name))
            try:
                kwargs[f.name] = type(getattr(default, f.name))(value)
            except (TypeError, ValueError):
                kwargs[f.name] = getattr(default, f.name)
        try:
            settings = cls(**kwargs)
        except (TypeError, ValueError):
            return default
        # values the sampler refuses (a hand-edited file) are clamped to what the settings panel offers
        return replace(settings, temperature=min(max(settings.temperature, 0.05), 1.95),
                       top_p=min(max(settings.top_p, 0.05), 1.0), top_k=max(settings.top_k, 1),
                       max_frames=max(settings.max_frames, 16))


@dataclass
class Take:
    """One rendering of a line, kept until the person deletes it. What it was asked (`text`, `speaker`,
    `voice`, `settings`) is recorded so that `state.staleness` can say why it went stale."""

    take_id: str
    line_id: str
    text: str
    audio: npt.NDArray[np.float32]
    codes: npt.NDArray[np.int64]
    seed: int
    fingerprint: str = ""
    """Projects from before takes recorded what they were asked: a hash of it (`staleness.legacy_fingerprint`)."""
    speaker: str = ""
    voice: str = ""
    """`staleness.voice_key` of the voice it was made with ("" when unknown)."""
    settings: dict[str, Any] | None = None
    """`staleness.take_settings` of the settings it was made with (None when unknown)."""
    created: str = ""
    """When it was made, ISO 8601 with the UTC offset."""

    @property
    def seconds(self) -> float:
        return len(self.audio) / SAMPLE_RATE


def now_iso() -> str:
    """A take's `created` stamp: local time with its offset, to the second."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


@dataclass
class LineTakes:
    """Every take of one line, oldest first; `picked` is the one heard and exported (-1: none)."""

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
    """line_id -> its takes. Lines deleted from the script keep theirs (an Undo brings them back)."""
    title: str = ""
    gap_s: float = 0.4
    """Silence between lines, the same for the player's timeline and for export."""
    line_ids: list[str] | None = None
    """The id of each line of `script`, in order (`state.line_ids`); None in projects saved before ids were."""

    def add_take(self, take: Take, pick: bool = True) -> None:
        """Keep the take (and make it the one heard)."""
        entry = self.lines.setdefault(take.line_id, LineTakes())
        entry.takes.append(take)
        if pick or entry.picked < 0:
            entry.picked = len(entry.takes) - 1

    def pick(self, line_id: str, index: int) -> None:
        entry = self.lines[line_id]
        if not 0 <= index < len(entry.takes):
            raise IndexError(index)
        entry.picked = index

    def current(self, line_id: str) -> Take | None:
        entry = self.lines.get(line_id)
        return entry.current if entry else None

    def takes_of(self, line_id: str) -> list[Take]:
        entry = self.lines.get(line_id)
        return list(entry.takes) if entry else []

    def delete_take(self, line_id: str, take_id: str) -> int:
        """Remove one take; returns where it was (for `restore_take`). The pick stays on the same take,
        or moves to the one before (the first) when the picked take goes; a line without takes is forgotten."""
        entry = self.lines[line_id]
        index = next(i for i, t in enumerate(entry.takes) if t.take_id == take_id)
        del entry.takes[index]
        if not entry.takes:
            del self.lines[line_id]
        elif entry.picked >= index:
            entry.picked = max(entry.picked - 1, 0)
        return index

    def restore_take(self, take: Take, index: int, picked: bool) -> None:
        """Put a deleted take back where it was (and pick it again when it was picked)."""
        entry = self.lines.setdefault(take.line_id, LineTakes())
        index = min(max(index, 0), len(entry.takes))
        entry.takes.insert(index, take)
        if picked or entry.picked < 0:
            entry.picked = index
        elif entry.picked >= index:
            entry.picked += 1


def _reuse(old: Path, new: Path, take_id: str) -> bool:
    """Takes never change once made, so a save links the files of the previous save instead of
    encoding them again: autosave after every rendered line stays proportional to the new audio."""
    names = (f"{take_id}.flac", f"{take_id}.npy")
    if not all((old / n).is_file() for n in names):
        return False
    for n in names:
        try:
            os.link(old / n, new / n)
        except OSError:
            shutil.copy2(old / n, new / n)
    return True


def save_project(project: Project, path: Path) -> Path:
    """Write `project` to the folder `path` (suffix `.s2proj` added when missing), atomically."""
    path = Path(path)
    if path.suffix != SUFFIX:
        path = path.with_name(path.name + SUFFIX)
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        (tmp / "takes").mkdir(parents=True)
        index: dict[str, Any] = {}
        for line_id, entry in project.lines.items():
            rows = []
            for take in entry.takes:
                if not _reuse(path / "takes", tmp / "takes", take.take_id):
                    sf.write(tmp / "takes" / f"{take.take_id}.flac", take.audio, SAMPLE_RATE, subtype="PCM_24")
                    np.save(tmp / "takes" / f"{take.take_id}.npy", np.asarray(take.codes, np.int64))
                rows.append({"take_id": take.take_id, "text": take.text, "seed": take.seed,
                             "fingerprint": take.fingerprint})
            index[line_id] = {"picked": entry.picked, "takes": rows}
        doc = {"format": FORMAT_VERSION, "title": project.title, "script": project.script, "cast": project.cast,
               "settings": asdict(project.settings), "gap_s": project.gap_s, "lines": index}
        (tmp / "project.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False), encoding="utf-8")
        old = path.with_name(path.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if path.exists():
            path.rename(old)
        tmp.rename(path)
        shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(f"Cannot save the project to {path}: {exc.strerror or exc}. Choose another folder.") from exc
    return path


def _gap(value: Any) -> float:
    """A gap from project.json, clamped to what the export dialog offers (0–5 s); junk means the default."""
    try:
        return min(max(float(value), 0.0), 5.0)
    except (TypeError, ValueError):
        return 0.4


def load_project(path: Path) -> Project:
    """Read a `.s2proj` folder written by `save_project`."""
    path = Path(path)
    meta = path / "project.json"
    if not meta.is_file():
        raise UserError(f"{path} is not an S2 Studio project (project.json is missing).")
    try:
        doc = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"Cannot read {meta}: {exc}. The project file is damaged.") from exc
    if doc.get("format", 0) > FORMAT_VERSION:
        raise UserError(f"{path} was saved by a newer S2 Studio; update the studio to open it.")
    project = Project(script=str(doc.get("script", "")), cast=dict(doc.get("cast", {})),
                      settings=GenerationSettings.from_dict(doc.get("settings", {})), title=str(doc.get("title", "")),
                      gap_s=_gap(doc.get("gap_s", 0.4)))
    for line_id, entry in doc.get("lines", {}).items():
        takes = []
        for row in entry.get("takes", []):
            audio_path = path / "takes" / f"{row['take_id']}.flac"
            codes_path = path / "takes" / f"{row['take_id']}.npy"
            if not audio_path.is_file():
                continue  # a take whose audio is gone is dropped, not fatal
            audio, _ = sf.read(audio_path, dtype="float32", always_2d=False)
            codes = np.load(codes_path) if codes_path.is_file() else np.zeros((10, 0), np.int64)
            takes.append(Take(row["take_id"], line_id, row.get("text", ""), audio, codes, int(row.get("seed", 0)),
                              row.get("fingerprint", "")))
        if takes:
            picked = int(entry.get("picked", len(takes) - 1))
            project.lines[line_id] = LineTakes(takes, picked if 0 <= picked < len(takes) else len(takes) - 1)
    return project
