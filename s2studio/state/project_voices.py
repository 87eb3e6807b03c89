"""A project's voices on another machine (design.md §7): "save with voices" packs the cast's voices into the
project, and opening a project finds each voice of its cast that the library lacks.

A project names voices by library id, and ids differ between machines. So a save records each cast voice's name
(`Project.voice_names`), a project saved with its voices carries them as `.s2voice` files, and on open every
cast voice the library lacks is resolved (`plan`):

- a library voice with the very same clips (same audio, same transcripts, as the packed copy or the takes
  made with the voice record them) is that voice: used, silently;
- else the packed copy, when no library voice has its name: imported (keeping its id when that is free);
- else a single library voice of that name, when nothing is packed: used (said in the report);
- else the person is asked: the packed copy and a library voice share a name but not their clips, or
  several library voices could be it;
- with nothing to go on, the speaker stays without a voice (said in the report).

Takes made with the voice keep answering their lines when the voice found is the same voice (same clips):
their record of the voice is moved to its new id (`remap`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from s2studio.errors import UserError, printable
from s2studio.state.project import Project
from s2studio.state.staleness import voice_key
from s2studio.state.voice_file import peek_voice
from s2studio.state.voices import Voice, VoiceLibrary


def _heard(voice: Voice) -> str:
    """What the model hears of a voice (its clips' audio and transcripts), as `voice_key` hashes it."""
    return voice_key(voice).split(":", 1)[1]


def _heard_in_takes(project: Project) -> dict[str, set[str]]:
    """Per voice id, the clip hashes the project's takes recorded for it (each take keeps `voice_key` of its
    voice): one pass over the takes, not one per voice (a book has 10,000 takes and 20 voices)."""
    heard: dict[str, set[str]] = {}
    for entry in project.lines.values():
        for take in entry.takes:
            voice_id, colon, clips = (take.voice or "").partition(":")
            if colon:
                heard.setdefault(voice_id, set()).add(clips)
    return heard


def _key(name: str) -> str:
    return " ".join(name.split()).casefold()


def cast_voice_ids(project: Project) -> list[str]:
    """The voices the cast uses, each once, in the order of the cast."""
    return [v for v in dict.fromkeys(project.cast.values()) if v]


def note_voice_names(project: Project, library: VoiceLibrary) -> None:
    """Record the name of each cast voice the library has (names of voices it lacks are kept as they were)."""
    names = {}
    for voice_id in cast_voice_ids(project):
        try:
            names[voice_id] = library.get(voice_id).name
        except UserError:
            if voice_id in project.voice_names:
                names[voice_id] = project.voice_names[voice_id]
    project.voice_names = names


def pack(project: Project, library: VoiceLibrary) -> dict[str, bytes]:
    """Voice id -> `.s2voice` bytes for each cast voice the library has (what a save with voices writes)."""
    packed = {}
    for voice_id in cast_voice_ids(project):
        try:
            packed[voice_id] = library.archive(voice_id, compress=False)
        except UserError:
            continue  # not in this library (resolved to nothing on open): nothing to pack
    return packed


@dataclass(frozen=True)
class Missing:
    """A cast voice the library lacks, and what could stand for it."""

    voice_id: str
    name: str
    """Its name as the project recorded it (or as its packed copy says); "" when unknown."""
    packed: Path | None
    packed_voice: Voice | None
    candidates: tuple[Voice, ...]
    """Library voices of that name, or with the same clips."""
    same: Voice | None
    """The library voice with the very same clips, if one is."""


@dataclass
class Plan:
    use: dict[str, str] = field(default_factory=dict)
    """Missing voice id -> the library voice id that stands for it."""
    imports: dict[str, Path] = field(default_factory=dict)
    """Missing voice id -> its packed copy to import."""
    ask: list[Missing] = field(default_factory=list)
    """Voices the person chooses for (`Missing.candidates`, the packed copy, or none)."""
    unresolved: list[Missing] = field(default_factory=list)
    """Voices with nothing to stand for them."""
    notes: list[str] = field(default_factory=list)
    """What was decided without asking, in words, for the person."""


def missing_voices(project: Project, library: VoiceLibrary, packed: Mapping[str, Path]) -> list[Missing]:
    voices = library.list()  # the library read once (a folder of voice files)
    present = {v.id for v in voices}
    out = []
    in_takes: dict[str, set[str]] | None = None
    for voice_id in cast_voice_ids(project):
        if voice_id in present:
            continue
        if in_takes is None:
            in_takes = _heard_in_takes(project)
        packed_path = packed.get(voice_id)
        packed_voice = None
        if packed_path is not None:
            try:
                packed_voice = peek_voice(packed_path)
            except UserError:
                packed_path = None  # damaged: as if not packed (the import would refuse it too)
        name = project.voice_names.get(voice_id) or (packed_voice.name if packed_voice else "")
        heard = in_takes.get(voice_id, set()) | ({_heard(packed_voice)} if packed_voice else set())
        same = next((v for v in voices if _heard(v) in heard), None)
        by_name = [v for v in voices if name and _key(v.name) == _key(name)]
        candidates = tuple(dict.fromkeys([*([same] if same else []), *by_name]))
        out.append(Missing(voice_id, name, packed_path, packed_voice, candidates, same))
    return out


def plan(missing: list[Missing]) -> Plan:
    """What to do for each missing voice (module docstring)."""
    p = Plan()
    for m in missing:
        shown = printable(m.name or m.voice_id, 60)
        if m.same is not None:
            p.use[m.voice_id] = m.same.id
        elif m.packed is not None and not m.candidates:
            p.imports[m.voice_id] = m.packed
            p.notes.append(f"imported the voice “{shown}” from the project")
        elif m.packed is None and len(m.candidates) == 1:
            p.use[m.voice_id] = m.candidates[0].id
            p.notes.append(f"used the library's voice “{printable(m.candidates[0].name, 60)}” for “{shown}”")
        elif m.candidates or m.packed is not None:
            p.ask.append(m)
        else:
            p.unresolved.append(m)
            p.notes.append(f"the voice “{shown}” is not in the library: choose a voice for its speakers")
    return p


def remap(project: Project, voices: Mapping[str, Voice]) -> None:
    """The cast's voice `old_id` is `voices[old_id]` now, for each. Takes made with `old_id` record the new voice
    when it is the same voice (its key's clip part equal), so they stay up to date; with another voice they read
    as "voice changed". One walk over the takes for all of them (a book has 10,000 and 20 voices)."""
    keys = {f"{old_id}:{_heard(voice)}": voice_key(voice) for old_id, voice in voices.items()}
    for speaker, voice_id in list(project.cast.items()):
        if voice_id in voices:
            project.cast[speaker] = voices[voice_id].id
    for entry in project.lines.values():
        for take in entry.takes:
            if take.voice in keys:
                take.voice = keys[take.voice]
                project.touch(take)
    for old_id, voice in voices.items():
        if old_id in project.voice_names:
            del project.voice_names[old_id]
            project.voice_names[voice.id] = voice.name
