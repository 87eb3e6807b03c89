"""`s2studio voice add|list|show|export|import|remove`: the voice library from the command line.

`add` stores clips and transcripts (a clip given without `--text` is transcribed by the speech-recognition
model; `--trim` keeps each clip from its first speech to its last, `--normalize` brings it to -23 LUFS, as the
studio's new-voice dialog does); codes are computed when a voice is first used for synthesis (by the real
engine) and cached in the voice folder. The library lives under the data dir (`S2STUDIO_DATA_DIR` overrides it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from s2studio import paths
from s2studio.audio.asr import AsrSettings
from s2studio.audio.clip_prep import prepared, speech_span
from s2studio.audio.asr_languages import checked_language
from s2studio.commands.transcribe import add_asr_options, transcribe_samples
from s2studio.errors import UserError, printable
from s2studio.state.clips import MAX_RECORDING_SECONDS, MAX_REFERENCE_SECONDS, ClipAudio, audio_warnings, read_audio
from s2studio.state.voices import MAX_CLIPS, Voice, VoiceLibrary, check_clip


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("voice", help="manage cloned voices", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="voice_command", metavar="ACTION", required=True)

    add = sub.add_parser("add", help="create a voice from 1-4 clips with transcripts")
    add.add_argument("--name", required=True,
                     help="the voice's name, as scripts (Alice: …), --cast and the server's `voice` name it")
    add.add_argument("--clip", action="append", type=Path, required=True, metavar="FILE",
                     help="reference audio (repeat for up to 4 clips)")
    add.add_argument("--text", action="append", default=[], metavar="TRANSCRIPT",
                     help="exactly what is said in the matching --clip (one per clip, same order); without "
                          "--text every clip is transcribed")
    add.add_argument("--trim", action="store_true", help="cut the silence before the first and after the last speech")
    add.add_argument("--normalize", action="store_true", help="bring each clip to -23 LUFS (peak at most -1 dBFS)")
    add_asr_options(add)
    add.add_argument("--notes", default="", help="free text kept with the voice (shown by `voice show`)")
    add.add_argument("--consent", default="", help="where the voice comes from and who agreed to the cloning")

    sub.add_parser("list", help="list voices")

    show = sub.add_parser("show", help="details and clip checks of one voice")
    show.add_argument("voice", help="voice name or id")

    exp = sub.add_parser("export", help="write a voice as one .s2voice file")
    exp.add_argument("voice", help="voice name or id")
    exp.add_argument("dest", type=Path)

    imp = sub.add_parser("import", help="add the voice in a .s2voice file")
    imp.add_argument("file", type=Path)

    rm = sub.add_parser("remove", help="delete a voice")
    rm.add_argument("voice", help="voice name or id")


def _prepared(clip: Path, text: str, args: argparse.Namespace) -> tuple[Path | ClipAudio, str]:
    """A clip as `voice add` stores it (trimmed and normalised when asked), its warnings on stderr, and its
    transcript (the given text, or the speech-recognition model's)."""
    source: Path | ClipAudio = clip
    data, rate, subtype = read_audio(clip, MAX_RECORDING_SECONDS if args.trim else MAX_REFERENCE_SECONDS)
    if args.trim or args.normalize:
        span = speech_span(data.mean(axis=1), rate) if args.trim else None
        source = ClipAudio(clip.name, prepared(data, rate, span, args.normalize), rate, subtype)
        data = source.data
    for warning in audio_warnings(data, rate):
        print(f"warning: {printable(clip.name)}: {warning}", file=sys.stderr)
    if not text:
        settings = AsrSettings(args.asr_model, checked_language(args.language))
        text = transcribe_samples(data.mean(axis=1), rate, settings, clip.name).text
        if not text:
            raise UserError(f"no speech recognised in {printable(clip.name)}; give its transcript with --text")
        print(f"{printable(clip.name)}: “{printable(text, 500)}”", file=sys.stderr)
    return source, text


def _summary(v: Voice) -> str:
    seconds = sum(c.duration_s for c in v.clips)
    return f"{v.id}  {printable(v.name)}  ({len(v.clips)} clip{'s' if len(v.clips) != 1 else ''}, {seconds:.1f} s)"


def run(args: argparse.Namespace) -> int:
    """Everything printed goes through `printable`: a name or transcript from someone's `.s2voice` never
    reaches the terminal raw (an escape sequence could retitle it or clear the screen)."""
    lib = VoiceLibrary(paths.voices_dir())
    lib.clean_leftovers()
    cmd = args.voice_command
    if cmd == "add":
        if args.text and len(args.clip) != len(args.text):
            raise UserError(f"got {len(args.clip)} --clip and {len(args.text)} --text; give one --text per --clip, "
                            "or none to transcribe every clip")
        if len(args.clip) > MAX_CLIPS:
            raise UserError(f"a voice takes at most {MAX_CLIPS} clips, got {len(args.clip)}")
        pairs = [_prepared(clip, text, args) for clip, text in zip(args.clip, args.text or [""] * len(args.clip),
                                                                  strict=True)]
        voice = lib.create(args.name, pairs, args.notes, args.consent)
        print(_summary(voice))
    elif cmd == "list":
        voices, damaged = lib.scan()
        for folder, reason in damaged:
            print(f"warning: skipped a damaged voice ({printable(reason, 300)}); restore the folder {folder} "
                  "from a backup or remove it", file=sys.stderr)
        if not voices and not damaged:
            print("no voices yet; add one with `s2studio voice add --name NAME --clip FILE --text TRANSCRIPT`",
                  file=sys.stderr)
        for v in voices:
            print(_summary(v))
    elif cmd == "show":
        v = lib.resolve(args.voice)
        print(_summary(v))
        print(f"created: {v.created}")
        if v.notes:
            print(f"notes: {printable(v.notes, 10_000)}")
        print(f"consent: {printable(v.consent, 10_000) or '(none recorded)'}")
        for c in v.clips:
            print(f"{c.id}  {c.file}  {c.duration_s:.1f} s  {c.sample_rate} Hz  \"{printable(c.transcript, 10_000)}\"")
            for warning in check_clip(lib.clip_path(v, c)):
                print(f"    warning: {warning}")
    elif cmd == "export":
        v = lib.resolve(args.voice)
        print(printable(lib.export(v.id, args.dest), 10_000))
    elif cmd == "import":
        print(_summary(lib.import_voice(args.file)))
    elif cmd == "remove":
        v = lib.resolve(args.voice)
        lib.delete(v.id)
        print(f"removed {printable(v.name)} ({v.id})")
    return 0
