"""Codec decode speed: full vs incremental, exact vs non-exact, tiny vs S2's full-size codec (random weights).

    .venv/bin/python bench/codec_speed.py [--device cpu|cuda] [--sizes tiny,full] [--frames N] [--threads T]
                                          [--chunk C] [--far F] [--profile] [--no-fused] [--clock wall|cpu]

Prints, per size: seconds of audio decoded per second of wall time for a full decode and for the incremental
decoders (the exact one, the Exact mode's; `exact=False`, every other mode's, in float32 and, where the CPU
multiplies bfloat16 natively, in bfloat16, which the other modes then use; each also with the engine's fused C++
Snake, "fused", where the CPU kernels build, unless `--no-fused`) at 1 and `--chunk` frames per push,
with how far their samples are from the full decode's (PCM16 samples off, the largest difference, the SNR); then
the time per frame of a push of `--chunk` frames (the engine's) at frame 10, 100 and `--far` (1000) of a sequence,
the decoders side by side, their pushes interleaved so that they share the machine's load (read the ratios on a
busy machine; `--clock cpu` times them in the process's CPU time instead of wall time, which another job on the
machine disturbs less). The incremental decoders keep a bounded state, so the three figures of each should be about
equal (flat); if they grow with the frame index, something re-decodes the past. A script, not a test: figures vary by
machine. `--profile` prints instead where the non-exact decoders' pushes of `--chunk` frames at frame 100 spend
their time, per kind of op (each op's own time, summed over 10 pushes).
"""

from __future__ import annotations

import argparse
import os
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
from s2studio.codec import fast_stream  # noqa: E402
from s2studio.codec.config import S2, TINY, CodecConfig  # noqa: E402
from s2studio.codec.fast_stream import CodecOps, fast_dtype  # noqa: E402
from s2studio.codec.layers import (  # noqa: E402
    CausalConv, CausalTransConv, ConvNeXtBlock, Snake1d, WindowLimitedTransformer,
)
from s2studio.codec.streaming import IncrementalDecoder  # noqa: E402
from s2studio.engine.weights.cpu_codec import codec_ops  # noqa: E402

SIZES = {"tiny": TINY, "full": S2}
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCKS["wall"]


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
    t = clock()
    fn()
    sync(device)
    return clock() - t


Mode = tuple[bool, torch.dtype, CodecOps | None]
fused = True


def modes(device: torch.device) -> dict[str, Mode]:
    """name -> (exact, dtype, ops) of each decoder to time: the exact one, the non-exact one in float32, and in
    bfloat16 where this machine picks it for the non-exact modes; each non-exact one also with the engine's fused
    ops where they build (unless `--no-fused`)."""
    ops = codec_ops(device) if fused else None
    found: dict[str, Mode] = {"exact": (True, torch.float32, None)}
    for dtype in (torch.float32, torch.bfloat16):
        if dtype == torch.float32 or fast_dtype(device) == torch.bfloat16:
            name = f"non-exact {'bf16' if dtype == torch.bfloat16 else 'f32'}"
            found[name] = (False, dtype, None)
            if ops is not None:
                found[name + " fused"] = (False, dtype, ops)
    return found


def snr_db(x: np.ndarray, ref: np.ndarray) -> float:
    noise = np.sum((x.astype(np.float64) - ref) ** 2)
    return float(10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / noise)) if noise else float("inf")


def bench(size: str, frames: int, device: torch.device, chunk: int, far: int) -> None:
    config = SIZES[size]
    codec = random_codec(config, device)
    seconds_per_frame = config.frame_length / config.sample_rate
    c = codes(config, max(frames, 100, far) + 3 * chunk + 10, device)  # frame 100 is always timed
    audio_s = frames * seconds_per_frame
    codec.decode(c[:, :4][None])  # warm-up: kernels, RoPE table
    out: list = []
    full = timed(lambda: out.append(codec.decode(c[:, :frames][None]).reshape(-1).cpu().numpy()), device)
    print(f"{size}: full decode of {frames} frames ({audio_s:.1f} s): {audio_s / full:7.2f} s audio/s")
    kinds = modes(device)
    for name, (exact, dtype, ops) in kinds.items():
        for push in (1, chunk):
            IncrementalDecoder(codec, exact, chunk, dtype, ops).push(c[:, :push + 1])  # untimed: packs weights
            dec = IncrementalDecoder(codec, exact, chunk, dtype, ops)
            parts: list = []

            def run() -> None:
                for i in range(0, frames, push):
                    parts.append(dec.push(c[:, i:min(i + push, frames)]))

            t = timed(run, device)
            streamed = np.concatenate(parts)
            lsb = np.abs(pcm16(streamed).astype(np.int32) - pcm16(out[0]).astype(np.int32))
            print(f"{size}: {name:20s} incremental, {push} frame(s) per push: {audio_s / t:7.2f} s audio/s; "
                  f"vs full decode: max |Δ| {np.abs(streamed - out[0]).max():.1e}, PCM16 off on "
                  f"{np.count_nonzero(lsb) / lsb.size:.3%} (max {lsb.max()} LSB), "
                  f"SNR {snr_db(streamed, out[0]):.1f} dB")
    decoders = {name: IncrementalDecoder(codec, exact, chunk, dtype, ops)
                for name, (exact, dtype, ops) in kinds.items()}
    at: dict[str, dict[int, float]] = {name: {} for name in kinds}
    flops = {}
    for target in (10, 100, far):
        times: dict[str, list[float]] = {name: [] for name in kinds}
        for name, dec in decoders.items():
            while dec.frames < target - 2 * chunk:  # catch up in long pushes (untimed)
                dec.push(c[:, dec.frames:min(target - 2 * chunk, dec.frames + 64)])
            if dec.exact:
                with FlopCounterMode(display=False) as counter:  # machine-independent: the exact decoder's work
                    dec.push(c[:, dec.frames:dec.frames + chunk])
                flops[target] = counter.get_total_flops() / chunk
            else:
                dec.push(c[:, dec.frames:dec.frames + chunk])
        for _ in range(5):  # interleaved: the decoders see the same load
            for name, dec in decoders.items():
                i = dec.frames
                times[name].append(timed(lambda i=i, dec=dec: dec.push(c[:, i:i + chunk]), device) / chunk)
        for name in kinds:
            at[name][target] = statistics.median(times[name])
    targets = (10, 100, far)
    for name in kinds:
        print(f"{size}: {name:20s} push of {chunk} at frame " + " / ".join(map(str, targets)) + ": "
              + " / ".join(f"{at[name][k] * 1000:.1f}" for k in targets) + " ms a frame"
              + (f"  (real time needs < {seconds_per_frame * 1000:.1f} ms); GFLOP a frame "
                 + " / ".join(f"{flops[k] / 1e9:.3f}" for k in targets) if name == "exact" else
                 "  = " + " / ".join(f"{at[name][k] / at['exact'][k]:.2f}" for k in targets) + " of the exact"))


def kind_of(module: torch.nn.Module) -> str | None:
    """The row of `profile` an op of the conv stack is counted in (None: counted in its parent's)."""
    if isinstance(module, CausalConv):
        k = module.conv.kernel_size[0]
        return "depthwise convs" if module.conv.groups > 1 else f"k{k} convs"
    kinds = {CausalTransConv: "transposed convs", Snake1d: "Snake", ConvNeXtBlock: "ConvNeXt blocks (norm, MLP)",
             torch.nn.Tanh: "tanh"}
    return next((name for cls, name in kinds.items() if isinstance(module, cls)), None)


def profile(size: str, device: torch.device, chunk: int, pushes: int = 10) -> None:
    """Each op's own wall time (its children's taken out) per kind, for every non-exact decoder, by wrapping the
    conv stack's dispatch and the post-module's step for the duration."""
    config = SIZES[size]
    codec = random_codec(config, device)
    c = codes(config, 100 + (pushes + 1) * chunk, device)
    stack_run, step = fast_stream.FastConvStack._run, WindowLimitedTransformer.step
    spent: dict[str, float] = {}
    inner = [0.0]  # time of the counted ops so far, to take a child's time out of its parent's

    def counted(kind: str, fn, *args, **kwargs):
        before = inner[0]
        t = clock()
        out = fn(*args, **kwargs)
        took = clock() - t
        spent[kind] = spent.get(kind, 0.0) + took - (inner[0] - before)
        inner[0] = before + took
        return out

    def run(self, module, x):
        kind = kind_of(module)
        return stack_run(self, module, x) if kind is None else counted(kind, stack_run, self, module, x)

    fast_stream.FastConvStack._run = run
    WindowLimitedTransformer.step = lambda *a, **k: counted("post-module (transformer)", step, *a, **k)
    try:
        for name, (exact, dtype, ops) in modes(device).items():
            if exact:
                continue
            dec = IncrementalDecoder(codec, exact, chunk, dtype, ops)
            dec.push(c[:, :100])
            dec.push(c[:, 100:100 + chunk])
            spent.clear()
            total = sum(timed(lambda i=i: dec.push(c[:, i:i + chunk]), device)
                        for i in range(100 + chunk, 100 + (pushes + 1) * chunk, chunk))
            frames = pushes * chunk
            print(f"{size}: {name}, pushes of {chunk} at frame 100: {total / frames * 1000:.1f} ms a frame")
            spent["the rest (lookups, joins, copies)"] = total - sum(spent.values())
            for kind, t in sorted(spent.items(), key=lambda kv: -kv[1]):
                print(f"  {t / frames * 1000:7.2f} ms a frame  {t / total:6.1%}  {kind}")
    finally:
        fast_stream.FastConvStack._run, WindowLimitedTransformer.step = stack_run, step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", default="tiny,full")
    parser.add_argument("--frames", type=int, default=100, help="frames decoded for the speed figures")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--chunk", type=int, default=4, help="frames per push (the engine's chunk)")
    parser.add_argument("--far", type=int, default=1000, help="the last frame index the push cost is taken at")
    parser.add_argument("--profile", action="store_true", help="where the non-exact pushes' time goes, per op kind")
    parser.add_argument("--no-fused", action="store_true", help="leave out the decoders with the fused C++ Snake")
    parser.add_argument("--clock", choices=CLOCKS, default="wall", help="time pushes in wall or process CPU time")
    args = parser.parse_args()
    global clock, fused
    clock, fused = CLOCKS[args.clock], not args.no_fused
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} CPU thread(s), "
          f"load {os.getloadavg()[0]:.1f}, {args.clock} clock")
    with torch.inference_mode():
        for size in args.sizes.split(","):
            if args.profile:
                profile(size.strip(), device, args.chunk)
            else:
                bench(size.strip(), args.frames, device, args.chunk, args.far)


if __name__ == "__main__":
    main()
