"""Codec decode speed: full vs incremental, exact vs non-exact, tiny vs S2's full-size codec (random weights).

    .venv/bin/python bench/codec_speed.py [--device cpu|cuda] [--sizes tiny,full] [--frames N] [--threads T]
                                          [--chunk C] [--far F]

Prints, per size: seconds of audio decoded per second of wall time for a full decode and for both incremental
decoders (the exact one, the Exact mode's, and `exact=False`, every other mode's) at 1 and `--chunk` frames per
push, with how far their samples are from the full decode's; then the time per frame of a push of `--chunk`
frames (the engine's) at frame 10, 100 and `--far` (1000) of a sequence, both decoders side by side, their pushes
interleaved so that they share the machine's load (read the ratio on a busy machine). The incremental decoders
keep a bounded state, so the three figures of each should be about equal (flat); if they grow with the frame
index, something re-decodes the past. A script, not a test: figures vary by machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from s2studio.threads import prepare_threads  # noqa: E402

prepare_threads()  # as the studio and the CLI run: passive OpenMP waits (before torch is imported)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

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


MODES = {True: "exact", False: "non-exact"}


def bench(size: str, frames: int, device: torch.device, chunk: int, far: int) -> None:
    config = SIZES[size]
    codec = random_codec(config, device)
    seconds_per_frame = config.frame_length / config.sample_rate
    c = codes(config, max(frames, far + 3 * chunk + 10), device)
    audio_s = frames * seconds_per_frame
    codec.decode(c[:, :4][None])  # warm-up: kernels, RoPE table
    out: list = []
    full = timed(lambda: out.append(codec.decode(c[:, :frames][None]).reshape(-1).cpu().numpy()), device)
    print(f"{size}: full decode of {frames} frames ({audio_s:.1f} s): {audio_s / full:7.2f} s audio/s")
    for exact in MODES:
        for push in (1, chunk):
            IncrementalDecoder(codec, exact=exact, step=chunk).push(c[:, :push + 1])  # untimed: packs weights
            dec = IncrementalDecoder(codec, exact=exact, step=chunk)
            parts: list = []

            def run() -> None:
                for i in range(0, frames, push):
                    parts.append(dec.push(c[:, i:min(i + push, frames)]))

            t = timed(run, device)
            streamed = np.concatenate(parts)
            lsb = np.abs(pcm16(streamed).astype(np.int32) - pcm16(out[0]).astype(np.int32))
            print(f"{size}: {MODES[exact]:9s} incremental, {push} frame(s) per push: {audio_s / t:7.2f} s audio/s; "
                  f"vs full decode: max |Δ| {np.abs(streamed - out[0]).max():.1e}, PCM16 1 LSB on "
                  f"{np.count_nonzero(lsb) / lsb.size:.3%} (max {lsb.max()} LSB)")
    decoders = {exact: IncrementalDecoder(codec, exact=exact, step=chunk) for exact in MODES}
    at: dict[bool, dict[int, float]] = {exact: {} for exact in MODES}
    flops = {}
    for target in (10, 100, far):
        times: dict[bool, list[float]] = {exact: [] for exact in MODES}
        for exact, dec in decoders.items():
            while dec.frames < target - 2 * chunk:  # catch up in long pushes (untimed)
                dec.push(c[:, dec.frames:min(target - 2 * chunk, dec.frames + 64)])
            if exact:
                with FlopCounterMode(display=False) as counter:  # machine-independent: the exact decoder's work
                    dec.push(c[:, dec.frames:dec.frames + chunk])
                flops[target] = counter.get_total_flops() / chunk
            else:
                dec.push(c[:, dec.frames:dec.frames + chunk])
        for _ in range(5):  # interleaved: both decoders see the same load
            for exact, dec in decoders.items():
                i = dec.frames
                times[exact].append(timed(lambda i=i, dec=dec: dec.push(c[:, i:i + chunk]), device) / chunk)
        for exact in MODES:
            at[exact][target] = statistics.median(times[exact])
    targets = (10, 100, far)
    for exact in MODES:
        print(f"{size}: {MODES[exact]:9s} push of {chunk} at frame " + " / ".join(map(str, targets)) + ": "
              + " / ".join(f"{at[exact][k] * 1000:.1f}" for k in targets) + " ms a frame"
              + (f"  (real time needs < {seconds_per_frame * 1000:.1f} ms); GFLOP a frame "
                 + " / ".join(f"{flops[k] / 1e9:.3f}" for k in targets) if exact else
                 "  = " + " / ".join(f"{at[exact][k] / at[True][k]:.2f}" for k in targets) + " of the exact"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", default="tiny,full")
    parser.add_argument("--frames", type=int, default=100, help="frames decoded for the speed figures")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--chunk", type=int, default=4, help="frames per push (the engine's chunk)")
    parser.add_argument("--far", type=int, default=1000, help="the last frame index the push cost is taken at")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} CPU thread(s)")
    with torch.inference_mode():
        for size in args.sizes.split(","):
            bench(size.strip(), args.frames, device, args.chunk, args.far)


if __name__ == "__main__":
    main()
