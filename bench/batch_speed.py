"""Frames/s of many streams at once on the CPU fast path: `python bench/batch_speed.py`.

A benchmark, not a test: it prints figures and asserts nothing. For each model, B = 1, 2, 4, 8 and 16 streams decode
side by side in one run, their samples interleaved round by round so that they share the machine's load (the best
of `--rounds` samples per B; the machine this was written on is shared and drifts):

- S2 Pro's shape with random weights, `--layers` of the 36 slow layers built (and all 4 fast layers), narrowed to
  bf16, int8 and int4 as the engine loads them on the CPU; the slow step's time per built layer (the head's and
  the embedding's small share with it) is scaled to 36 layers;
- the mid demo model as the engine's CPU fast path loads it (float32 activations, bf16 weights).

B = 1 is today's batch-1 path (`FastDecoder`, `FastSampler.frame`, one slow step); B >= 2 is `BatchDecoder.step`
(each stream's main token, the fast transformer's passes for all streams at once, one slow step for all). Printed
per B: aggregate frames/s (B / seconds per step), per-stream frames/s (1 / seconds per step), and both against B =
1 (wall time); the process's CPU time per frame (all its threads: on a machine shared with other work it varies
less than wall time, and says what a frame costs) and the linear layers' multiply-adds per CPU second (once the
multiplies, not the reads of the weights, bound a step, this stops growing with B); then the split of a step at B =
1 and 16 (each stream's main token, the fast transformer's passes, the slow step), where the time goes. Each part's
time is the best of the rounds on its own.
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
from s2studio.settings import Sampling
from s2studio.engine.s2 import memory  # noqa: E402
from s2studio.engine.s2.batch import BatchDecoder  # noqa: E402
from s2studio.engine.s2.fast import FastDecoder  # noqa: E402
from s2studio.engine.s2.generate import make_generator  # noqa: E402
from s2studio.engine.s2.setup import load_runtime  # noqa: E402
from s2studio.engine.weights import cpu_gemv  # noqa: E402
from s2studio.engine.weights.narrow import narrow_linears  # noqa: E402

BATCHES = (1, 2, 4, 8, 16)
SAMPLING = Sampling(temperature=1.0, top_p=0.9, top_k=30)
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
                self.sampler = self.decoder.sampler(SAMPLING, make_generator(1), ignore_eos=True)
                self.logits, self.hidden = self.decoder.prefill(prompt)
                self.batch = None
            else:
                self.batch = BatchDecoder(model, im_end, length=length, max_batch=streams, allowed=allowed,
                                          memory_bytes=None)
                for i in range(streams):
                    self.batch.admit(prompt, SAMPLING, make_generator(1 + i), 0, ignore_eos=True)
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


PARTS = ("main tokens", "fast part", "slow step")
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def instrument(runs: Streams) -> Callable[[], None]:
    """Time the parts of a step into `runs.parts` (seconds of each clock per part); returns the undo."""
    runs.parts = {(clock, part): 0.0 for clock in CLOCKS for part in PARTS}
    if runs.batch is None:
        wrap = [(runs.sampler, "next_main", "main tokens"), (runs.sampler, "codes", "fast part"),
                (runs.decoder, "step", "slow step")]
    else:
        b = runs.batch
        wrap = [*((stream.sampler, "next_main", "main tokens") for stream in b.streams.values()),
                (b, "_fast_codes", "fast part"), (b, "_slow_step", "slow step")]
    for owner, name, part in wrap:
        original = getattr(owner, name)

        def timed_call(*a, _f=original, _part=part, **k):
            start = {clock: now() for clock, now in CLOCKS.items()}
            try:
                return _f(*a, **k)
            finally:
                for clock, now in CLOCKS.items():
                    runs.parts[clock, _part] += now() - start[clock]

        setattr(owner, name, timed_call)

    def undo() -> None:
        for owner, name, _ in wrap:
            delattr(owner, name)

    return undo


def measure(model, prompt: torch.Tensor, steps: int, rounds: int, context: int, slow_layers: int | None = None
            ) -> dict[str, dict[int, dict[str, float]]]:
    """Seconds per step of each part, for each B and clock: the best of `rounds` samples of `steps` steps, the Bs
    interleaved round by round. `slow_layers`: the depth to scale the slow step to (its time per built layer, the
    head's and the embedding's small share included), for a model built with fewer."""
    runs = {b: Streams(model, b, prompt, context + steps * (rounds + 1)) for b in BATCHES}
    best = {clock: {b: dict.fromkeys(PARTS, float("inf")) for b in BATCHES} for clock in CLOCKS}
    for _ in range(rounds):
        for b, r in runs.items():
            undo = instrument(r)
            try:
                for _ in range(steps):
                    r.step()
            finally:
                undo()
            for (clock, part), t in r.parts.items():
                best[clock][b][part] = min(best[clock][b][part], t / steps)
    scale = 1.0 if slow_layers is None else slow_layers / len(model.layers)
    for clock in CLOCKS:
        for b in BATCHES:
            best[clock][b]["slow step"] *= scale
    del runs
    gc.collect()
    return best


def per_step(parts: dict[str, float]) -> float:
    return sum(parts.values())


def frame_multiply_adds(config, slow_layers: int) -> int:
    """Multiply-adds in the linear layers of one stream's frame: the slow stack and its head (narrowed to the
    semantic ids), then the fast stack over its K positions and its output layer at each of the K - 1 draws."""
    semantic = config.semantic_end_id - config.semantic_begin_id + 1
    slow = slow_layers * memory.layer_linear_params(config.slow) + semantic * config.slow.dim
    fast = (config.num_codebooks * config.fast.n_layer * memory.layer_linear_params(config.fast)
            + (config.num_codebooks - 1) * config.codebook_size * config.fast.dim)
    return slow + fast


def report(name: str, best: dict[str, dict[int, dict[str, float]]], macs: int) -> None:
    wall = {b: per_step(parts) for b, parts in best["wall"].items()}
    cpu = {b: per_step(parts) for b, parts in best["cpu"].items()}
    base = 1 / wall[1]
    print(f"  {name}")
    print("    B                 " + "".join(f"{b:>10}" for b in BATCHES))
    print("    aggregate fr/s    " + "".join(f"{b / wall[b]:10.2f}" for b in BATCHES))
    print("      vs B=1          " + "".join(f"{(b / wall[b]) / base:9.2f}x" for b in BATCHES))
    print("    per stream fr/s   " + "".join(f"{1 / wall[b]:10.2f}" for b in BATCHES))
    print("      vs B=1          " + "".join(f"{(1 / wall[b]) / base:9.2f}x" for b in BATCHES))
    print("    aggregate RTF     " + "".join(f"{wall[b] * FPS_AUDIO / b:10.2f}" for b in BATCHES))
    print("    CPU s per frame   " + "".join(f"{cpu[b] / b:10.3f}" for b in BATCHES))
    print("      B=1 / B         " + "".join(f"{cpu[1] / (cpu[b] / b):9.2f}x" for b in BATCHES))
    print("    G mult-adds/CPU s " + "".join(f"{b * macs / cpu[b] / 1e9:10.1f}" for b in BATCHES))
    for b in (1, BATCHES[-1]):
        print(f"    a step at B={b}: " + ", ".join(f"{part} {best['wall'][b][part] * 1000:.1f} ms "
                                                 f"({best['cpu'][b][part] * 1000:.1f} CPU)" for part in PARTS))


def s2_rows(args: argparse.Namespace) -> dict[str, dict[str, dict[int, dict[str, float]]]]:
    prompt = torch.zeros(11, args.prompt, dtype=torch.long)
    prompt[0] = torch.arange(args.prompt) % 4000 + 1000
    out = {}
    for mode in args.modes:
        model = random_s2(args.layers)
        narrow_linears(model, mode)
        model.to(torch.float32)  # activations in float32, as the engine's CPU fast path runs them
        gc.collect()
        out[mode] = measure(model, prompt, args.steps, args.rounds, args.context, slow_layers=36)
        report(f"S2 Pro shape, {mode} weights ({args.layers} of 36 slow layers built, the slow step scaled to 36)",
               out[mode], frame_multiply_adds(model.config, 36))
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
    report(f"mid demo model ({runtime.info.precision})",
           measure(runtime.model, prompt, args.mid_steps, args.rounds, args.context),
           frame_multiply_adds(runtime.model.config, runtime.model.config.slow.n_layer))


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
        print("  S2 shape: B=8's aggregate frames/s vs B=1's (target), B=4's per stream vs B=1's (target 0.6x); "
              "wall time [CPU time]")
        for mode, best in rows.items():
            wall = {b: per_step(parts) for b, parts in best["wall"].items()}
            cpu = {b: per_step(parts) for b, parts in best["cpu"].items()}
            print(f"    {mode}: {wall[1] / wall[8] * 8:.2f}x ({TARGETS[mode]:.0f}x) [{cpu[1] / cpu[8] * 8:.2f}x], "
                  f"{wall[1] / wall[4]:.2f}x [{cpu[1] / cpu[4]:.2f}x]")
    if not args.skip_mid:
        mid_row(args)
    print(f"load {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
