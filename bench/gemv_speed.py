"""GB/s of the CPU kernels on single S2-shaped linear layers at batch 1: `python bench/gemv_speed.py`.

A benchmark, not a test: it prints figures and asserts nothing. For each kind of weight (bf16, int8, int4 g=128)
and each of S2 Pro's linear shapes (the slow and the fast transformer share them; `--sizes mid` for the mid demo
model's, `--sizes s2 mid` for both), one decode-step row of
activations through the layer, the weights cycled over enough copies (>= 4x the L3 cache) that every call reads
them from memory, as in a frame. Printed: microseconds per call, GB/s of weight bytes, and the ratio of the
time to its bound (bytes / the bandwidth `frame_speed.bandwidth` measures at the same thread count, just
before). `--threads 1 2` runs each count. A tiny layer gives the fixed cost of one call.

The weights lie on 2 MiB pages, as the layer types keep them (`engine/weights/pages.py`); `--small-pages` puts
them on the allocator's 4 KiB pages instead (the bandwidth is measured on those either way).

`--compare FILE.cpp` builds another version of `cpu_gemv.cpp` (e.g. `git show main:s2studio/engine/weights/
cpu_gemv.cpp > /tmp/old.cpp`) under a second op namespace and times it interleaved with this one, call for call,
so that the ratio between them shares the machine's load (the machine is shared; absolute figures move).
`--busy N` runs it all beside N busy `python -c 'while True: pass'` processes (started here, stopped at the end):
a desktop is never idle, and a 2-thread call must not wait for a helper whose core another program took.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from s2studio.threads import prepare_threads  # noqa: E402

prepare_threads()

import torch  # noqa: E402

from frame_speed import bandwidth  # noqa: E402
from s2studio.engine.weights import cpu_gemv  # noqa: E402
from s2studio.engine.weights.int4 import pack_codes, quantize_groups  # noqa: E402
from s2studio.engine.weights.int8 import quantize_rows  # noqa: E402
from s2studio.engine.weights.pages import on_huge_pages  # noqa: E402

SHAPES = {"wqkv 6144x2560": (6144, 2560), "wo 2560x4096": (2560, 4096), "w1/w3 9728x2560": (9728, 2560),
          "w2 2560x9728": (2560, 9728), "fast head 4096x2560": (4096, 2560)}
MID_SHAPES = {"mid w1/w3 1536x512": (1536, 512), "mid w2 512x1536": (512, 1536), "mid wqkv 768x512": (768, 512),
              "mid wo 512x512": (512, 512)}
"""The mid model's linears (`--sizes mid`): 50-200 us calls, where a call's fixed costs and the helper thread's
wake-up show, and ~230 of them make a mid frame."""
SIZES = {"s2": SHAPES, "mid": MID_SHAPES}
COLD_BYTES = 128 << 20
"""Weights cycled per shape: 4x this machine's 32 MiB L3, so each call streams from memory."""


def build_compare(source: Path) -> str:
    """Compile `source` under the op namespace `s2studio_cmp` (torch's JIT build, with the install's flags for this
    CPU's width) and load it; returns that namespace."""
    from torch.utils.cpp_extension import load

    from s2studio.engine.weights import kernel_build, kernels

    text = source.read_text().replace("TORCH_LIBRARY(s2studio_cpu,", "TORCH_LIBRARY(s2studio_cmp,")
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"gemv_cmp_{key}"
    folder.mkdir(exist_ok=True)
    src = folder / "cpu_gemv_cmp.cpp"
    src.write_text(text)
    width = kernels.widths_for(torch.backends.cpu.get_cpu_capability())[0]
    flags = [f for f in kernel_build.compile_flags(width, msvc=False) if not f.startswith("-DS2_")]
    load(f"gemv_cmp_{key}", [str(src)], extra_cflags=flags, extra_ldflags=["-fopenmp"], build_directory=str(folder),
         is_python_module=False)
    return "s2studio_cmp"


def layer_copies(kind: str, n: int, k: int, cold: int = COLD_BYTES, huge: bool = True) -> tuple[list[tuple], int]:
    """Argument tuples (after x) for copies of one random layer, and the weight bytes of one; `huge`: the weights
    on 2 MiB pages, as the layer types keep them (`weights/pages.py`), else on the allocator's 4 KiB pages."""
    w = torch.randn(n, k) * 0.02
    if kind == "bf16":
        args, size = (w.to(torch.bfloat16).view(torch.int16),), n * k * 2
    elif kind == "int8":
        q, s = quantize_rows(w)
        args, size = (q, s), n * k + 4 * n
    else:
        q, sz = quantize_groups(w, 128)
        args, size = (pack_codes(q), sz.view(torch.int16), 128), n * k // 2 + n * (k // 128) * 4
    copies = max(1, cold // size)
    place = on_huge_pages if huge else torch.clone
    return [(place(args[0]), *(a.clone() if isinstance(a, torch.Tensor) else a for a in args[1:]))
            for _ in range(copies)], size


def per_call(op, x, copies: list[tuple], calls: int) -> float:
    """Best of 5 mean seconds per call over `calls` calls cycling the copies."""
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for i in range(calls):
            op(x, *copies[i % len(copies)])
        best = min(best, (time.perf_counter() - t) / calls)
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    p.add_argument("--kinds", nargs="*", default=["int4", "int8", "bf16"])
    p.add_argument("--sizes", nargs="*", default=["s2"], choices=list(SIZES), help="which model's shapes")
    p.add_argument("--shapes", nargs="*", help="of: " + ", ".join([*SHAPES, *MID_SHAPES]) + " (default: --sizes')")
    p.add_argument("--rows", type=int, default=1, help="rows of activations (1: a decode step)")
    p.add_argument("--hot", action="store_true", help="one copy of each layer (in cache when it fits): compute speed")
    p.add_argument("--compare", type=Path, help="another cpu_gemv.cpp, timed interleaved as 'cmp'")
    p.add_argument("--busy", type=int, default=0, help="busy processes beside the run (one per core: loaded)")
    p.add_argument("--small-pages", action="store_true", help="weights on 4 KiB pages (the layers use 2 MiB ones)")
    args = p.parse_args(argv)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        return run(args)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def run(args: argparse.Namespace) -> int:
    shapes = {name: shape for size in args.sizes for name, shape in SIZES[size].items()}
    if args.shapes:
        shapes = {name: {**SHAPES, **MID_SHAPES}[name] for name in args.shapes}
    assert cpu_gemv.available(), "the CPU kernels did not load"
    spaces = {"new": "s2studio_cpu"}
    if args.compare:
        spaces["cmp"] = build_compare(args.compare)
    ops = {name: {kind: getattr(getattr(torch.ops, ns), f"linear_{kind}") for kind in ("bf16", "int8", "int4")}
           for name, ns in spaces.items()}
    print(f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, load {os.getloadavg()[0]:.1f}, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, "
          f"weights on {'4 KiB' if args.small_pages else '2 MiB'} pages, {args.busy} busy processes beside")
    torch.manual_seed(0)
    for threads in args.threads:
        torch.set_num_threads(threads)
        bw = max(bandwidth())
        print(f"\n== {threads} thread(s): bandwidth {bw:.1f} GB/s")
        for kind in args.kinds:
            x = torch.randn(args.rows, 1)
            tiny, _ = layer_copies(kind, 64, 128)
            fixed = {name: per_call(op[kind], torch.randn(args.rows, 128), tiny, 2000) for name, op in ops.items()}
            print(f"  {kind}: fixed cost of a call (64x128): "
                  + ", ".join(f"{name} {s * 1e6:.1f} us" for name, s in fixed.items()))
            for shape, (n, k) in shapes.items():
                copies, size = layer_copies(kind, n, k, 0 if args.hot else COLD_BYTES, not args.small_pages)
                x = torch.randn(args.rows, k)
                ref = ops["new"][kind](x, *copies[0])
                for name, op in ops.items():
                    if name != "new" and not torch.equal(op[kind](x, *copies[0]), ref):
                        print(f"    ({name} differs from new on {shape}: max "
                              f"{(op[kind](x, *copies[0]) - ref).abs().max().item():.3g})")
                calls = max(20, int(0.3 / (size / (bw * 1e9))) // 5)
                times = {name: [] for name in ops}
                for _ in range(3):  # interleaved
                    for name, op in ops.items():
                        times[name].append(per_call(op[kind], x, copies, calls))
                line = f"    {shape:20s} {size / 2**20:6.1f} MiB"
                for name, ts in times.items():
                    t = min(ts)
                    line += f" | {name} {t * 1e6:7.0f} us {size / t / 1e9:5.1f} GB/s {t / (size / (bw * 1e9)):.2f}x"
                print(line)
                del copies
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
