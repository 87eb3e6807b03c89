"""`s2studio transcribe FILE…`: what is said in audio files, by the speech-recognition model (the `asr` extra).

Prints each file's transcript on stdout (prefixed with the file's name when there are several) and the
detected language on stderr. The model is downloaded on first use into the user cache; transcripts are
cached by audio and model, so asking again is instant. `voice add` without `--text` uses the same path.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

import numpy as np

from s2studio.audio.asr import AsrSettings, Transcript, transcribe
from s2studio.audio.asr_languages import checked_language
from s2studio.audio.asr_models import DEFAULT_MODEL, MODEL_SIZES, OtherModelHere
from s2studio.errors import UserError, printable
from s2studio.state.clips import MAX_RECORDING_SECONDS, read_audio


def add_asr_options(p: argparse.ArgumentParser, flag: str = "--asr-model") -> None:
    p.add_argument(flag, dest="asr_model", default=DEFAULT_MODEL, metavar="SIZE|DIR",
                   help=f"speech-recognition model: {', '.join(MODEL_SIZES)} (downloaded on first use), or a "
                        f"folder with a faster-whisper model (default {DEFAULT_MODEL})")
    p.add_argument("--language", default="", metavar="CODE",
                   help="the language spoken (en, de, ja …); detected when not given")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("transcribe", help="print what is said in audio files",
                              description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="+", type=Path, metavar="FILE")
    add_asr_options(p, "--model")


class Reporter:
    """Download and transcription progress on stderr: one rewritten line on a terminal, none otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.shown = ""

    def __call__(self, fraction: float, message: str) -> None:
        if self.tty and message.startswith("Downloading"):
            line = f"{message} ({fraction:.0%})"
            print("\r" + line.ljust(len(self.shown)), end="", file=sys.stderr, flush=True)
            self.shown = line

    def done(self) -> None:
        if self.shown:
            print(file=sys.stderr)
            self.shown = ""


def transcribe_samples(samples: np.ndarray, rate: int, settings: AsrSettings, name: str,
                       flag: str = "--asr-model") -> Transcript:
    """`audio.asr.transcribe` with progress on stderr, and the language said there. `flag`: the command's option
    for the model, which a line offering another model names."""
    reporter = Reporter()
    try:
        transcript = transcribe(samples, rate, settings, threading.Event(), reporter)
    except OtherModelHere as exc:
        raise UserError(exc.for_command_line(flag)) from None
    finally:
        reporter.done()
    print(f"{printable(name)}: {transcript.language_label} (model {printable(transcript.model)})", file=sys.stderr)
    return transcript


def run(args: argparse.Namespace) -> int:
    settings = AsrSettings(args.asr_model, checked_language(args.language))
    status = 0
    for path in args.files:
        data, rate, _ = read_audio(path, MAX_RECORDING_SECONDS, voice_clip=False)
        transcript = transcribe_samples(data.mean(axis=1), rate, settings, path.name, "--model")
        if not transcript.text:
            print(f"{printable(path.name)}: no speech recognised", file=sys.stderr)
            status = 1
        prefix = f"{printable(path.name)}: " if len(args.files) > 1 else ""
        print(prefix + printable(transcript.text, 100_000))
    return status
