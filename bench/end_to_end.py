"""S2 Pro end to end on this machine, LM + codec, per second of audio: `python bench/end_to_end.py`.

A benchmark, not a test: it prints figures and asserts nothing. One run, so that every figure shares the
machine's load, in this order:

1. the memory bandwidth (`frame_speed.bandwidth`, best of 7 at this run's threads, on 4 KiB pages and on the 2 MiB
   pages where the narrowed weights lie: the bounds use the best);
2. the LM at S2 Pro's shape (random weights; `--layers` of the 36 slow layers built, timed at that depth and at
   half of it, scaled to 36 as `frame_speed.py` part 3 does; the 4 fast layers as they are) for the exact path
   (float32 weights, the model's whole-context KV cache read at every step, as upstream) and the fast path with
   bf16, int8 and int4 weights (the engine's CPU kernels), each beside its bound: the bytes one frame reads
   (weights, plus the keys and values the slow layers read) over the bandwidth measured just before that row.
   The fast rows also pair each of their `--reps` frame samples with a bandwidth sample taken just before it
   (torch.sum over 2 GiB on 2 MiB pages and 2 GiB on 4 KiB pages, about a frame's time, the better of the two)
   and print the median of frame / bound over the pairs: on a machine whose bandwidth drifts (the VM this was
   written on read 30-55 GB/s from one second to the next) a best-of-7 bandwidth beside a best-of-5 frame
   compares two moments, the pairs compare the same one;
3. S2 Pro's codec (full size, random weights): incremental pushes of 4 frames around frame 100 (as the engine
   streams a line after its first frame), per frame, for the exact decoder (the exact mode's) and the non-exact
   one (`IncrementalDecoder(exact=False)`, the fast, int8 and int4 modes', in the dtype this CPU gives it:
   bfloat16 where it multiplies bfloat16 natively, else float32), both made as the engine makes them
   (`engine.line_decoder`: with the C++ Snake where the kernels run), pushes interleaved;
4. the table: LM, codec and total RTF (seconds of compute per second of audio, S2 speaks 21.53 frames a
   second), the LM's bound, and the total against bound + codec;
5. time to first audio of lines 1, 2 and 3 in the engine's line mode (`frame_speed.first_audio`, the mid model
   with its codec).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from s2studio.threads import prepare_threads  # noqa: E402

prepare_threads()  # as the studio and the CLI run: passive OpenMP waits (before torch is imported)

import torch  # noqa: E402

import frame_speed  # noqa: E402
from codec_speed import codes as codec_codes  # noqa: E402
from codec_speed import random_codec  # noqa: E402
from frame_speed import FPS_AUDIO, UPSTREAM, _timed, bandwidth, random_s2, s2_frame_samples  # noqa: E402

from s2studio.codec.config import S2 as S2_CODEC  # noqa: E402
from s2studio.codec.fast_stream import fast_dtype  # noqa: E402
from s2studio.engine.s2.engine import line_decoder  # noqa: E402
from s2studio.engine.s2.generate import ensure_caches, generate_frames, make_generator, make_sampler  # noqa: E402
from s2studio.engine.weights.narrow import narrow_linears  # noqa: E402
from s2studio.engine.weights.pages import on_huge_pages  # noqa: E402

LAYER = 2560 * (4096 + 2 * 1024) + 4096 * 2560 + 3 * 2560 * 9728
"""Weights of one transformer layer at S2's shape (both stacks: the same widths)."""
FRAME_PARAMS = 36 * LAYER + 4097 * 2560 + 9 * (4 * LAYER + 4096 * 2560)
"""Weights one fast-path frame reads: 36 slow layers, the 4097-row head, 9 fast passes (positions 0 and 1 share one)."""
EXACT_PARAMS = 36 * LAYER + 155776 * 2560 + 10 * (4 * LAYER + 4096 * 2560)
"""The exact path's frame: the full 155776-row head (upstream's logits), 10 fast passes."""
CONTEXT = 32768
"""S2 Pro's context: the exact path's static cache, every position of which each step reads."""


class _Tok:
    im_end_id = 151645


def exact_frame(model, frames: int) -> float:
    """Seconds per decode frame of the exact path (median of the frames after the first)."""
    ensure_caches(model)
    prompt = torch.zeros(11, 64, dtype=torch.long)
    prompt[0] = torch.arange(64) % 4000 + 1000
    sampler = make_sampler(model, UPSTREAM, make_generator(1), _Tok.im_end_id, ignore_eos=True)
    stamps = []
    for _ in generate_frames(model, prompt, sampler, max_new_tokens=frames + 1):
        stamps.append(time.perf_counter())
    return statistics.median(b - a for a, b in zip(stamps, stamps[1:], strict=False))


def scaled(full: float, half: float, built: int) -> float:
    """A 36-layer time from timings at `built` and `built // 2` slow layers (layers cost the same)."""
    per_layer = (full - half) / (built - built // 2)
    if per_layer <= 0:  # noise swamped the difference: the mean of the built layers
        per_layer = full / built
    return full + (36 - built) * per_layer


@dataclass
class LmRow:
    name: str
    frame: float
    """Seconds per frame: best of the samples (as the bandwidth is the best of 7)."""
    bound: float
    """Seconds the frame's bytes take at the best bandwidth measured before the row."""
    bandwidth: float
    paired: float | None = None
    """Median over the samples of frame / bound, each with the bandwidth sampled just before it (fast rows)."""


def bandwidth_sample(small: torch.Tensor, huge: torch.Tensor) -> float:
    """GB/s of torch.sum over 2 GiB on each page size (two passes of 1 GiB), the better one."""
    return max(2 * a.numel() * 4 / _timed(lambda a=a: (a.sum(), a.sum())) / 1e9 for a in (small, huge))


def lm_rows(args: argparse.Namespace) -> list[LmRow]:
    n, rows = args.layers, []
    kv_fast = 36 * 2 * 8 * 128 * args.context  # keys and values the fast path's slow layers read (elements)
    if not args.skip_exact:
        model = random_s2(n).to(torch.float32)
        bw = max(bandwidth())
        full = exact_frame(model, args.frames)
        layers = model.layers
        model.layers = layers[: n // 2]
        half = exact_frame(model, args.frames)
        model.layers = layers
        bound = (EXACT_PARAMS * 4 + 36 * 2 * 8 * 128 * CONTEXT * 4) / (bw * 1e9)
        rows.append(LmRow("exact (fp32, whole-context cache)", scaled(full, half, n), bound, bw))
        del model, layers
        gc.collect()
    small = torch.ones(2**28)
    huge = on_huge_pages(torch.ones(2**28))
    for name, mode, per_param in (("fast, bf16 weights", "bf16", 2), ("fast, int8 weights", "int8", 1),
                                  ("fast, int4 weights (g=128)", "int4", 0.5 + 4 / 128)):
        model = random_s2(n)
        narrow_linears(model, mode)
        model.to(torch.float32)  # activations in float32, as the engine's CPU fast path runs them
        gc.collect()
        nbytes = FRAME_PARAMS * per_param + kv_fast * 4
        bw = max(bandwidth())
        rates: list[float] = []
        samples = s2_frame_samples(model, args.reps, args.context,
                                   between=lambda: rates.append(bandwidth_sample(small, huge)))
        full, half, fast = (min(column) for column in zip(*samples, strict=True))
        paired = [(scaled(f, h, n) + t) / (nbytes / (rate * 1e9)) for (f, h, t), rate in zip(samples, rates,
                                                                                              strict=True)]
        rows.append(LmRow(name, scaled(full, half, n) + fast, nbytes / (bw * 1e9), bw, statistics.median(paired)))
        del model
        gc.collect()
    return rows


def codec_frames(frames_before: int = 100, reps: int = 5, chunk: int = 4) -> dict[bool, float]:
    """Seconds per frame of S2 Pro's codec streaming after `frames_before` frames, exact (True) and not (False):
    the median incremental push of `chunk` frames (what the engine pushes after a line's first frame,
    `S2Engine.chunk_frames`) over `chunk`, the two decoders' pushes interleaved so that they share the load."""
    codec = random_codec(S2_CODEC, torch.device("cpu"))
    c = codec_codes(S2_CODEC, frames_before + (reps + 1) * chunk, torch.device("cpu"))
    times: dict[bool, list[float]] = {True: [], False: []}
    with torch.inference_mode():
        decoders = {exact: line_decoder(codec, exact, chunk) for exact in times}
        for dec in decoders.values():
            dec.push(c[:, :frames_before])
            dec.push(c[:, frames_before:frames_before + chunk])  # untimed: the non-exact one packs its weights
        for i in range(frames_before + chunk, frames_before + (reps + 1) * chunk, chunk):
            for exact, dec in decoders.items():
                times[exact].append(_timed(lambda i=i, dec=dec: dec.push(c[:, i:i + chunk])))
    return {exact: statistics.median(t) / chunk for exact, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--layers", type=int, default=4, help="slow layers built at S2's size (of 36)")
    p.add_argument("--reps", type=int, default=7, help="fast path: frame samples (best, and paired median)")
    p.add_argument("--frames", type=int, default=4, help="exact path: decode frames timed per depth")
    p.add_argument("--context", type=int, default=64, help="fast path: positions in the cache")
    p.add_argument("--skip-exact", action="store_true")
    p.add_argument("--skip-ttfa", action="store_true")
    p.add_argument("--ttfa-frames", type=int, default=24)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, {args.threads} thread(s), "
          f"{os.cpu_count()} CPUs, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(default)')}, "
          f"load {os.getloadavg()[0]:.1f}")
    rates = bandwidth()
    print(f"\n== 1. bandwidth at {args.threads} thread(s): {max(rates):.1f} GB/s (each row measures it again); "
          f"(torch.sum {rates[0]:.1f} on 4 KiB pages, {rates[3]:.1f} on 2 MiB pages)")
    print(f"== 2. LM at S2 Pro's shape, {args.layers} of 36 slow layers built, scaled to 36")
    rows = lm_rows(args)
    for row in rows:
        paired = "" if row.paired is None else f"; paired with the bandwidth beside each sample: {row.paired:.2f}x"
        print(f"  {row.name:36s} {row.frame:5.2f} s/frame, bound {row.bound:5.2f} s ({row.frame / row.bound:.2f}x) "
              f"at {row.bandwidth:.1f} GB/s{paired}")
    codec = codec_frames()
    fast = str(fast_dtype(torch.device("cpu"))).removeprefix("torch.")
    print("== 3. S2 Pro codec, incremental pushes of 4 frames at frame 100: "
          + ", ".join(f"{'exact' if exact else f'non-exact ({fast})'} {t * 1000:.0f} ms a frame "
                      f"(RTF {t * FPS_AUDIO:.2f})" for exact, t in codec.items()))
    print(f"\n== 4. end to end, RTF = seconds of compute per second of audio ({args.threads} thread(s), "
          f"load {os.getloadavg()[0]:.1f})")
    print(f"  {'mode':36s} {'LM':>6s} {'codec':>6s} {'total':>6s}  {'LM bound':>8s}  total / (bound + codec)"
          "  LM / bound, paired")
    for row in rows:
        lm, cd, b = row.frame * FPS_AUDIO, codec[row.name.startswith("exact")] * FPS_AUDIO, row.bound * FPS_AUDIO
        paired = "" if row.paired is None else f"{row.paired:.2f}x"
        print(f"  {row.name:36s} {lm:6.2f} {cd:6.2f} {lm + cd:6.2f}  {b:8.2f}  {(lm + cd) / (b + cd):21.2f}x  "
              f"{paired:>18s}")
    if not args.skip_ttfa:
        ttfa = argparse.Namespace(ttfa_size="mid", ttfa_frames=args.ttfa_frames, precision="fp32")
        with tempfile.TemporaryDirectory(prefix="end-to-end-") as tmp:
            frame_speed.first_audio(ttfa, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
