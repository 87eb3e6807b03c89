"""`s2studio synth --text … --takes N`: N takes of one text at once, each to its own files.

The takes are N render jobs (`engine.render.Render`) on one scheduler: with `--fast` they run side by side on the
batch (N streams), otherwise one after another (the exact loop runs one). Take k is drawn with seed + k - 1, so
take 1 is what the same command without --takes gives on the same path. The references (`--reference` clips,
encoded by the engine's codec, and `--reference-codes`) are made once, in the first job, reference i speaking as
speaker i; the text's `<|speaker:i|>` turns are the request's lines, as the server makes them. `--out mix.wav`
becomes `mix_take1.wav` … `mix_takeN.wav`, `--codes-out` likewise (a take's codes joined in time), `--codes-out-dir
D` the folders `D_take1` …; nothing is written unless every take succeeds.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from s2studio.commands.checked_takes import MAX_TAKES, take_path
from s2studio.commands.outputs import audio_bytes, make_folder, npy_bytes
from s2studio.commands.render_log import EventLog, ProgressBar
from s2studio.commands.script_render import EngineFactory, default_engine, ignores_eos, load_model, run_renders
from s2studio.engine.api import FRAME_SAMPLES, SAMPLE_RATE, Reference, SynthesisRequest
from s2studio.engine.plan import engine_encoder
from s2studio.engine.render import Render
from s2studio.errors import UserError, printable
from s2studio.settings import Sampling
from s2studio.state.atomic import OutputSet
from s2studio.state.disk import remove_quietly
from s2studio.text.prompt import SPEAKER_TAG


def check_takes(args: argparse.Namespace) -> None:
    """Refused before the slow load: a count out of range, or nothing to write a take to."""
    if not 1 <= args.takes <= MAX_TAKES:
        raise UserError(f"--takes must be between 1 and {MAX_TAKES}, got {args.takes}")
    if args.takes > 1 and args.out is None and args.codes_out is None and args.codes_out_dir is None:
        raise UserError("--takes writes each take to its own files; give --out FILE and/or --codes-out FILE.npy")


def run_takes(args: argparse.Namespace, text: str, sources: Sequence[tuple[str, Path, str]],
              given: dict[Path, np.ndarray], sampling: Sampling, out_format: str | None,
              engine_factory: EngineFactory | None = None) -> int:
    """Render `args.takes` takes of `text` and write them; `sources`: (kind, path, transcript) per reference,
    `given`: the codes of the `--reference-codes` ones, read and checked already."""
    engine = (engine_factory or default_engine)()
    log = EventLog(None)
    t0 = time.perf_counter()
    info = load_model(engine, args, log)
    say = (lambda msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    say(f"loaded {printable(args.model)} on {info.device} ({info.settings_text()}) in {time.perf_counter() - t0:.1f} s")
    made: list[Reference] = []

    def references(engine: Any, cancel: threading.Event) -> list[Reference]:
        if not made:  # the first job to start encodes the clips; the others reuse them
            encode = engine_encoder(engine, cancel)
            made.extend(Reference(i, transcript, given[path] if kind == "codes" else encode(path))
                        for i, (kind, path, transcript) in enumerate(sources))
        return made

    from s2studio.serve.compile import tts_lines  # noqa: PLC0415 - the server's (starlette) only when used

    first = SPEAKER_TAG.search(text)
    if args.batching == "upstream" and first is not None:
        text = text[first.start():]  # upstream does not speak what comes before the first tag (synth warns of it)
    base = SynthesisRequest("", tts_lines(text), (), sampling, args.chunk_length,
                            ignore_eos=ignores_eos(args))
    renders = [Render(replace(base, job_id=f"take{k}", sampling=sampling.later(k - 1)), (), None,
                      info.codec_fingerprint, references) for k in range(1, args.takes + 1)]
    bar = ProgressBar(sys.stderr, enabled=not args.quiet and sys.stderr.isatty())
    t1 = time.perf_counter()
    takes = run_renders(engine, renders, log, bar)
    outputs = OutputSet()
    folders = [take_path(args.codes_out_dir, k) for k in range(1, args.takes + 1)] if args.codes_out_dir else []
    made_dirs = [folder for folder in folders if make_folder(folder)]
    try:
        for k, render in enumerate(renders, 1):
            batches = [t.codes for t in takes[render.job_id]]
            for i, codes in enumerate(batches):
                if folders:
                    outputs.add(folders[k - 1] / f"batch_{i:03d}.npy", npy_bytes(codes))
            if args.codes_out is not None:
                outputs.add(take_path(args.codes_out, k), npy_bytes(np.concatenate(batches, axis=1)))
            if args.out is not None:
                audio = np.concatenate([t.audio for t in takes[render.job_id]])
                outputs.add(take_path(args.out, k), audio_bytes(args.out, audio, info.sample_rate, out_format))
        outputs.commit()
    except BaseException:
        outputs.discard()
        for folder in made_dirs:
            remove_quietly(folder)
        raise
    frames = sum(int(t.codes.shape[1]) for kept in takes.values() for t in kept)
    seconds = frames * FRAME_SAMPLES / SAMPLE_RATE
    named = args.out if args.out is not None else args.codes_out or args.codes_out_dir
    print(f"{args.takes} takes ({min(args.takes, info.max_batch)} at once), {frames} frames ({seconds:.2f} s of "
          f"audio) in {time.perf_counter() - t1:.1f} s -> {printable(take_path(named, 1))} … "
          f"{printable(take_path(named, args.takes).name)}", file=sys.stderr)
    return 0
