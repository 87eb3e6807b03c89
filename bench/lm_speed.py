"""How fast the generation loop makes frames: `python bench/lm_speed.py [--threads N] [--device cpu]`.

A benchmark, not a test: it prints figures and asserts nothing. For the tiny and the mid-size random
demo models (`s2studio.demo_model.SIZES`) it runs `generate_frames` on a prompt with one reference
of `--reference-frames` frames (about 10 s of voice by default) and reports

- decode frames/s: frames after the first / time after the first frame (prefill excluded),
- overall frames/s: every frame / time from the call (prefill included),
- prefill ms: time to the first frame (one slow forward over the prompt, one frame sampled).

`<|im_end|>` is masked out of the sampler so that every run makes exactly `--frames` frames (random
weights would stop at random points); the work per frame is unchanged. The median of `--runs` runs
after one warm-up run is shown. S2 speaks 21.5 frames per second of audio: decode frames/s / 21.5
is the real-time factor's inverse.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from s2studio.demo_model import SIZES, write_demo_model
from s2studio.engine.api import FRAME_SAMPLES, SAMPLE_RATE
from s2studio.engine.s2.device import resolve_device, resolve_dtype, set_threads
from s2studio.engine.s2.generate import ensure_caches, generate_frames, make_generator, make_sampler
from s2studio.engine.weights.checkpoints import load_dual_ar
from s2studio.settings import Sampling
from s2studio.text.prompt import Reference, build_prompt
from s2studio.text.tokenizer import S2Tokenizer

TEXT = "<|speaker:0|>The quick brown fox jumps over the lazy dog, and then it runs far away."
FRAMES_PER_SECOND = SAMPLE_RATE / FRAME_SAMPLES
NO_STOP = Sampling(temperature=1.0, top_p=0.9, max_frames=0)
"""Upstream's command-line sampler with `<|im_end|>` masked out: every run makes exactly `frames` frames."""


def one_run(model, tokenizer, prompt: np.ndarray, frames: int, seed: int) -> tuple[float, float, int]:
    """(prefill seconds, total seconds, frames made) of one `generate_frames` call."""
    sampler = make_sampler(model, NO_STOP, make_generator(seed), tokenizer.im_end_id, ignore_eos=True)
    t0 = time.perf_counter()
    first = None
    kept = 0
    for _ in generate_frames(model, prompt, sampler, max_new_tokens=frames):
        if first is None:
            first = time.perf_counter()
        kept += 1
    end = time.perf_counter()
    # the loop makes one frame per slow step; the last one is dropped, so `kept + 1` frames were made
    return (first or end) - t0, end - t0, kept + 1


def bench(size: str, folder: Path, args: argparse.Namespace) -> None:
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.precision, device)
    write_demo_model(folder, seed=1, size=size)
    tokenizer = S2Tokenizer.from_file(folder / "tokenizer.json")
    model = load_dual_ar(folder, device=device, dtype=dtype,
                         semantic_range=(tokenizer.semantic_begin_id, tokenizer.semantic_end_id),
                         im_end_id=tokenizer.im_end_id)
    ensure_caches(model)
    codes = np.random.default_rng(0).integers(0, 1024, size=(10, args.reference_frames)).astype(np.int64)
    prompt = build_prompt(tokenizer, [Reference("<|speaker:0|>A reference clip of a voice, read aloud.", codes)],
                          [], TEXT, model.config.num_codebooks)
    params = sum(p.numel() for p in model.parameters())
    one_run(model, tokenizer, prompt, min(args.frames, 8), seed=0)  # warm-up: kernels, allocator
    runs = [one_run(model, tokenizer, prompt, args.frames, seed=i + 1) for i in range(args.runs)]
    prefill = statistics.median(r[0] for r in runs)
    decode = statistics.median((r[2] - 1) / (r[1] - r[0]) for r in runs)
    overall = statistics.median(r[2] / r[1] for r in runs)
    print(f"{size:5s} {params / 1e6:7.1f} M  prompt {prompt.shape[1]:5d} tok  frames {runs[0][2]:4d}  "
          f"prefill {prefill * 1000:7.1f} ms  decode {decode:7.1f} frames/s (x{decode / FRAMES_PER_SECOND:.2f} "
          f"real time)  overall {overall:7.1f} frames/s", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", nargs="+", default=["tiny", "mid"], choices=[s for s in SIZES if s != "s2pro"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--frames", type=int, default=64, help="frames per run, the dropped last one included")
    p.add_argument("--reference-frames", type=int, default=215, help="reference length in frames (215 = 10 s)")
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args(argv)
    set_threads(args.threads)
    print(f"torch {torch.__version__}, device {args.device}, {args.precision}, "
          f"{torch.get_num_threads()} thread(s), python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="lm-speed-") as tmp:
        for size in args.sizes:
            bench(size, Path(tmp) / size, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
