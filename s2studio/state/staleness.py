"""When is a take stale, and why: the one statement of the rule (design.md §6).

A take is stale when what the model would be asked for its line differs from what it was asked:

- the line's text (tags included) or its speaker            -> TEXT, SPEAKER
- the speaker's voice: another voice, or its clips or their transcripts changed          -> VOICE
- the sampling settings: temperature, top-p, top-k, max length, batching; and a fixed seed changed
  to another one for a take made with a fixed seed                                      -> SETTINGS

The seed mode is not part of it: Random or Fixed says how the *next* takes are seeded. Every take records the
seed it was made with (`Take.seed`), so switching Random -> Fixed leaves the takes as they are (a take drawn at
random is a take of its recorded seed), and Fixed -> Random too (any seed is a fair sample of "random"). Only a
take made with a fixed seed, when the fixed seed is then changed, no longer answers what is asked.

Never for how the answer is computed or where it is placed: device, precision, speed mode,
quantization, the gap between lines. Those fields of `GenerationSettings` are not in
`SAMPLING_FIELDS`, so changing them marks nothing stale.

Takes record what they were asked (`Take.speaker`, `Take.voice`, `Take.settings`, `Take.text`) and its one
fingerprint (`take_fingerprint`, which the engine puts on every take it makes too). Takes of projects saved
before they did carry only an older hash of all of it, or the fields without the fingerprint; `upgrade_take`
brings both to today's record when a project opens (the older hash only where it still matches), so an old
project's up-to-date lines stay up to date.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from enum import Enum
from typing import Any

from s2studio.state.project import GenerationSettings, Project, Take
from s2studio.state.schema import Field, Integer, Number, Record, Text
from s2studio.state.script import Line
from s2studio.state.voices import Voice

SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "max_frames", "batching")
"""The settings that change what the model is asked, besides a fixed seed (module docstring)."""

TAKE_SETTINGS = Record({
    "temperature": Field(Number(), None), "top_p": Field(Number(), None), "top_k": Field(Integer(), None),
    "max_frames": Field(Integer(), None), "batching": Field(Text(max_chars=40), None),
    "seed": Field(Integer(), None), "backend": Field(Text(max_chars=400), None),
})
"""`Take.settings` in project.json (`take_settings`): types only, no limits, so a take made under other
limits still opens; a field missing from an older take reads as None (and counts as changed). `backend`: which
engine made the take, when a render plan shared the work out (never compared: it cannot make a take stale)."""


class Stale(Enum):
    TEXT = "text edited"
    SPEAKER = "speaker changed"
    VOICE = "voice changed"
    SETTINGS = "settings changed"


def take_settings(settings: GenerationSettings) -> dict[str, Any]:
    """What a take records of the settings it was made with: the sampling fields and the fixed seed
    (None when the seed was drawn at random)."""
    out: dict[str, Any] = {name: getattr(settings, name) for name in SAMPLING_FIELDS}
    out["seed"] = settings.fixed_seed
    return out


def take_fingerprint(text: str, speaker: str, voice: str, settings: Mapping[str, Any]) -> str:
    """The one fingerprint of a take: a hash of what it was asked as the staleness rule compares it (the text, the
    speaker, the voice as the model hears it, the sampling fields and a fixed seed; `take_settings`' other entries
    never count). The studio fills it from the script and the voice library (`voice_key`), the engine from its
    request (`engine.plan.line_fingerprint`: the speaker's index, the references' codes)."""
    asked = _asked_json(text, speaker, voice, settings)
    if asked is None:
        asked = json.dumps({"text": text, "speaker": speaker, "voice": voice,
                            "settings": {name: settings.get(name) for name in _ASKED_SETTINGS}},
                           sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(asked.encode()).hexdigest()[:16]


_ASKED_SETTINGS = tuple(sorted((*SAMPLING_FIELDS, "seed")))
_quoted = json.encoder.encode_basestring  # type: ignore[attr-defined]


def _asked_json(text: str, speaker: str, voice: str, settings: Mapping[str, Any]) -> str | None:
    """The text `take_fingerprint` hashes (`json.dumps` of what was asked, keys sorted, not ASCII-escaped), written
    out here for plain values (a book's takes are all fingerprinted as it opens; `json.dumps` sets up an encoder
    per call); None for anything else (a subclass, a float that is not finite), which `json.dumps` then writes."""
    parts = []
    for name in _ASKED_SETTINGS:
        value = settings.get(name)
        kind = type(value)
        if value is None:
            parts.append(f'"{name}": null')
        elif kind is str:
            parts.append(f'"{name}": {_quoted(value)}')
        elif kind is int or (kind is float and math.isfinite(value)):
            parts.append(f'"{name}": {value!r}')
        else:
            return None
    if type(text) is not str or type(speaker) is not str or type(voice) is not str:
        return None
    return (f'{{"settings": {{{", ".join(parts)}}}, "speaker": {_quoted(speaker)}, "text": {_quoted(text)}, '
            f'"voice": {_quoted(voice)}}}')


def fingerprint_of(take: Take) -> str:
    """`take_fingerprint` of what `take` records it was asked ("" for a take that records nothing)."""
    if take.settings is None:
        return ""
    return take_fingerprint(take.text, take.speaker or "", take.voice or "", take.settings)


def voice_key(voice: Voice) -> str:
    """The voice as the model hears it: its id, each clip's audio checksum and transcript, and its LoRA (only
    when it has one, so that every take made before LoRAs existed stays current)."""
    heard: list[object] = [[c.sha256, c.transcript] for c in voice.clips]
    if voice.lora is not None:
        heard.append(["lora", voice.lora.sha256])
    clips = json.dumps(heard, ensure_ascii=False)
    return f"{voice.id}:{hashlib.sha1(clips.encode()).hexdigest()[:12]}"


def stale_reasons(take: Take, line: Line, voice: str, settings: GenerationSettings) -> tuple[Stale, ...]:
    """Why `take` no longer answers `line` as cast (`voice`: `voice_key` of its voice, "" for none) with
    `settings`; empty when it is up to date."""
    return reasons_for(take, line.text, line.speaker, voice, take_settings(settings))


def reasons_for(take: Take, text: str, speaker: str, voice: str, wanted: Mapping[str, Any]) -> tuple[Stale, ...]:
    """`stale_reasons` from plain data (`wanted`: `take_settings` of the settings now, made once for a book's
    lines). The fields are compared first: a take whose fields all match is up to date without its fingerprint
    made; one whose fields differ is still up to date when its fingerprint matches what is asked now."""
    reasons = []
    if take.text != text:
        reasons.append(Stale.TEXT)
    if take.speaker != speaker:
        reasons.append(Stale.SPEAKER)
    if take.voice != voice:
        reasons.append(Stale.VOICE)
    if _settings_differ(take.settings, wanted):
        reasons.append(Stale.SETTINGS)
    if not reasons or take.fingerprint == take_fingerprint(text, speaker, voice, wanted):
        return ()
    return tuple(reasons)


def _settings_differ(made: dict[str, Any] | None, wanted: Mapping[str, Any]) -> bool:
    if made is None:
        return True
    if any(made.get(name) != wanted[name] for name in SAMPLING_FIELDS):
        return True
    fixed_then, fixed_now = made.get("seed"), wanted["seed"]
    return fixed_then is not None and fixed_now is not None and fixed_then != fixed_now


def describe(reasons: tuple[Stale, ...]) -> str:
    """"stale: text edited, voice changed" (empty when up to date)."""
    return "stale: " + ", ".join(r.value for r in reasons) if reasons else ""


# ----------------------------------------------------------------------------- projects from before


def legacy_fingerprint(line: Line, voice: Voice | None, settings: GenerationSettings) -> str:
    """The hash older studios stored as `Take.fingerprint`: speaker, text, voice id with its clips'
    checksums, and every setting they had (the seed only when fixed)."""
    values = asdict(settings)
    for later in ("threads", "max_batch"):  # added after these hashes were retired
        values.pop(later)
    if settings.seed_mode == "random":
        values.pop("seed")
    voice_id = "" if voice is None else voice.id + ":" + ",".join(c.sha256[:12] for c in voice.clips)
    blob = json.dumps([line.speaker, line.text, voice_id, values], sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def adopt_legacy_take(take: Take, line: Line, voice: Voice | None, settings: GenerationSettings) -> bool:
    """A take from an older project records nothing of what it was asked: when its stored hash equals
    what `line`, `voice` and `settings` give now, it was made from exactly these, so record them (True).
    Otherwise it stays without them, which the rule reads as voice and settings changed."""
    if take.settings is not None or not take.fingerprint:
        return False
    if take.text != line.text or take.fingerprint != legacy_fingerprint(line, voice, settings):
        if not take.speaker and take.text == line.text:
            take.speaker = line.speaker
        return False
    take.speaker = line.speaker
    take.voice = voice_key(voice) if voice is not None else ""
    take.settings = take_settings(settings)
    return True


def upgrade_takes(project: Project, lines: Iterable[Line], voices: Mapping[str, Voice]) -> None:
    """`upgrade_take` for every take of these lines of `project`, with the voice its cast gives each speaker
    (`voices`: the library's, by id). Touches nothing but its arguments: a project just read is upgraded on the
    thread that read it."""
    for line in lines:
        entry = project.lines.get(line.line_id)
        for take in entry.takes if entry else ():
            before = (take.speaker, take.voice, take.settings, take.fingerprint)
            upgrade_take(take, line, voices.get(project.cast.get(line.speaker, "")), project.settings)
            if (take.speaker, take.voice, take.settings, take.fingerprint) != before:
                project.touch(take)  # its row is saved again


def upgrade_take(take: Take, line: Line, voice: Voice | None, settings: GenerationSettings) -> bool:
    """Bring a take of an older project to today's record when its project opens (True when it changed): an
    older hash that still matches becomes the fields (`adopt_legacy_take`), and a take with the fields gets its
    `take_fingerprint` (computed from its own record, so it is exactly as up to date as before)."""
    adopted = adopt_legacy_take(take, line, voice, settings)
    fingerprint = fingerprint_of(take)
    if not fingerprint or take.fingerprint == fingerprint:
        return adopted
    take.fingerprint = fingerprint
    return True
