"""The voice folder's metadata format: `Clip`, `Voice`, and voice.json read (strictly, since it may come
from someone else's `.s2voice`) and written. Split from `voices.py`, which does the library's file work."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from s2studio.errors import UserError, is_control, printable
from s2studio.state.lora_file import file_sha256
from s2studio.state.voice_archive import CLIP_FILE, MAX_CLIPS

VOICE_VERSION = 1
MAX_NAME_CHARS = 80
VOICE_ID = re.compile(r"^v[0-9a-f]{12}$")


@dataclass(frozen=True)
class Clip:
    id: str
    file: str
    """File name inside the voice folder."""
    transcript: str
    sha256: str
    """Of the stored FLAC bytes."""
    duration_s: float
    sample_rate: int


@dataclass(frozen=True)
class VoiceLora:
    """The LoRA a voice was fine-tuned with, stored as `lora.safetensors` in its folder (`state.lora_file`)."""

    sha256: str
    """Of the stored file: an import checks it, a take's fingerprint changes with it."""
    size: int
    added: str
    """ISO 8601, UTC."""
    note: str = ""
    """How it was made (preset, steps, final loss), shown beside the voice."""


@dataclass(frozen=True)
class Voice:
    id: str
    name: str
    notes: str
    consent: str
    """Where the voice comes from and who agreed to its cloning."""
    clips: tuple[Clip, ...]
    created: str
    """ISO 8601, UTC."""
    version: int = VOICE_VERSION
    lora: VoiceLora | None = None
    """None: the voice speaks with the model as loaded; else this LoRA is merged for its lines."""


def sha256_of(path: Path) -> str:
    return file_sha256(path)


def voice_from_json(raw: object, where: str) -> Voice:
    """Validate voice.json strictly: it may come from someone else's zip."""
    def bad(what: str) -> UserError:
        return UserError(f"{printable(where)}: {what}; the voice file is damaged")

    if not isinstance(raw, dict):
        raise bad("voice.json is not an object")
    version = raw.get("version")
    if not isinstance(version, int):
        raise bad("voice.json has no version")
    if version > VOICE_VERSION:
        raise UserError(f"{where} was made by a newer S2 Studio (voice format {version}); update S2 Studio")
    strings = {k: raw.get(k) for k in ("id", "name", "notes", "consent", "created")}
    if not all(isinstance(v, str) for v in strings.values()) or not strings["name"]:
        raise bad("voice.json lacks id, name, notes, consent or created")
    clips_raw = raw.get("clips")
    if not isinstance(clips_raw, list) or not 1 <= len(clips_raw) <= MAX_CLIPS:
        raise bad(f"voice.json must list 1–{MAX_CLIPS} clips")
    clips = []
    for c in clips_raw:
        try:
            clip = Clip(str(c["id"]), str(c["file"]), clean_text(str(c["transcript"]), "a transcript"),
                        str(c["sha256"]), float(c["duration_s"]), int(c["sample_rate"]))
        except (KeyError, TypeError, ValueError):
            raise bad("a clip entry in voice.json is incomplete") from None
        except UserError as exc:
            raise bad(str(exc)) from None
        if not CLIP_FILE.match(clip.file):
            raise bad(f"clip file name {clip.file!r} is not allowed")
        clips.append(clip)
    if len({c.id for c in clips}) != len(clips) or len({c.file for c in clips}) != len(clips):
        raise bad("voice.json lists the same clip twice")
    try:
        name = clean_name(strings["name"])
        notes, consent = clean_text(strings["notes"], "the notes", True), clean_text(strings["consent"], "consent")
    except UserError as exc:
        raise bad(str(exc)) from None
    return Voice(strings["id"], name, notes, consent, tuple(clips), strings["created"], version,
                 _lora_from_json(raw.get("lora"), bad))


def _lora_from_json(raw: object, bad: Callable[[str], UserError]) -> VoiceLora | None:
    if raw is None:
        return None
    try:
        lora = VoiceLora(str(raw["sha256"]), int(raw["size"]), str(raw["added"]),  # type: ignore[index]
                         clean_text(str(raw.get("note", "")), "the LoRA note"))  # type: ignore[union-attr]
    except (KeyError, TypeError, ValueError, AttributeError):
        raise bad("the lora entry in voice.json is incomplete") from None
    except UserError as exc:
        raise bad(str(exc)) from None
    if not re.fullmatch(r"[0-9a-f]{64}", lora.sha256) or lora.size <= 0:
        raise bad("the lora entry in voice.json is damaged")
    return lora


def voice_json(voice: Voice) -> str:
    d = asdict(voice)
    d = {"version": d.pop("version"), **d}
    if d["lora"] is None:  # a voice without a LoRA keeps the voice.json it always had
        del d["lora"]
    return json.dumps(d, indent=2, ensure_ascii=False) + "\n"


def clean_text(text: str, what: str, multiline: bool = False) -> str:
    """`text` without control characters (a name or transcript is shown in terminals and lists: an escape
    could retitle the window or clear the screen). Tabs and line breaks become spaces (kept as line breaks
    when `multiline`), other controls and bidi overrides are removed; bytes that are not UTF-8 (surrogate
    escapes of a command-line argument) are refused, since what they meant cannot be known."""
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):
        raise UserError(f"{what} holds bytes that are not UTF-8 ({printable(text, 60)}); write it as UTF-8 text")
    keep = {"\n"} if multiline else set()
    out = []
    for ch in text.replace("\r\n", "\n"):
        if ch in keep or not is_control(ch):
            out.append(ch)
        elif ch in "\t\n\r\v\f\x85\u2028\u2029":
            out.append(" ")
    cleaned = "".join(out)
    return cleaned.strip() if not multiline else cleaned


def clean_name(name: str) -> str:
    name = " ".join(clean_text(name, "the voice name").split())
    if not name:
        raise UserError("a voice needs a name")
    if len(name) > MAX_NAME_CHARS:
        raise UserError(f"voice name is {len(name)} characters; keep it under {MAX_NAME_CHARS}")
    return name
