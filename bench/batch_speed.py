"""Frames/s of many streams at once on the CPU fast path: `python bench/batch_speed.py`.

A benchmark, not a test: it prints figures and asserts nothing. For each model, B = 1, 2, 4 and 8 streams decode
side by side in one run, their samples interleaved round by round so that they share the machine's load (the best
of `--rounds` samples per B; the machine this was written on is shared and drifts):

- S2 Pro's shape with random weights, `--layers` of the 36 slow layers built (and all 4 fast layers), narrowed to
  bf16, int8 and int4 as the engine loads them on the CPU; each step is timed at that depth and at half of it and
  scaled to 36 layers, as `bench/end_to_end.py` does;
- the mid demo model as the engine's CPU fast path loads it (float32 activations, bf16 weights).

B = 1 is today's batch-1 path (`FastDecoder`, `FastSampler.frame`, one slow step); B >= 2 is `BatchDecoder.step`
(each stream's main token, the fast transformer's passes for all streams at once, one slow step for all). Printed
per B: aggregate frames/s (B / seconds per step), per-stream frames/s (1 / seconds per step), and both against B =
1 (wall time); the process's CPU time per frame (all its threads: on a machine shared with other work it varies
far less than wall time, and says what a frame costs); then the split of a step at B = 1 and 8 (the main tokens,
the fast part, the slow step), where the time goes.
S2 speaks 21.53 frames per second of audio. `<|im_end|>` is left out of the sampler so that no stream stops.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from s2studio.threads import prepare_threads  # noqa: E402

prepare_threads()  # as the studio and the CLI run: passive OpenMP waits (before torch is imported)

import torch  # noqa: E402

from frame_speed import random_s2  # noqa: E402

from s2studio.demo_model import write_demo_model  # noqa: E402
from s2studio.engine.api import SamplingParams  # noqa: E402
from s2studio.engine.s2.batch import BatchDecoder  # noqa: E402
from s2studio.engine.s2.fast import FastDecoder  # noqa: E402
from s2studio.engine.s2.generate import make_generator  # noqa: E402
from s2studio.engine.s2.setup import load_runtime  # noqa: E402
from s2studio.engine.weights import cpu_gemv  # noqa: E402
from s2studio.engine.weights.narrow import narrow_linears  # noqa: E402

BATCHES = (1, 2, 4, 8)
SAMPLING = SamplingParams(temperature=1.0, top_p=0.9, top_k=30, ignore_eos=True)
FPS_AUDIO = 44100 / 2048
TARGETS = {"bf16": 4.0, "int8": 3.0, "int4": 2.0}
"""S2 shape: B = 8's aggregate frames/s at least this many times B = 1's (and per stream at B = 4 >= 0.6x)."""


class Streams:
    """B streams of one prompt (other seeds) on `model`, prefilled and stepped once: `step()` makes one frame of each.
    B = 1 runs today's batch-1 path; more, `BatchDecoder`."""

    def __init__(self, model, streams: int, prompt: torch.Tensor, context: int) -> None:
        c = model.config
        allowed = torch.arange(c.semantic_begin_id, c.semantic_end_id + 1)
        im_end = c.im_end_id if c.im_end_id is not None else c.semantic_begin_id - 1
        length = prompt.shape[1] + context
        self.parts: dict[str, float] = {}
        with torch.inference_mode():
            if streams == 1:
                self.decoder = FastDecoder(model, im_end, length=length, allowed=allowed)
                self.sampler = self.decoder.sampler(SAMPLING, make_generator(1))
                self.logits, self.hidden = self.decoder.prefill(prompt)
                self.batch = None
            else:
                self.batch = BatchDecoder(model, im_end, length=length, max_batch=streams, allowed=allowed,
                                          memory_bytes=None)
                for i in range(streams):
                    self.batch.admit(prompt, SAMPLING, make_generator(1 + i), 0)
                while self.batch.waiting:
                    self.batch.prefill()
            self.step()

    def step(self) -> None:
        with torch.inference_mode():
            if self.batch is not None:
                self.batch.step()
                return
            frame = self.sampler.frame(self.logits, self.hidden)
            self.logits, self.hidden = self.decoder.step(frame.to(torch.long))

    def slots(self) -> list:
        return [self.decoder] if self.batch is None else [d for d in self.batch.slots if d is not None]


def timed(fn: Callable[[], None], steps: int) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) per call of `fn`, over `steps` calls."""
    t, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - t) / steps, (time.process_time() - cpu) / steps


def split(model, runs: Streams, steps: int) -> dict[str, float]:
    """Seconds per step spent in the main tokens, the fast part and the slow step (instrumented calls)."""
    spent = {"main tokens": 0.0, "fast part": 0.0, "slow step": 0.0}
    if runs.batch is None:
        d, s = runs.decoder, runs.sampler
        wrap = [(s, "next_main", "main tokens"), (s, "codes", "fast part"), (d, "step", "slow step")]
    else:
        b = runs.batch
        samplers = [stream.sampler for stream in b.streams.values()]
        wrap = [*((s, "next_main", "main tokens") for s in samplers), (b, "_fast_codes", "fast part"),
                (b, "_slow_step", "slow step")]
    originals = []
    for owner, name, part in wrap:
        original = getattr(owner, name)
        originals.append((owner, name))

        def timed_call(*a, _f=original, _part=part, **k):
            t = time.perf_counter()
            try:
                return _f(*a, **k)
            finally:
                spent[_part] += time.perf_counter() - t

        setattr(owner, name, timed_call)
    try:
        for _ in range(steps):
            runs.step()
    finally:
        for owner, name in originals:
            delattr(owner, name)
    return {part: t / steps for part, t in spent.items()}


def measure(model, prompt: torch.Tensor, steps: int, rounds: int, context: int,
            half: Callable[[list[Streams]], Callable[[], None]] | None = None
            ) -> tuple[dict[str, dict[int, float]], dict[int, dict[str, float]]]:
    """Seconds per step for each B, of wall time and of the process's CPU time (each the best of `rounds` samples,
    interleaved; with `half`, the step at half the slow layers is timed beside it and the step scaled to 36 slow
    layers), and the split of a step at B = 1 and 8 (wall time)."""
    runs = {b: Streams(model, b, prompt, context + steps * (rounds + 2) * 2) for b in BATCHES}
    best_full = {clock: {b: float("inf") for b in BATCHES} for clock in ("wall", "cpu")}
    best_half = {clock: {b: float("inf") for b in BATCHES} for clock in ("wall", "cpu")}
    for _ in range(rounds):
        for b, r in runs.items():
            for clock, t in zip(("wall", "cpu"), timed(r.step, steps), strict=True):
                best_full[clock][b] = min(best_full[clock][b], t)
            if half is not None:
                restore = half([r])
                try:
                    for clock, t in zip(("wall", "cpu"), timed(r.step, steps), strict=True):
                        best_half[clock][b] = min(best_half[clock][b], t)
                finally:
                    restore()
    out = {}
    for clock, full in best_full.items():
        if half is None:
            out[clock] = full
            continue
        built = len(model.layers)
        out[clock] = {}
        for b in BATCHES:
            per_layer = (full[b] - best_half[clock][b]) / (built - built // 2)
            if per_layer <= 0:
                per_layer = full[b] / built
            out[clock][b] = full[b] + (36 - built) * per_layer
    splits = {b: split(model, runs[b], steps) for b in (1, 8)}
    del runs
    gc.collect()
    return out, splits


def halver(model) -> Callable[[list[Streams]], Callable[[], None]]:
    """Run the streams on the first half of the slow layers (each slot's caches with them) until restored."""
    layers = model.layers
    short = layers[: len(layers) // 2]
    halves: dict[int, list] = {}  # the same list objects every time: the C++ stacks built for them are kept

    def half(runs: list[Streams]) -> Callable[[], None]:
        kept = []
        for r in runs:
            for d in r.slots():
                kept.append((d.caches, d.caches.slow))
                d.caches.slow = halves.setdefault(id(d.caches), d.caches.slow[: len(short)])
        model.layers = short

        def restore() -> None:
            model.layers = layers
            for caches, slow in kept:
                caches.slow = slow

        return restore

    return half


def report(name: str, clocks: dict[str, dict[int, float]], splits: dict[int, dict[str, float]],
           scaled_note: str = "") -> None:
    print(f"  {name}{scaled_note}")
    print("    B                 " + "".join(f"{b:>10}" for b in BATCHES))
    per_step = clocks["wall"]
    base = 1 / per_step[1]
    print("    aggregate fr/s    " + "".join(f"{b / per_step[b]:10.2f}" for b in BATCHES))
    print("      vs B=1          " + "".join(f"{(b / per_step[b]) / base:9.2f}x" for b in BATCHES))
    print("    per stream fr/s   " + "".join(f"{1 / per_step[b]:10.2f}" for b in BATCHES))
    print("      vs B=1          " + "".join(f"{(1 / per_step[b]) / base:9.2f}x" for b in BATCHES))
    print("    aggregate RTF     " + "".join(f"{per_step[b] * FPS_AUDIO / b:10.2f}" for b in BATCHES))
    cpu = clocks["cpu"]
    print("    CPU s per frame   " + "".join(f"{cpu[b] / b:10.3f}" for b in BATCHES))
    print("      B=1 / B         " + "".join(f"{cpu[1] / (cpu[b] / b):9.2f}x" for b in BATCHES))
    for b, parts in splits.items():
        print(f"    a step at B={b}: " + ", ".join(f"{part} {t * 1000:.1f} ms" for part, t in parts.items()))


def s2_rows(args: argparse.Namespace) -> dict[str, dict[str, dict[int, float]]]:
    prompt = torch.zeros(11, args.prompt, dtype=torch.long)
    prompt[0] = torch.arange(args.prompt) % 4000 + 1000
    out = {}
    for mode in args.modes:
        model = random_s2(args.layers)
        narrow_linears(model, mode)
        model.to(torch.float32)  # activations in float32, as the engine's CPU fast path runs them
        gc.collect()
        out[mode], splits = measure(model, prompt, args.steps, args.rounds, args.context, halver(model))
        report(f"S2 Pro shape, {mode} weights", out[mode], splits,
               f" ({args.layers} of 36 slow layers built, scaled to 36; a step's split at the built depth)")
        del model
        gc.collect()
    return out


def mid_row(args: argparse.Namespace) -> None:
    folder = Path(args.mid) if args.mid else write_demo_model(Path("/tmp") / f"s2-batch-mid-{os.getuid()}",
                                                              size="mid", seed=0, codec=False)
    runtime = load_runtime(folder, device="cpu", precision="fp32", speed="fast", codec=False,
                           threads=args.threads)
    prompt = torch.zeros(11, args.prompt, dtype=torch.long)
    prompt[0] = torch.arange(args.prompt) % 400 + 100
    per_step, splits = measure(runtime.model, prompt, args.mid_steps, args.rounds, args.context)
    report(f"mid demo model ({runtime.info.precision})", per_step, splits)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--layers", type=int, default=4, help="slow layers built at S2's size (of 36)")
    p.add_argument("--modes", nargs="*", default=["bf16", "int8", "int4"])
    p.add_argument("--steps", type=int, default=2, help="S2 shape: steps per sample")
    p.add_argument("--mid-steps", type=int, default=10, help="mid model: steps per sample")
    p.add_argument("--rounds", type=int, default=3, help="samples per B (the best is printed)")
    p.add_argument("--prompt", type=int, default=48, help="prompt columns")
    p.add_argument("--context", type=int, default=64, help="positions of room in each stream's cache")
    p.add_argument("--mid", help="a mid demo model folder (default: written to /tmp)")
    p.add_argument("--skip-s2", action="store_true")
    p.add_argument("--skip-mid", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, kernels {cpu_gemv.kernel_path()}, {args.threads} thread(s), "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    if not args.skip_s2:
        rows = s2_rows(args)
        print("  S2 shape, B=8 aggregate vs B=1 (target) and B=4 per stream vs B=1 (target 0.6x), wall time; "
              "[CPU time]:")
        for mode, clocks in rows.items():
            wall, cpu = clocks["wall"], clocks["cpu"]
            print(f"    {mode}: {wall[1] / wall[8] * 8:.2f}x ({TARGETS[mode]:.0f}x), {wall[1] / wall[4]:.2f}x "
                  f"[{cpu[1] / cpu[8] * 8:.2f}x]")
    if not args.skip_mid:
        mid_row(args)
    print(f"load {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
