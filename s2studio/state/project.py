"""A studio project: script text, cast, generation settings and every line's takes (design.md §6, §7).

Saved as a `.s2proj` folder (`state/project_files.py` says how); a take's audio stays in its file and is
read in blocks (`state/take_audio.py`). Pure Python + numpy: no Qt, no torch.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from s2studio.units import LINE_GAP_S, SAMPLE_RATE
from s2studio.errors import UserError
from s2studio.settings import LIMITS, Loading, Sampling, Speed, check_limits
from s2studio.state.codes import check_codes, read_codes_file
from s2studio.state.schema import dataclass_kind
from s2studio.state.take_audio import TakeSound
from s2studio.state.take_check import TakeCheck

FORMAT_VERSION = 2
"""2: project.json + journal.jsonl, takes in folders by the first two characters of their id, with peaks;
1: project.json alone, takes flat in `takes/` (opened as they are, saved as 2)."""
SUFFIX = ".s2proj"


@dataclass(frozen=True, kw_only=True)
class GenerationSettings(Loading, Sampling):
    """The project's settings, what the settings panel edits: `Sampling` (part of what makes a take stale) and
    `Loading` (how the model runs), with their bounds in `s2studio.settings.LIMITS`."""

    speed: Speed = "fast"
    """A project takes the fast path unless it says otherwise (the engine's own default is "auto"). The settings
    panel offers precision, speed and quantization together as one choice (`ui/inspector/settings_panel.MODES`)."""

    def __post_init__(self) -> None:
        check_limits(self)  # a person's settings: every bound of the table, the longest line's too

    @classmethod
    def from_dict(cls, data: object, where: str = "settings") -> GenerationSettings:
        """Settings from a project file or the remembered ones, validated (`SETTINGS`): a missing key is
        its default, an unknown one is ignored, and a wrong or out-of-range value is a `SchemaError`
        (a `UserError`) naming `settings.<field>`, never silently replaced."""
        return SETTINGS.parse(data, where)


SETTINGS = dataclass_kind(GenerationSettings, {name: (limit.lo, limit.hi) for name, limit in LIMITS.items()})


@dataclass(frozen=True)
class TakeFiles:
    """Where one take's files are (`state/take_files.py` names them): its project folder and the path of its
    files less their suffixes (`.flac` the audio, `.npy` the codes, `.peaks.npy` the peaks); `flat`: a take of a
    project saved before peaks were stored (none)."""

    folder: Path
    stem: str
    flat: bool = False

    @property
    def audio(self) -> Path:
        return Path(self.stem + ".flac")

    @property
    def codes(self) -> Path:
        return Path(self.stem + ".npy")

    @property
    def peaks(self) -> Path | None:
        return None if self.flat else Path(self.stem + ".peaks.npy")


@dataclass(frozen=True)
class FileSizes:
    """What a take's files hold as they were written: its samples, and the bytes of its audio and of its codes
    file. Kept in the take's row, so that opening a project checks a take's files with a stat (`open_take`), not by
    reading their headers."""

    samples: int
    audio: int
    codes: int


class Take:
    """One rendering of a line, kept until the person deletes it. What it was asked (`text`, `speaker`,
    `voice`, `settings`) is recorded so that `state.staleness` can say why it went stale.

    A take never changes once made. Its audio and codes are in memory while it is new, and in its files
    once they are written (`attach`): `sound` reads them in blocks, `codes` reads the codes file when asked;
    `audio` is the whole take as one array (decoded on each call for a take in its file)."""

    __slots__ = ("take_id", "line_id", "text", "seed", "fingerprint", "speaker", "voice", "settings", "created",
                 "check", "sizes", "sound", "files", "_codes", "held")

    def __init__(self, take_id: str, line_id: str, text: str, audio: npt.NDArray[np.float32] | None = None,
                 codes: npt.NDArray[np.int64] | None = None, seed: int = 0, fingerprint: str = "",
                 speaker: str | None = None, voice: str | None = None, settings: dict[str, Any] | None = None,
                 created: str | None = None, check: TakeCheck | None = None, sizes: FileSizes | None = None, *,
                 sound: TakeSound | None = None, files: TakeFiles | None = None) -> None:
        self.take_id = take_id
        self.line_id = line_id
        self.text = text
        self.seed = seed
        self.fingerprint = fingerprint
        """Projects from before takes recorded what they were asked: a hash of it (`staleness.legacy_fingerprint`)."""
        self.speaker = speaker
        """The line's speaker when it was asked (None when unknown, in older projects)."""
        self.voice = voice
        """`staleness.voice_key` of the voice it was made with (None when unknown)."""
        self.settings = settings
        """`staleness.take_settings` of the settings it was made with (None when unknown)."""
        self.created = created
        """When it was made, ISO 8601 with the UTC offset (None when unknown)."""
        self.check = check
        """What the automatic checks found (None until it is checked), replaced whole (`Document.set_check`) when
        the take is checked again. It and `fingerprint`, `speaker`, `voice` and `settings` (an older take brought up
        to date) are the fields set after the take is made; each such assignment is followed by `Project.touch`,
        so that the next save writes the take's row again."""
        self.sizes = sizes
        """What its files hold (set when they are written, or found when a project saved without it opens);
        None until then."""
        if sound is None:
            sound = TakeSound.of(audio)
        self.sound = sound
        self.files = files
        """Where its files are (None until they are written)."""
        self._codes = None if codes is None else np.asarray(codes, np.int64)
        self.held = False
        """Deleted, kept in memory for Undo: its files are not its any more (`hold`)."""

    def __repr__(self) -> str:
        return f"Take({self.take_id!r}, line {self.line_id!r}, {self.seconds:.2f} s)"

    @property
    def audio(self) -> npt.NDArray[np.float32]:
        return self.sound.samples()

    @property
    def codes(self) -> npt.NDArray[np.int64]:
        codes = self._codes
        if codes is not None:
            return codes
        files = self.files
        if files is None:
            return np.zeros((10, 0), np.int64)
        return check_codes(read_codes_file(files.codes, "take codes"), f"take codes {files.codes.name}")

    @property
    def seconds(self) -> float:
        return self.sound.length / SAMPLE_RATE

    def attach(self, files: TakeFiles, peaks: npt.NDArray[np.float32],
               decoded: npt.NDArray[np.float32] | None = None) -> None:
        """The take's files are written (or found): read from them from now on and let go of the arrays
        (unless it was deleted meanwhile: `hold`)."""
        if self.held:
            return
        self.files = files
        self.sound.to_file(files.audio, peaks, decoded, files.peaks)
        self._codes = None

    def rebind(self, files: TakeFiles) -> None:
        """The same files, copied to another folder (Save As): read them there."""
        if self.held:
            return
        self.files = files
        self.sound.path, self.sound.peaks_path = files.audio, files.peaks

    def hold(self) -> None:
        """Keep audio and codes in memory from now on, whatever happens to the files (a deleted take, which
        Undo may bring back after a save removed its files)."""
        self.held = True
        codes = self.codes
        self.sound.hold()
        self._codes = codes
        self.files = None


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


class LineEdits:
    """The lines whose takes, pick or take rows changed, as a log in the order of the changes: what a capture of
    the document (`project_journal.capture`) reads again since an earlier capture, and what a save compares and
    writes since the save before (`project_journal.changed_between`), instead of every line of a book (the lines
    not named are as they were). Only appended to, so the writer's thread may read a stretch of it while the
    window's thread notes more (a slice of a list is read whole); a session's log is a few hundred kB."""

    __slots__ = ("_log",)

    def __init__(self) -> None:
        self._log: list[str] = []

    @property
    def count(self) -> int:
        """Changes made so far (a capture keeps it, to ask `since` later)."""
        return len(self._log)

    def note(self, line_id: str) -> None:
        self._log.append(line_id)

    def since(self, count: int) -> list[str]:
        """The lines changed after the first `count` changes (each once, the latest first)."""
        return list(dict.fromkeys(reversed(self._log[count:])))

    def between(self, first: int, last: int) -> set[str]:
        """The lines changed after the first `first` changes and up to the `last`-th."""
        return set(self._log[first:last])


@dataclass
class Project:
    script: str = ""
    cast: dict[str, str] = field(default_factory=dict)
    """Speaker name -> voice id."""
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    lines: dict[str, LineTakes] = field(default_factory=dict)
    """line_id -> its takes. Lines deleted from the script keep theirs (an Undo brings them back)."""
    title: str = ""
    gap_s: float = LINE_GAP_S
    """Silence between lines, the same for the player's timeline and for export."""
    line_ids: list[str] | None = None
    """The id of each line of `script`, in order (`state.line_ids`); None in projects saved before ids were."""
    voice_names: dict[str, str] = field(default_factory=dict)
    """Voice id -> the voice's name when last saved: on a machine whose library has other ids, the cast's
    voices are found again by name (`state.project_voices`)."""
    with_voices: bool = False
    """Saved with the cast's voices packed inside (`voices/<id>.s2voice`), so it opens anywhere."""
    speaker_colors: dict[str, int] = field(default_factory=dict)
    """Speaker name -> its colour's place in the palette, given when the speaker first appears and kept for the
    life of the project: inserting a line above or Undo never recolours anybody (`give_colors`)."""
    edits: LineEdits = field(default_factory=LineEdits, init=False, repr=False, compare=False)
    """The lines whose takes changed, as the methods below change them (`lines` is changed through them only;
    a take's fields set after it is made are followed by `touch`)."""

    def give_colors(self, speakers: Iterable[str]) -> bool:
        """Give each speaker without a colour the first place in the palette that no speaker of `speakers` holds
        (a name that left the script keeps its place, so it comes back in its colour); True when any was given."""
        speakers = list(dict.fromkeys(speakers))
        held = {self.speaker_colors[s] for s in speakers if s in self.speaker_colors}
        given = False
        for speaker in speakers:
            if speaker not in self.speaker_colors:
                slot = next(i for i in itertools.count() if i not in held)
                self.speaker_colors[speaker] = slot
                held.add(slot)
                given = True
        return given

    def add_take(self, take: Take, pick: bool = True) -> None:
        """Keep the take (and make it the one heard)."""
        self.edits.note(take.line_id)
        entry = self.lines.setdefault(take.line_id, LineTakes())
        entry.takes.append(take)
        if pick or entry.picked < 0:
            entry.picked = len(entry.takes) - 1

    def pick(self, line_id: str, index: int) -> None:
        entry = self.lines[line_id]
        if not 0 <= index < len(entry.takes):
            raise IndexError(index)
        entry.picked = index
        self.edits.note(line_id)

    def touch(self, take: Take) -> None:
        """A field of `take`'s row that is filled in after it is made (`speaker`, `voice`, `settings`,
        `fingerprint`: an older take brought up to date; `check`: the checks' findings) was just set: the next
        save writes its line again. Every such assignment is followed by this."""
        self.edits.note(take.line_id)

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
        self.edits.note(line_id)
        try:  # a later save may remove its files: Undo brings it back from memory
            entry.takes[index].hold()
        except UserError as exc:
            logging.getLogger(__name__).warning("a deleted take could not be kept for Undo: %s", exc)
        del entry.takes[index]
        if not entry.takes:
            del self.lines[line_id]
        elif entry.picked >= index:
            entry.picked = max(entry.picked - 1, 0)
        return index

    def restore_take(self, take: Take, index: int, picked: bool) -> None:
        """Put a deleted take back where it was (and pick it again when it was picked)."""
        take.held = False  # a save writes its files again (a compaction may have removed them)
        self.edits.note(take.line_id)
        entry = self.lines.setdefault(take.line_id, LineTakes())
        index = min(max(index, 0), len(entry.takes))
        entry.takes.insert(index, take)
        if picked or entry.picked < 0:
            entry.picked = index
        elif entry.picked >= index:
            entry.picked += 1

