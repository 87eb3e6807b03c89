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
from s2studio.commands.script_render import add_script_arguments, run_script
from s2studio.errors import UserError, printable
from s2studio.state.atomic import OutputSet, remove_quietly
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
        "synth", help="generate speech codes from text",
        description="Generate S2 codec codes from text, optionally cloning voices from reference codes. "
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
    p.add_argument("--seed", type=int, default=42, help="random seed (default 42, as upstream's CLI)")
    # device, precision and batching are checked by the engine so that a typo gets a one-line error
    p.add_argument("--device", default="auto", metavar="auto|cpu|cuda|mps",
                   help="where the model runs (default auto: CUDA if present, else CPU)")
    p.add_argument("--precision", default="auto", metavar="auto|fp32|bf16",
                   help="auto: bf16 on CUDA, fp32 elsewhere; fp32 on CPU is the bit-exact mode")
    p.add_argument("--threads", type=int, default=None, metavar="N", help="CPU threads for torch (bits depend on it)")
    p.add_argument("--fast", action="store_true",
                   help="fast path: attention over the filled cache, prefix reuse between batches; codes equal "
                        "the exact path's for almost every seed, not all")
    p.add_argument("--quantize", default="none", metavar="none|int8|int4",
                   help="int8: int8 linear layers (about half of bf16's memory and time per frame); "
                        "int4: int4 groups (a quarter of bf16's memory)")
    p.add_argument("--max-new-tokens", type=int, default=0, metavar="N",
                   help="frames per batch, the dropped last one included (default 0: up to the model's context)")
    p.add_argument("--chunk-length", type=int, default=300, metavar="BYTES",
                   help="UTF-8 bytes of turns per batch in upstream batching (default 300)")
    p.add_argument("--temperature", type=float, default=1.0, metavar="T", help="sampling temperature (default 1.0)")
    p.add_argument("--top-p", type=float, default=0.9, metavar="P", help="nucleus threshold (default 0.9)")
    p.add_argument("--top-k", type=int, default=30, metavar="K", help="keep the K most likely tokens (default 30)")
    p.add_argument("--batching", default=None, metavar="upstream|line",
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


def _encode_clip(codec, path: Path) -> np.ndarray:
    from s2studio.codec.resample import encode_file

    return encode_file(codec, path)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "script", None):
        return run_script(args)
    if args.batching is None:
        args.batching = "upstream"
    from s2studio.engine.generate import BatchFinished, BatchStarted, FrameReady, GenerationSettings

    text = _read_text(args)
    sources = _reference_sources(args)
    settings = GenerationSettings(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                                  max_new_tokens=args.max_new_tokens, fast=args.fast)
    if args.chunk_length < 1:
        raise UserError(f"--chunk-length must be at least 1 byte, got {args.chunk_length}")
    if args.batching not in ("upstream", "line"):
        raise UserError(f"unknown --batching {args.batching!r}; use upstream or line")
    if args.precision not in ("auto", "fp32", "bf16"):
        raise UserError(f"unknown --precision {args.precision!r}; use auto, fp32 or bf16")
    if args.quantize not in ("none", "int8", "int4"):
        raise UserError(f"unknown --quantize {args.quantize!r}; use none, int8 or int4")
    out_format = _check_outputs(args)

    from s2studio.engine.device import PRECISIONS, resolve_device, resolve_dtype, set_threads
    from s2studio.engine.bf16_linear import cpu_fast_path_keeps_bf16
    from s2studio.engine.memory import check_fits, codec_bytes_of
    from s2studio.engine.quantize import load_quantized
    from s2studio.engine.generate import generate_long
    from s2studio.model.config import load_config
    from s2studio.text.prompt import SPEAKER_TAG, Reference, check_codes
    from s2studio.text.tokenizer import S2Tokenizer

    set_threads(args.threads)
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.precision, device)
    if not args.model.is_dir():
        raise UserError(f"model folder {args.model} does not exist or is not a folder")
    config = load_config(args.model)
    tokenizer = S2Tokenizer.from_file(args.model / "tokenizer.json")
    # codes files are checked before the (slow) weight loading so a bad reference fails at once
    given = {path: check_codes(_read_codes(path), f"reference codes {path}", config.num_codebooks,
                               config.codebook_size)
             for kind, path, _ in sources if kind == "codes"}
    codec = None
    if args.out is not None or any(kind == "clip" for kind, _, _ in sources):
        from s2studio.codec.loading import load_codec

        codec = load_codec(args.model, device=device)
    references = [Reference(ref_text, given[path] if kind == "codes" else _encode_clip(codec, path))
                  for kind, path, ref_text in sources]
    t0 = time.perf_counter()
    precision = next(name for name, value in PRECISIONS.items() if value == dtype)
    keep_bf16 = args.fast and cpu_fast_path_keeps_bf16(device, args.quantize)
    check_fits(config, str(device), precision=precision, quantize=args.quantize,
               codec_bytes=codec_bytes_of(args.model) if codec is not None else 0, bf16_linears=keep_bf16)
    model = load_quantized(args.model, device=device, dtype=dtype, mode=args.quantize,
                           semantic_range=(tokenizer.semantic_begin_id, tokenizer.semantic_end_id),
                           im_end_id=tokenizer.im_end_id, keep_bf16_linears=keep_bf16)
    log = (lambda msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    log(f"loaded {args.model} on {device} ({str(dtype).removeprefix('torch.')}) in {time.perf_counter() - t0:.1f} s")

    if args.batching == "upstream":
        lead = SPEAKER_TAG.split(text, maxsplit=1)
        if len(lead) > 1 and lead[0].strip():
            log(f"warning: text before the first <|speaker:i|> tag is not spoken, as upstream: {lead[0].strip()[:40]!r}")

    batches: list[np.ndarray] = []
    t1 = time.perf_counter()
    outputs = OutputSet()  # every file at the end, together; nothing at all on a failure
    made_dir = args.codes_out_dir is not None and make_folder(args.codes_out_dir)
    try:
        for event in generate_long(model, tokenizer, text, references=references, settings=settings,
                                   seed=args.seed, batching=args.batching, chunk_length=args.chunk_length):
            if isinstance(event, BatchStarted):
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
            outputs.add(args.out, audio_bytes(args.out, decoded_speech(codec, batches), codec.sample_rate,
                                              out_format))
        outputs.commit()
    except BaseException:
        outputs.discard()
        if made_dir:
            remove_quietly(args.codes_out_dir)
        raise
    seconds = codes.shape[1] * 2048 / 44100
    where = f" -> {printable(args.codes_out)}" if args.codes_out is not None else ""
    print(f"{codes.shape[1]} frames ({seconds:.2f} s of audio) in {len(batches)} batch(es), "
          f"{time.perf_counter() - t1:.1f} s{where}")
    return 0
