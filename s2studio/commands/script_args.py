"""What `s2studio synth --script` reads from its command line, and everything a person can get wrong checked before
the slow model load: its options (`add_script_arguments`; `SCRIPT_ONLY` names those synth refuses without
`--script`), the outputs (`check_outputs`: formats, folders, no two outputs on one file), the cast and the script
itself (`read_cast_script`). The render that follows is `script_render.py`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from s2studio import paths
from s2studio.audio.asr_models import DEFAULT_MODEL
from s2studio.commands import checked_takes, fleet_args
from s2studio.commands.outputs import check_file, check_folder
from s2studio.errors import UserError
from s2studio.settings import LIMITS
from s2studio.state.script import Script, parse_script, read_script
from s2studio.state.voices import VoiceLibrary
from s2studio.units import LINE_GAP_S

NORMALIZE = ("none", "peak", "loudness")
SCRIPT_ONLY = (("--cast", "cast", []), ("--stems", "stems", None), ("--srt", "srt", None), ("--vtt", "vtt", None),
               ("--events", "events", None), ("--gap", "gap", LINE_GAP_S), ("--normalize", "normalize", "none"),
               ("--title", "title", None), ("--cue", "cue", None), ("--chapters", "chapters", None),
               ("--stems-format", "stems_format", None), ("--pick", "pick", None),
               ("--check", "check", None), ("--strict", "strict", False),
               ("--check-asr-model", "check_asr_model", DEFAULT_MODEL), ("--server", "server", []),
               ("--local-slots", "local_slots", None), ("--yes", "yes", False), ("--server-key", "server_key", ""),
               ("--max-batch", "max_batch", None))
"""(flag, dest, default) of the options that only a --script render reads (synth refuses them otherwise)."""


def add_script_arguments(parser: argparse.ArgumentParser,
                         text_group: argparse._MutuallyExclusiveGroup | None = None) -> None:
    """Add the script-rendering options to `synth`'s parser; options it has already (its own `--out`,
    or all of them on a second call) are kept as they are.

    `text_group`: synth's `--text`/`--text-file` group, so that exactly one of the three is given;
    without it `--script` is a plain option."""
    g = parser.add_argument_group("script rendering (with --script)")

    def add(*flags: str, to: Any = g, **kwargs: Any) -> None:
        if not any(f in parser._option_string_actions for f in flags):
            to.add_argument(*flags, **kwargs)

    add("--script", to=text_group or g, type=Path, metavar="FILE",
        help="render a script ('Name: line' per text line, # headings, [tags]) to audio; a speaker without a library voice of its name needs --cast")
    add("--cast", action="append", default=[], metavar="NAME=VOICE",
        help="give the script's speaker NAME the library voice VOICE (id or name); once per speaker. "
             "A speaker with the name of a library voice gets that voice without it")
    add("--out", type=Path, metavar="FILE",
        help="the mixed audio; the format follows the extension: .wav .flac .ogg (Vorbis) .opus .mp3")
    add("--stems", type=Path, metavar="DIR",
        help="also write one full-length track per speaker into DIR (aligned to the mix, for a DAW)")
    add("--clips", type=Path, metavar="DIR",
        help="also write each line's take as its own file into DIR (NNN_speaker_first-words.wav)")
    add("--stems-format", metavar="wav|flac|ogg|opus|mp3",
        help="the stems' format (default: the --out file's); FLAC keeps twenty long, mostly silent stems small")
    add("--chapters", type=Path, metavar="DIR",
        help="also write one file per chapter (the script's # headings) into DIR")
    add("--cue", type=Path, metavar="FILE", help="a CUE sheet of the chapters of the --out file")
    add("--srt", type=Path, metavar="FILE", help="subtitles, one cue per spoken line (SubRip)")
    add("--vtt", type=Path, metavar="FILE", help="subtitles, one cue per spoken line (WebVTT)")
    add("--events", type=Path, metavar="FILE.jsonl", help="log every engine event as one JSON line (no sample data)")
    add("--gap", type=float, default=LINE_GAP_S, metavar="SECONDS",
        help=f"silence between lines (default {LINE_GAP_S})")
    add("--normalize", default="none", metavar="none|peak|loudness",
        help="peak: -1 dBFS peak; loudness: -16 LUFS, peak at most -1 dBFS (default none)")
    add("--title", metavar="TEXT", help="title tag of the audio files (default: the first heading)")
    add("--bitrate", type=int, metavar="KBPS", help="MP3 or Opus bitrate (default 192 for MP3, 96 for Opus)")
    add("--subtitle-tags", action="store_true", help="keep delivery tags such as [whispering] in the subtitles")
    checked_takes.add_arguments(add)
    fleet_args.add_arguments(add)
    add("--max-batch", type=int, default=None, metavar="N",
        help="lines generated at once on the fast path: the scenes (a # heading starts one) and takes side by "
             f"side ({LIMITS['max_batch'].range_text()}; default: as many as the memory holds, at most 8 on a CPU)")




@dataclass(frozen=True)
class Outputs:
    out: Path | None
    stems: Path | None
    clips: Path | None
    srt: Path | None
    vtt: Path | None
    events: Path | None
    format: str
    cue: Path | None = None
    chapters: Path | None = None
    stems_format: str | None = None


def check_outputs(args: argparse.Namespace) -> Outputs:
    from s2studio.audio.export import format_for

    out, stems, srt, vtt, events = args.out, args.stems, args.srt, args.vtt, args.events
    clips, cue, chapters = getattr(args, "clips", None), getattr(args, "cue", None), getattr(args, "chapters", None)
    if all(p is None for p in (out, stems, clips, srt, vtt, chapters)):
        raise UserError("nothing to write; give --out FILE (and/or --stems DIR, --clips DIR, --chapters DIR, --srt FILE, "
                        "--vtt FILE)")
    fmt = format_for(out) if out is not None else "wav"
    if cue is not None and out is None:
        raise UserError("--cue describes the chapters of the --out file; give --out too")
    stems_format = getattr(args, "stems_format", None)
    if stems_format is not None:
        from s2studio.audio.export import FORMATS

        if stems_format not in FORMATS:
            raise UserError(f"unknown --stems-format {stems_format!r}; use one of {', '.join(FORMATS)}")
    for path, what in ((out, "--out"), (srt, "--srt"), (vtt, "--vtt"), (events, "--events"), (cue, "--cue")):
        check_file(path, what)
    check_folder(stems, "--stems")
    check_folder(clips, "--clips")
    check_folder(chapters, "--chapters")
    given = [p for p in (out, srt, vtt, events, cue) if p is not None]
    if len({p.resolve() for p in given}) != len(given):
        raise UserError("two outputs name the same file; give each of --out, --srt, --vtt, --cue and --events its own")
    if not args.gap >= 0 or args.gap > 60:
        raise UserError(f"--gap must be between 0 and 60 seconds, got {args.gap}")
    if args.normalize not in NORMALIZE:
        raise UserError(f"unknown --normalize {args.normalize!r}; use none, peak or loudness")
    bitrate = getattr(args, "bitrate", None)
    if bitrate is not None:
        from s2studio.audio.export import BITRATES_KBPS

        if fmt not in BITRATES_KBPS:
            raise UserError(f"--bitrate is for .mp3 and .opus files; {fmt} has none")
        if bitrate not in BITRATES_KBPS[fmt]:
            raise UserError(f"--bitrate {bitrate} is not offered for {fmt}; use one of "
                            f"{', '.join(map(str, BITRATES_KBPS[fmt]))}")
    return Outputs(out, stems, clips, srt, vtt, events, fmt, cue, chapters, stems_format)


def parse_cast(items: Sequence[str]) -> dict[str, str]:
    cast: dict[str, str] = {}
    for item in items:
        name, sep, voice = item.partition("=")
        name, voice = " ".join(name.split()), voice.strip()
        if not sep or not name or not voice:
            raise UserError(f"--cast {item!r}: write it as NAME=VOICE, e.g. --cast 'Alice=My voice'")
        if name in cast:
            raise UserError(f"--cast gives {name!r} twice; give each speaker one voice")
        cast[name] = voice
    return cast


def voice_library() -> VoiceLibrary:
    return VoiceLibrary(paths.voices_dir())  # a data folder that cannot be one is refused by `paths`


def _line_number(source: str, offset: int) -> int:
    return source.count("\n", 0, offset) + 1


def read_cast_script(args: argparse.Namespace, cast_ids: dict[str, str], library: VoiceLibrary) -> tuple[Script, dict[str, str]]:
    """The script and its cast: `--cast` first, then each other speaker whose name a library voice has (case and
    spaces aside), as the studio casts a new project. Warnings name only speakers left without a voice."""
    path: Path = args.script
    source = read_script(path)
    if not source.strip():
        raise UserError(f"script {path} is empty; write lines like 'Alice: Hello.'")
    cast = dict(cast_ids)
    for speaker in parse_script(source).speakers:
        if speaker not in cast and (voice := library.find(speaker)) is not None:
            cast[speaker] = voice.id
    script = parse_script(source, known_speakers=set(cast))
    for w in script.warnings:
        print(f"{path}:{_line_number(source, w.start)}: warning: {w.message}", file=sys.stderr)
    return script, cast

