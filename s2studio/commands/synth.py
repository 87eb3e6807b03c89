"""`s2studio synth`: text (and reference codes) in, codec codes out, headless.

This is the command the parity tests and benchmarks drive, so its defaults are upstream's
command line (`fish_speech/models/text2semantic/inference.py`): seed 42, temperature 1.0, top-p
0.9, top-k 30, chunk length 300 bytes, no frame limit, upstream batching. With `--device cpu
--precision fp32 --threads 1` the codes are meant to equal upstream's seeded `generate_long`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from s2studio.commands.outputs import audio_bytes, check_file, check_folder, decoded_speech, make_folder, npy_bytes
from s2studio.commands.script_args import SCRIPT_ONLY, add_script_arguments
from s2studio.commands.script_render import ignores_eos, run_script, sampling_from_args
from s2studio.commands.setting_args import choice_option, number_option, speed_of, speed_option
from s2studio.commands.synth_takes import check_takes, run_takes
from s2studio.engine.api import FRAME_SAMPLES, PRECISIONS, QUANTIZE_MODES, SAMPLE_RATE
from s2studio.errors import UserError, printable
from s2studio.settings import CHOICES, LIMITS
from s2studio.state.atomic import OutputSet
from s2studio.state.disk import remove_quietly
from s2studio.state.codes import read_codes_file

MAX_REFERENCES = 4


class _ReferenceSource(argparse.Action):
    """Collects --reference and --reference-codes into one ordered list of (kind, path), so each pairs with
    the --reference-text at the same position whichever flag it came from."""

    def __init__(self, *args, kind: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.kind = kind

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        sources = list(getattr(namespace, self.dest, None) or [])
        sources.append((self.kind, values))
        setattr(namespace, self.dest, sources)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "synth", help="speak text or a script into audio files (and S2 codes)",
        description="Speak text (--text) or a script (--script) into audio (--out) and S2 codec codes "
                    "(--codes-out), optionally cloning voices from reference clips or library voices. "
                    "Defaults follow upstream's command line (seed 42, temperature 1.0, top-p 0.9, top-k 30, "
                    "chunk length 300).")
    p.add_argument("--model", required=True, type=Path, metavar="DIR",
                   help="model folder in the upstream layout (config.json, weights, tokenizer.json)")
    text = p.add_mutually_exclusive_group(required=True)
    text.add_argument("--text", metavar="TEXT", help="text to speak; <|speaker:i|> tags and [inline tags] allowed")
    text.add_argument("--text-file", type=Path, metavar="FILE", help="read the text from a UTF-8 file")
    p.add_argument("--reference-codes", action=_ReferenceSource, dest="reference_sources", kind="codes",
                   type=Path, metavar="CODES.npy",
                   help="reference clip codes, int (10, frames); repeat up to 4 times, each with --reference-text")
    p.add_argument("--reference", action=_ReferenceSource, dest="reference_sources", kind="clip", type=Path,
                   metavar="CLIP", help="reference clip as audio (WAV, FLAC, OGG, MP3, …), encoded with the "
                   "model's codec; mixes with --reference-codes, in command-line order")
    p.add_argument("--reference-text", action="append", default=[], metavar="TEXT",
                   help="transcript of the matching --reference or --reference-codes (paired in order)")
    number_option(p, "seed", "random seed", default=42, why=", as upstream's CLI")
    # device, precision and batching are checked by the engine so that a typo gets a one-line error
    choice_option(p, "device", "auto", "where the model runs (default auto: CUDA if present, else CPU)")
    choice_option(p, "precision", "auto", "auto: bf16 on CUDA, fp32 elsewhere; fp32 on CPU is the bit-exact mode")
    number_option(p, "threads", "CPU threads for torch, automatic: the free cores; the bits depend on it")
    p.add_argument("--fast", action="store_true",
                   help="fast path: attention over the filled cache, prefix reuse between batches; codes equal "
                        "the exact path's for almost every seed, not all")
    speed_option(p)
    choice_option(p, "quantize", "none",
                  help="int8: int8 linear layers (about half of bf16's memory and time per frame); "
                       "int4: int4 groups of 128 (S2 Pro's weights 3.2 GB against int8's 5.1; the fastest on a CPU)")
    p.add_argument("--max-new-tokens", type=int, default=0, metavar="N",
                   help="frames per batch, the dropped last one included (default 0: up to the model's context)")
    p.add_argument("--frames", type=int, default=None, metavar="N",
                   help="for benchmarks: exactly N frames per batch, whatever the model says (<|im_end|> is masked "
                        "out; implies --ignore-eos, replaces --max-new-tokens)")
    p.add_argument("--ignore-eos", action="store_true",
                   help="for benchmarks: never stop a batch at <|im_end|>; run to --max-new-tokens or the context")
    p.add_argument("--chunk-length", type=int, default=300, metavar="BYTES",
                   help="UTF-8 bytes of turns per batch in upstream batching (default 300)")
    number_option(p, "temperature", "sampling temperature", default=1.0, metavar="T", why=", as upstream's CLI")
    number_option(p, "top_p", "nucleus threshold", default=0.9, metavar="P", why=", as upstream's CLI")
    number_option(p, "top_k", "keep the K most likely tokens", metavar="K")
    choice_option(p, "batching", None,  # type: ignore[arg-type]
                   help="upstream: <|speaker:i|> turns grouped by --chunk-length and 5 turns (default for --text); "
                        "line: every line is its own batch (default for --script)")
    p.add_argument("--codes-out", type=Path, metavar="FILE.npy",
                   help="write all batches' codes, int64 (10, frames), concatenated in time")
    p.add_argument("--codes-out-dir", type=Path, metavar="DIR",
                   help="also write each batch's codes as DIR/batch_000.npy, batch_001.npy, ...")
    p.add_argument("--out", type=Path, metavar="FILE",
                   help="write the speech as audio (.wav is PCM16 as upstream writes it; .flac, .ogg, .opus, .mp3 "
                        "too); in upstream batching each batch is decoded on its own, as upstream's server does")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    add_script_arguments(p, text_group=text)


def _read_text(args: argparse.Namespace) -> str:
    if args.text is not None:
        text = args.text
    else:
        try:
            text = args.text_file.read_text(encoding="utf-8-sig")
        except FileNotFoundError:
            raise UserError(f"text file not found: {args.text_file}") from None
        except UnicodeDecodeError:
            raise UserError(f"text file {args.text_file} is not UTF-8 text") from None
        except OSError as exc:
            raise UserError(f"cannot read text file {args.text_file}: {exc.strerror}") from None
    if not text.strip():
        raise UserError("the text is empty; give --text or a --text-file with something to say")
    if any(0xDC80 <= ord(ch) <= 0xDCFF for ch in text):
        raise UserError(f"--text holds bytes that are not UTF-8 ({printable(text, 60)}); pass the text as UTF-8")
    return text


def _read_codes(path: Path) -> np.ndarray:
    return read_codes_file(path, "reference codes")


def _reference_sources(args: argparse.Namespace) -> list[tuple[str, Path, str]]:
    """(kind, path, transcript) per reference, in command-line order; the files are read later."""
    sources, texts = args.reference_sources or [], args.reference_text
    if len(sources) != len(texts):
        raise UserError(f"got {len(sources)} references and {len(texts)} --reference-text; "
                        "give one transcript per --reference or --reference-codes")
    if len(sources) > MAX_REFERENCES:
        raise UserError(f"at most {MAX_REFERENCES} references, got {len(sources)}")
    for kind, path in sources:
        if Path(path).is_dir():
            raise UserError(f"reference {'codes file' if kind == 'codes' else 'clip'} {printable(path)} is a folder; "
                            "give a file")
        if not Path(path).is_file():
            raise UserError(f"reference {'codes file' if kind == 'codes' else 'clip'} not found: {path}")
    return [(kind, Path(path), text) for (kind, path), text in zip(sources, texts)]


def _check_outputs(args: argparse.Namespace):
    """Refuse unusable outputs before the slow load; returns the --out format."""
    from s2studio.audio.export import format_for

    check_file(args.codes_out, "--codes-out", (".npy",))
    check_folder(args.codes_out_dir, "--codes-out-dir")
    check_file(args.out, "--out")
    return format_for(args.out) if args.out is not None else None


def _or(names: tuple[str, ...]) -> str:
    return ", ".join(names[:-1]) + f" or {names[-1]}"


def _refuse_script_options(args: argparse.Namespace) -> None:
    """The script-rendering options do nothing without --script: refuse them rather than ignore them."""
    given = [flag for flag, dest, default in SCRIPT_ONLY if getattr(args, dest, default) != default]
    if given:
        raise UserError(f"{given[0]} belongs to a --script render; with --text/--text-file write the codes "
                        "(--codes-out) or the speech (--out), or render a script")


def run(args: argparse.Namespace) -> int:
    if getattr(args, "script", None):
        return run_script(args)
    _refuse_script_options(args)
    if args.batching is None:
        args.batching = "upstream"
    from s2studio.codec.resample import encode_audio, load_reference
    from s2studio.engine.s2.generate import BatchFinished, BatchStarted, FrameReady, generate_long
    from s2studio.engine.s2.setup import check_model_folder, load_runtime
    from s2studio.model.config import load_config
    from s2studio.state.codes import check_codes
    from s2studio.text.prompt import SPEAKER_TAG, Reference

    text = _read_text(args)
    sources = _reference_sources(args)
    if args.chunk_length < 1:
        raise UserError(f"--chunk-length must be at least 1 byte, got {args.chunk_length}")
    if args.batching not in CHOICES["batching"]:
        raise UserError(f"unknown --batching {args.batching!r}; use {_or(CHOICES['batching'])}")
    sampling = sampling_from_args(args, args.batching)
    LIMITS["threads"].check(args.threads, "--threads")
    if args.precision not in PRECISIONS:
        raise UserError(f"unknown --precision {args.precision!r}; use {_or(PRECISIONS)}")
    if args.quantize not in QUANTIZE_MODES:
        raise UserError(f"unknown --quantize {args.quantize!r}; use {_or(QUANTIZE_MODES)}")
    out_format = _check_outputs(args)
    check_takes(args)

    # every reference is read and checked before the (slow) load, so that a bad one fails at once
    config = load_config(check_model_folder(args.model))
    given = {path: check_codes(_read_codes(path), f"reference codes {path}", config.num_codebooks,
                               config.codebook_size)
             for kind, path, _ in sources if kind == "codes"}
    if args.takes > 1:
        for kind, path, _ in sources:
            if kind == "clip":
                load_reference(path)  # a clip that is not audio fails before the load, as below
        return run_takes(args, text, sources, given, sampling, out_format)
    clips = {path: load_reference(path) for kind, path, _ in sources if kind == "clip"}
    t0 = time.perf_counter()
    runtime = load_runtime(args.model, device=args.device, precision=args.precision, quantize=args.quantize,
                           speed=speed_of(args, args.fast), threads=args.threads or None,
                           codec=args.out is not None or bool(clips))
    references = [Reference(ref_text, given[path] if kind == "codes" else encode_audio(runtime.codec, clips[path]))
                  for kind, path, ref_text in sources]
    log = (lambda msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    info = runtime.info
    log(f"loaded {printable(args.model)} on {info.device} ({info.settings_text()}) in {time.perf_counter() - t0:.1f} s")
    if info.kernels_note:
        log(f"note: the CPU kernels are not used ({info.kernels_note})")
    if args.out is None and args.codes_out is None and args.codes_out_dir is None:
        log("warning: nothing will be written: add --out FILE.wav for the speech (or --codes-out FILE.npy for its "
            "codes)")

    if args.batching == "upstream":
        lead = SPEAKER_TAG.split(text, maxsplit=1)
        if len(lead) > 1 and lead[0].strip():
            log(f"warning: text before the first <|speaker:i|> tag is not spoken, as upstream: {lead[0].strip()[:40]!r}")

    batches: list[np.ndarray] = []
    t1 = time.perf_counter()
    outputs = OutputSet()  # every file at the end, together; nothing at all on a failure
    made_dir = args.codes_out_dir is not None and make_folder(args.codes_out_dir)
    try:
        for event in generate_long(runtime.decoder, runtime.tokenizer, text, references=references,
                                   sampling=sampling, batching=args.batching, chunk_length=args.chunk_length,
                                   ignore_eos=ignores_eos(args)):
            if isinstance(event, BatchStarted):
                if args.frames is not None and event.max_frames < args.frames:
                    raise UserError(f"--frames {args.frames}: batch {event.index + 1} leaves room for "
                                    f"{event.max_frames} frames in the context; ask for fewer or use shorter text")
                log(f"batch {event.index + 1}/{event.count}: {event.prompt_length} prompt tokens")
                t_batch = time.perf_counter()
            elif isinstance(event, FrameReady):
                if not args.quiet and (event.frame + 1) % 50 == 0:
                    log(f"  {event.frame + 1} frames")
            elif isinstance(event, BatchFinished):
                batches.append(event.codes)
                n = event.codes.shape[1]
                dt = time.perf_counter() - t_batch
                log(f"  {n} frames in {dt:.1f} s ({n / dt if dt > 0 else 0.0:.1f} frames/s)")
                if args.codes_out_dir is not None:
                    outputs.add(args.codes_out_dir / f"batch_{event.index:03d}.npy", npy_bytes(event.codes))
        codes = np.concatenate(batches, axis=1).astype(np.int64)
        if args.codes_out is not None:
            outputs.add(args.codes_out, npy_bytes(codes))
        if args.out is not None:
            outputs.add(args.out, audio_bytes(args.out, decoded_speech(runtime.codec, batches),
                                              runtime.codec.sample_rate, out_format))
        outputs.commit()
    except BaseException:
        outputs.discard()
        if made_dir:
            remove_quietly(args.codes_out_dir)
        raise
    seconds = codes.shape[1] * FRAME_SAMPLES / SAMPLE_RATE
    where = f" -> {printable(args.codes_out)}" if args.codes_out is not None else ""
    print(f"{codes.shape[1]} frames ({seconds:.2f} s of audio) in {len(batches)} batch(es), "
          f"{time.perf_counter() - t1:.1f} s{where}")
    return 0
