"""Frames/s of the independent reference port on a demo model folder; driven by `bench/frame_speed.py`.

Dev-only, run with the side venv that has `mizuoto-fishspeech`:

    .venv-ref/bin/python tools/port_frame_speed.py FOLDER PROMPT.npy --frames N --runs R --seed S [--threads T]

It loads the folder with the port (as `tools/make_lm_goldens.py` does), runs the port's own `Decoder.generate` on
the given prompt matrix with `<|im_end|>` masked out of its sampler (so every run makes exactly N frames, as the
bench does for our paths) and prints one JSON line: the median decode frames/s (frames after the first over the
time after the first) and the median time to the first frame. Nothing of the port is copied; it is only called.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_lm_goldens import load_port  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("folder", type=Path)
    p.add_argument("prompt", type=Path)
    p.add_argument("--frames", type=int, default=64)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    from mizuoto_fishspeech import generate as gen

    tokenizer, model = load_port(args.folder)
    im_end = tokenizer.token_to_id("<|im_end|>")
    prompt = torch.from_numpy(np.load(args.prompt)).to(torch.int)
    results = []
    for run in range(args.runs + 1):  # the first run warms up
        decoder = gen.Decoder(model, im_end)
        decoder.start(gen.Sampling(temperature=1.0, top_p=0.9, max_new_tokens=args.frames),
                      torch.Generator().manual_seed(args.seed + run), check=lambda: None)
        decoder.bias[0, 0, im_end] = float("-inf")  # never stop early
        marks: list[float] = []
        t0 = time.perf_counter()
        with torch.inference_mode():
            y = decoder.generate(prompt, progress=lambda done, total: marks.append(time.perf_counter()))
        end = time.perf_counter()
        made = y.shape[1] - prompt.shape[1]
        first = marks[0] if marks else end
        if run:
            results.append(((made - 1) / (end - first), first - t0, made))
    print(json.dumps({"decode_fps": statistics.median(r[0] for r in results),
                      "first_frame_s": statistics.median(r[1] for r in results),
                      "frames": results[0][2], "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
