"""Codec decode speed: full vs incremental, tiny vs S2's full-size codec (random weights).

    .venv/bin/python bench/codec_speed.py [--device cpu|cuda] [--sizes tiny,full] [--frames N] [--threads T]

Prints, per size: seconds of audio decoded per second of wall time for a full decode and for the incremental
decoder at 1 and 8 frames per push (and how far its samples are from the full decode's); then the time one
single-frame push takes at frame 10, 100 and 1000 of a sequence. The incremental decoder keeps a bounded
state, so those three figures should be about equal (flat); if they grow with the frame index, something
re-decodes the past. A script, not a test: figures vary by machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from s2studio.audio.io import pcm16  # noqa: E402
from s2studio.codec.codec import Codec  # noqa: E402
from s2studio.codec.config import S2, TINY, CodecConfig  # noqa: E402
from s2studio.codec.streaming import IncrementalDecoder  # noqa: E402

SIZES = {"tiny": TINY, "full": S2}


def random_codec(config: CodecConfig, device: torch.device) -> Codec:
    """Default PyTorch init, plus livelier alphas/layer scales so that no path is skipped in practice."""
    torch.manual_seed(0)
    with torch.device(device):
        codec = Codec(config)
    for name, p in codec.named_parameters():
        if name.endswith(("alpha", "gamma")):
            p.data.uniform_(0.5, 1.5) if name.endswith("alpha") else p.data.uniform_(0.05, 0.15)
    return codec.eval().requires_grad_(False)


def codes(config: CodecConfig, frames: int, device: torch.device) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    c = torch.randint(0, config.codebook_size, (10, frames), generator=g)
    c[0] = torch.randint(0, config.semantic_codebook_size, (frames,), generator=g)
    return c.to(device)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: torch.device) -> float:
    sync(device)
    t = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t


def bench(size: str, frames: int, device: torch.device) -> None:
    config = SIZES[size]
    codec = random_codec(config, device)
    seconds_per_frame = config.frame_length / config.sample_rate
    c = codes(config, max(frames, 1010), device)
    audio_s = frames * seconds_per_frame
    codec.decode(c[:, :4][None])  # warm-up: kernels, RoPE table
    out: list = []
    full = timed(lambda: out.append(codec.decode(c[:, :frames][None]).reshape(-1).cpu().numpy()), device)
    print(f"{size}: full decode of {frames} frames ({audio_s:.1f} s): {audio_s / full:7.2f} s audio/s")
    for chunk in (1, 8):
        dec = IncrementalDecoder(codec)
        parts: list = []

        def run() -> None:
            for i in range(0, frames, chunk):
                parts.append(dec.push(c[:, i:min(i + chunk, frames)]))

        t = timed(run, device)
        streamed = np.concatenate(parts)
        lsb = np.abs(pcm16(streamed).astype(np.int32) - pcm16(out[0]).astype(np.int32))
        print(f"{size}: incremental, {chunk} frame(s) per push:  {audio_s / t:7.2f} s audio/s;  vs full decode: "
              f"max |Δ| {np.abs(streamed - out[0]).max():.1e}, PCM16 1 LSB on {np.count_nonzero(lsb) / lsb.size:.3%}"
              f" (max {lsb.max()} LSB)")
    dec = IncrementalDecoder(codec)
    at, flops = {}, {}
    for target in (10, 100, 1000):
        while dec.frames < target - 3:  # catch up in chunks (untimed)
            dec.push(c[:, dec.frames:min(target - 3, dec.frames + 64)])
        with FlopCounterMode(display=False) as counter:  # machine-independent: the work itself
            dec.push(c[:, dec.frames:dec.frames + 1])
        flops[target] = counter.get_total_flops()
        times = []
        for _ in range(5):
            i = dec.frames
            times.append(timed(lambda i=i: dec.push(c[:, i:i + 1]), device))
        at[target] = statistics.median(times)
    print(f"{size}: one-frame push at frame 10 / 100 / 1000: "
          + " / ".join(f"{at[k] * 1000:.1f} ms" for k in (10, 100, 1000))
          + f"  (real time needs < {seconds_per_frame * 1000:.1f} ms); GFLOP per push "
          + " / ".join(f"{flops[k] / 1e9:.3f}" for k in (10, 100, 1000)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", default="tiny,full")
    parser.add_argument("--frames", type=int, default=100, help="frames decoded for the speed figures")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} CPU thread(s)")
    with torch.inference_mode():
        for size in args.sizes.split(","):
            bench(size.strip(), args.frames, device)


if __name__ == "__main__":
    main()
