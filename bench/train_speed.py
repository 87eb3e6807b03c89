"""Seconds per LoRA training step and peak memory: `python bench/train_speed.py [--sizes tiny mid] [--device cpu]`.

A benchmark, not a test: it prints figures and asserts nothing. For each random demo model size
(`s2studio.demo_model.SIZES`; `s2pro` is S2 Pro's own shape, ~9 GB, meant for a GPU in bf16) it builds a
`train.loop.Trainer` on seeded random codes (what the `tokens` stage would give: one speaker, clips of
`--frames` frames), runs `--warmup` steps, then times `--steps` steps, and reports

- s/step: the median step (batch drawn, forward with per-layer checkpointing, backward, clip, AdamW),
- peak memory: the process's peak resident set (CPU) or `torch.cuda.max_memory_allocated` (CUDA), and the
  resident set after the model and the LoRA were set up (before the first step).

Each size runs in its own process, so that one size's peak is not another's.

Measured 2026-12-01 on the 2-core AMD EPYC (AVX2) shared with three other developers (load average ~8, so
the times are several times what an idle machine gives), `--steps 3 --max-length 512`, batch 4, r_8_alpha_16:

    size   device precision   setup s   s/step    min s  RSS setup MB   peak MB
    tiny   cpu    32-true       10.10   12.927   12.633           720      1885 (rss)
    mid    cpu    32-true       15.60  171.206  141.471          1068      3951 (rss)

The demo models keep S2's vocabulary (155,776 ids), so the tied output head's logits dominate the tiny model.
No GPU was lent to this task, so S2 Pro's shape in bf16 (`--sizes s2pro --device cuda`) was not measured.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def one_size(args: argparse.Namespace) -> dict:
    import torch

    from s2studio.demo_model import write_demo_model
    from s2studio.train.data import Group, Sentence, pack_text
    from s2studio.train.loop import Trainer, TrainSettings

    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    clips = []
    for i in range(args.clips):
        c = rng.integers(0, 1024, (10, args.frames))
        c[0] = rng.integers(0, 4096, args.frames)
        clips.append(Sentence((pack_text(f"Clip number {i} of the benchmark speaker, spoken clearly."),),
                              c.astype(np.int64)))
    with tempfile.TemporaryDirectory() as tmp:
        model = write_demo_model(Path(tmp) / args.size, seed=1, size=args.size)
        settings = TrainSettings(preset=args.preset, steps=args.warmup + args.steps, batch_size=args.batch_size,
                                 max_length=args.max_length, seed=1, precision=args.precision)
        t0 = time.perf_counter()
        trainer = Trainer(model, [Group("speaker", tuple(clips))], settings, device=args.device)
        setup_s = time.perf_counter() - t0
        rss_setup = rss_mb()
        cuda = trainer.device.type == "cuda"
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        times = []
        for i in range(args.warmup + args.steps):
            m = trainer.step()
            if i >= args.warmup:
                times.append(m.seconds)
        peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else resource.getrusage(
            resource.RUSAGE_SELF).ru_maxrss / 1024
        return {"size": args.size, "device": str(trainer.device), "precision": trainer.precision,
                "preset": args.preset, "batch": args.batch_size, "max_length": args.max_length,
                "setup_s": setup_s, "s_per_step": statistics.median(times), "min_s": min(times),
                "rss_after_setup_mb": rss_setup, "peak_mb": peak, "peak_kind": "cuda allocated" if cuda else "rss"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", default=["tiny", "mid"])
    p.add_argument("--size", help=argparse.SUPPRESS)  # one size, in the child process
    p.add_argument("--preset", default="r_8_alpha_16")
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="auto")
    p.add_argument("--batch-size", type=int, default=4, help="samples per step (upstream: 4)")
    p.add_argument("--max-length", type=int, default=1024, help="tokens per sample (upstream: 4096)")
    p.add_argument("--clips", type=int, default=6, help="clips of the speaker")
    p.add_argument("--frames", type=int, default=200, help="frames per clip (~9 s of speech)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    if args.size:
        print(json.dumps(one_size(args)))
        return
    print(f"LoRA training step, {args.preset}, batch {args.batch_size}, max length {args.max_length}, "
          f"{args.clips} clips x {args.frames} frames, {args.threads} threads, median of {args.steps} steps")
    print(f"{'size':6} {'device':6} {'precision':10} {'setup s':>8} {'s/step':>8} {'min s':>8} "
          f"{'RSS setup MB':>13} {'peak MB':>9}")
    for size in args.sizes:
        out = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--size", size], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{size:6} failed: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{r['size']:6} {r['device']:6} {r['precision']:10} {r['setup_s']:8.2f} {r['s_per_step']:8.3f} "
              f"{r['min_s']:8.3f} {r['rss_after_setup_mb']:13.0f} {r['peak_mb']:9.0f} ({r['peak_kind']})")


if __name__ == "__main__":
    main()
