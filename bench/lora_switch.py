"""What switching a voice's LoRA costs the engine: `python bench/lora_switch.py [--sizes tiny mid] [--runs 5]`.

A benchmark, not a test: it prints figures and asserts nothing. A studio render that mixes a voice carrying a
LoRA with other voices merges that LoRA into the model before its lines and goes back to the base weights (or
to another voice's LoRA) before theirs (`engine/weights/lora_apply.py`). For each random demo model size it
loads the runtime as the studio does (`load_runtime`, CPU, each `--precision`), writes two random
`r_8_alpha_16`-shaped LoRAs, and times `Runtime.use_lora`:

- first merge: the first switch, which also reads the base weights of the touched layers from the checkpoint,
- to base / merge / LoRA to LoRA: the median of `--runs` switches once the base weights are kept,
- kept base MB: the extra memory the kept base weights take.

Measured 2026-12-01 on the 2-core AMD EPYC (AVX2), shared (load average ~8: the times are inflated), `--runs 3`:

    size   precision loop    first merge s  to base s   merge s  LoRA->LoRA s  kept base MB
    tiny   fp32      exact           2.085      0.205     0.921         1.183           7.0
    tiny   bf16      fast            0.875      0.130     0.902         1.005           7.0
    mid    fp32      exact          13.296      2.600    12.607        13.594         121.6
    mid    bf16      fast           10.119      6.665    13.815        10.886         121.6

A profile of the mid merge: ~60 % in the float32 merge itself (`lora.merged_weight`, the product and the add
over every target, the embeddings of S2's vocabulary the largest), ~30 % in dtype casts (bfloat16 base to
float32 and back, as the exported model.pth rounds), ~10 % copying into the layers. The engine switches only
when consecutive lines' LoRAs differ, so a script pays it per change of voice, not per line.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from s2studio.demo_model import write_demo_model
from s2studio.engine.s2.setup import load_runtime
from s2studio.model.config import load_config
from s2studio.train.presets import lora_targets, preset_named


def random_lora(model: Path, path: Path, seed: int) -> Path:
    preset = preset_named("r_8_alpha_16")
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for t in lora_targets(load_config(model), preset):
        out[f"{t.path}.lora_A"] = torch.randn(preset.r, t.n_in, generator=gen) * 0.02
        out[f"{t.path}.lora_B"] = torch.randn(t.n_out, preset.r, generator=gen) * 0.02
    save_file(out, str(path))
    return path


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", default=["tiny", "mid"])
    p.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"LoRA switch (r_8_alpha_16 on every target), CPU, {args.threads} threads, median of {args.runs}")
    print(f"{'size':6} {'precision':9} {'loop':6} {'first merge s':>14} {'to base s':>10} {'merge s':>9} "
          f"{'LoRA->LoRA s':>13} {'kept base MB':>13}")
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            model = write_demo_model(Path(tmp) / size, seed=1, size=size)
            one, two = random_lora(model, Path(tmp) / f"{size}-1.safetensors", 1), random_lora(
                model, Path(tmp) / f"{size}-2.safetensors", 2)
            for precision in args.precisions:
                rt = load_runtime(model, device="cpu", precision=precision, threads=args.threads)
                first = timed(lambda: rt.use_lora(one))
                base, merge, swap = [], [], []
                for _ in range(args.runs):
                    base.append(timed(lambda: rt.use_lora(None)))
                    merge.append(timed(lambda: rt.use_lora(one)))
                    swap.append(timed(lambda: rt.use_lora(two)))
                    rt.use_lora(one)
                kept = sum(t.numel() * t.element_size() for t in rt.lora.base.values()) / 2**20
                print(f"{size:6} {precision:9} {type(rt.decoder).__name__.removesuffix('Decoder').lower():6} {first:14.3f} "
                      f"{statistics.median(base):10.3f} {statistics.median(merge):9.3f} "
                      f"{statistics.median(swap):13.3f} {kept:13.1f}")
                del rt


if __name__ == "__main__":
    main()
