"""Would a batched codec decode pay? B streams' new frames decoded in one codec call against B calls, side by side.

    .venv/bin/python bench/codec_batch.py [--device cpu|cuda] [--size full|tiny] [--frames 4] [--batches 1,2,4,8]
                                          [--repeats 5]

The scheduler decodes each stream's frames as they come (`codec/streaming.py`: one `IncrementalDecoder` a stream,
a push of a few frames per step). A batched decode would run the B streams' pushes as one call of batch B. This
script measures what that could gain before anything is built: S2's full-size codec (random weights) decoding
`--frames` frames for each of B streams, as B calls of batch 1 and as one call of batch B, their repeats
interleaved so that they share the machine's load (read the ratio), and the engine's own path beside them (B
incremental decoders, one push of `--frames` each, the non-exact decode every mode but Exact uses). Then how far a
stream's samples in the batch are from the same stream decoded alone (PCM16 samples off, the largest difference):
the streaming codec's bound is 1 LSB on at most 0.5 % of the samples. A script, not a test: figures vary by machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from s2studio.threads import prepare_threads  # noqa: E402

prepare_threads()

import numpy as np  # noqa: E402
import torch  # noqa: E402

from codec_speed import SIZES, codes, random_codec, sync  # noqa: E402
from s2studio.audio.io import pcm16  # noqa: E402
from s2studio.codec.streaming import IncrementalDecoder  # noqa: E402


def streams_codes(config, batch: int, frames: int, device: torch.device) -> torch.Tensor:
    """(B, 10, frames): each stream its own codes (a window of one long random sequence)."""
    long = codes(config, batch * frames, device)
    return torch.stack([long[:, i * frames:(i + 1) * frames] for i in range(batch)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--size", default="full", choices=sorted(SIZES))
    parser.add_argument("--frames", type=int, default=4, help="frames a stream brings per step (the engine's push)")
    parser.add_argument("--batches", default="1,2,4,8")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    device = torch.device(args.device)
    config = SIZES[args.size]
    codec = random_codec(config, device)
    print(f"{args.size} codec on {device} ({torch.get_num_threads()} threads), {args.frames} frames a stream a step")
    print(f"{'B':>3} {'B calls ms':>11} {'1 call ms':>10} {'gain':>6} {'engine ms':>10}  {'PCM16 off':>10} {'max':>4}")
    with torch.inference_mode():
        for batch in (int(b) for b in args.batches.split(",")):
            c = streams_codes(config, batch, args.frames, device)
            codec.decode(c), codec.decode(c[:1])  # warm-up (oneDNN picks its kernels per shape)
            decoders = [IncrementalDecoder(codec, exact=False) for _ in range(batch)]
            for d, row in zip(decoders, c, strict=True):
                d.push(row)  # past the first push, as in a running stream
            apart, together, engine = [], [], []
            for _ in range(args.repeats):
                sync(device)
                t0 = time.perf_counter()
                alone = [codec.decode(c[i:i + 1]) for i in range(batch)]
                sync(device)
                t1 = time.perf_counter()
                batched = codec.decode(c)
                sync(device)
                t2 = time.perf_counter()
                for d, row in zip(decoders, c, strict=True):
                    d.push(row)
                sync(device)
                t3 = time.perf_counter()
                apart.append(t1 - t0)
                together.append(t2 - t1)
                engine.append(t3 - t2)
            a = pcm16(torch.cat(alone).reshape(-1).float().cpu().numpy()).astype(np.int32)
            b = pcm16(batched.reshape(-1).float().cpu().numpy()).astype(np.int32)
            off = np.abs(a - b)
            sep, one, eng = (statistics.median(x) * 1000 for x in (apart, together, engine))
            print(f"{batch:>3} {sep:>11.1f} {one:>10.1f} {sep / one:>5.2f}× {eng:>10.1f}  "
                  f"{np.count_nonzero(off) / off.size:>9.3%} {int(off.max()):>4}")


if __name__ == "__main__":
    main()
