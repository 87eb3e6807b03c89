"""`s2studio voice add|list|show|export|import|remove`: the voice library from the command line.

`add` only stores clips and transcripts; codes are computed when a voice is first used for
synthesis (by the real engine) and cached in the voice folder. The library lives under the data
dir (`S2STUDIO_DATA_DIR` overrides it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from s2studio import paths
from s2studio.errors import UserError, printable
from s2studio.state.voices import MAX_CLIPS, Voice, VoiceLibrary, check_clip


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("voice", help="manage cloned voices", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="voice_command", metavar="ACTION", required=True)

    add = sub.add_parser("add", help="create a voice from 1-4 clips with transcripts")
    add.add_argument("--name", required=True)
    add.add_argument("--clip", action="append", type=Path, required=True, metavar="FILE",
                     help="reference audio (repeat for up to 4 clips)")
    add.add_argument("--text", action="append", required=True, metavar="TRANSCRIPT",
                     help="exactly what is said in the matching --clip (one per clip, same order)")
    add.add_argument("--notes", default="")
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
        if len(args.clip) != len(args.text):
            raise UserError(f"got {len(args.clip)} --clip and {len(args.text)} --text; give one --text per --clip")
        if len(args.clip) > MAX_CLIPS:
            raise UserError(f"a voice takes at most {MAX_CLIPS} clips, got {len(args.clip)}")
        for clip in args.clip:
            for warning in check_clip(clip):
                print(f"warning: {printable(clip.name)}: {warning}", file=sys.stderr)
        voice = lib.create(args.name, list(zip(args.clip, args.text, strict=True)), args.notes, args.consent)
        print(_summary(voice))
    elif cmd == "list":
        voices = lib.list()
        if not voices:
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
