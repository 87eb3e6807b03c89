"""Fast-path frames/s on an idle machine and beside busy ones: `python bench/threads_load.py`.

A benchmark, not a test: it prints figures and asserts nothing. A desktop is never idle, and OpenMP's default
(spin-waiting workers) collapses when another program takes a core (issue 18). Each row is one child process
(OpenMP reads its wait policy once, at torch's start) that loads a random demo model's fast path (bf16-stored
weights, as the engine's CPU fast path loads them) and times decode frames/s idle and beside one busy
`python -c 'while True: pass'` per usable core (started and stopped by the child around each loaded timing only),
alternating: idle, loaded, idle, ... (`--rounds` loaded timings), idle. Each figure is the median of its kind,
so a drift of the machine's own load over the row does not read as the busy processes' effect. Rows: the wait policy the studio sets (PASSIVE, `s2studio/threads.py`)
and OpenMP's default, at 1 and 2 threads.

"Idle" is the machine as it is: on a shared machine other people's work is part of it (the load is printed).
A timing stops after `--seconds` even when it has fewer than `--frames` frames (spinning under load makes a
frame take seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOG = "while True: pass"


def child(args: argparse.Namespace) -> None:
    """One row: imports torch only here, after the parent chose this process's OMP_WAIT_POLICY."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    import tempfile

    import numpy as np
    import torch
    from frame_speed import fast_decoder

    from s2studio.demo_model import write_demo_model
    from s2studio.engine.s2.fast import FastSampler, generate_frames_fast
    from s2studio.engine.s2.generate import make_generator
    from s2studio.engine.weights.checkpoints import load_dual_ar
    from s2studio.text.prompt import Reference, build_prompt
    from s2studio.text.tokenizer import S2Tokenizer

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="threads-load-") as tmp:
        folder = write_demo_model(Path(tmp) / args.size, seed=1, size=args.size, codec=False)
        tok = S2Tokenizer.from_file(folder / "tokenizer.json")
        model = load_dual_ar(folder, device=torch.device("cpu"), dtype=torch.float32, narrow="bf16",
                             semantic_range=(tok.semantic_begin_id, tok.semantic_end_id), im_end_id=tok.im_end_id)
    codes = np.random.default_rng(0).integers(0, 1024, size=(10, 215)).astype(np.int64)
    prompt = build_prompt(tok, [Reference("<|speaker:0|>A reference clip.", codes)], [],
                          "<|speaker:0|>The quick brown fox jumps over the lazy dog, and then it runs away.", 10)
    decoder = fast_decoder(model, tok, prompt.shape[1] + args.frames + 8)

    def frames_per_second(seed: int) -> float:
        sampler = FastSampler(decoder, temperature=1.0, top_p=0.9, top_k=30, generator=make_generator(seed, "cpu"))
        first, n, end = None, 0, 0.0
        for _ in generate_frames_fast(decoder, prompt, sampler, max_new_tokens=args.frames, reuse=False):
            end = time.perf_counter()
            if first is None:
                first = end
            n += 1
            if end - first > args.seconds:
                break
        return (n - 1) / (end - first) if first is not None and end > first else 0.0

    frames_per_second(0)  # warm-up: kernels built, caches allocated
    idle, busy, hogs = [frames_per_second(1)], [], len(os.sched_getaffinity(0))
    for r in range(args.rounds):  # idle, loaded, idle, loaded, ..., idle
        procs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(hogs)]
        try:
            time.sleep(0.5)  # the busy processes are running before the timing starts
            busy.append(frames_per_second(2 + 2 * r))
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
        idle.append(frames_per_second(3 + 2 * r))
    print(json.dumps({"idle": statistics.median(idle), "idle_all": idle, "loaded": statistics.median(busy),
                      "loaded_all": busy, "hogs": hogs, "load": os.getloadavg()[0]}))


def row(args: argparse.Namespace, threads: int, policy: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    out = subprocess.run([sys.executable, __file__, "--child", "--size", args.size, "--threads", str(threads),
                          "--frames", str(args.frames), "--seconds", str(args.seconds), "--rounds", str(args.rounds)],
                         env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode:
        raise SystemExit(f"child failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="mid", help="demo model size: tiny or mid")
    p.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    p.add_argument("--frames", type=int, default=64)
    p.add_argument("--seconds", type=float, default=8.0, help="longest a timing runs")
    p.add_argument("--rounds", type=int, default=2, help="loaded timings, each between two idle ones")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        args.threads = args.threads[0]
        child(args)
        return 0
    cores = len(os.sched_getaffinity(0))
    print(f"{args.size} model, fast path (bf16 weights), up to {args.frames} frames or {args.seconds:.0f} s a timing; "
          f"{cores} usable cores, one busy process per core when loaded; load {os.getloadavg()[0]:.1f} at start")
    for policy in ("PASSIVE", None):
        for threads in args.threads:
            r = row(args, threads, policy)
            name = f"OMP_WAIT_POLICY={policy}" if policy else "OpenMP's default (spin)"
            print(f"  {name:25s} {threads} thread(s): idle {r['idle']:6.1f} frames/s "
                  f"({' / '.join(f'{x:.1f}' for x in r['idle_all'])}), loaded {r['loaded']:6.1f} frames/s "
                  f"({' / '.join(f'{x:.1f}' for x in r['loaded_all'])}), "
                  f"loaded/idle {r['loaded'] / r['idle']:.2f}x  (load {r['load']:.1f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
