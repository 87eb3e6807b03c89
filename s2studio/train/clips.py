"""Where training clips come from: a library voice or a folder in upstream's layout, and the checks before any
work starts (no transcripts, too little speech).

Upstream's layout is `<speaker>/<clip>.wav|flac|mp3` with the transcript beside each clip in `<clip>.lab` (or
`.txt`). A voice is one speaker named after it, its clips and their transcripts. Rows are ordered by speaker
and file name, the order `build_dataset.py` packs a folder in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from s2studio.errors import UserError, printable
from s2studio.state.clips import read_audio
from s2studio.state.file_names import portable_name

AUDIO_SUFFIXES = (".wav", ".flac", ".mp3")
TEXT_SUFFIXES = (".lab", ".txt")
MIN_SECONDS = 30.0
"""Upstream (and the port's manifest) asks for a minute or more of clean speech; below 30 s we refuse."""


@dataclass(frozen=True)
class TrainClip:
    id: str
    audio: Path
    text: str
    speaker: str
    seconds: float


def speaker_folder_name(speaker: str) -> str:
    """The group's folder name: runs of characters other than word characters and '-' replaced by '_', valid on every
    system (a device name such as `CON` gets a "_"). Speakers never differ by case alone: a voice's name is unique
    ignoring case, and a training folder's speaker folders come from a file system."""
    return portable_name(re.sub(r"[^\w-]+", "_", speaker or "speaker"), fallback="speaker", limit=64)


def _duration(path: Path, name: str) -> float:
    """Seconds of a training clip, which meets a voice clip's rule (`state.clips`: not silence, a quarter second
    at least, at most a reference's length); a UserError naming it as `name` otherwise."""
    try:
        data, rate, _ = read_audio(path)
    except UserError as exc:
        raise UserError(f"{name}: {exc}") from None
    return data.shape[0] / rate


def clips_from_folder(folder: Path) -> list[TrainClip]:
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"training data folder {printable(folder)} does not exist")
    speakers = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not speakers:
        raise UserError(f"{printable(folder)} has no speaker folders; lay it out as <speaker>/<clip>.wav with "
                        "<clip>.lab beside each clip")
    out: list[TrainClip] = []
    untranscribed: list[Path] = []
    for speaker in speakers:
        for audio in sorted(p for p in speaker.iterdir() if p.suffix.lower() in AUDIO_SUFFIXES and p.is_file()):
            text = next((audio.with_suffix(s) for s in TEXT_SUFFIXES if audio.with_suffix(s).is_file()), None)
            transcript = text.read_text(encoding="utf-8", errors="replace").strip() if text else ""
            if not transcript:
                untranscribed.append(audio)
                continue
            out.append(TrainClip(audio.stem, audio, transcript, speaker.name,
                                 _duration(audio, printable(audio.relative_to(folder)))))
    if untranscribed:
        first = printable(untranscribed[0].relative_to(folder))
        raise UserError(f"{len(untranscribed)} clip(s) have no transcript (first: {first}); put what is said in "
                        f"a .lab file beside each clip, or run `s2studio transcribe`")
    if not out:
        raise UserError(f"{printable(folder)} holds no .wav, .flac or .mp3 clips in its speaker folders")
    return out


def clips_from_voice(library, name: str) -> list[TrainClip]:
    """A library voice's clips (by id or name) as one speaker."""
    voice = library.resolve(name)
    out = []
    for clip in voice.clips:
        if not clip.transcript.strip():
            raise UserError(f"voice {voice.name!r}: {clip.file} has no transcript; add one before training")
        path = library.clip_path(voice, clip)
        out.append(TrainClip(f"{voice.id}-{clip.id}", path, clip.transcript, voice.name,
                             _duration(path, f"voice {printable(voice.name)!r}, {clip.file}")))
    return out


def check_enough(clips: list[TrainClip], minimum: float = MIN_SECONDS) -> float:
    """Total seconds of speech; a UserError below `minimum`."""
    total = sum(c.seconds for c in clips)
    if total < minimum:
        raise UserError(f"only {total:.1f} s of transcribed speech; LoRA needs a minute or more of clean speech "
                        f"(at least {minimum:.0f} s): add clips")
    return total
