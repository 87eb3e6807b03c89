"""What encoding one reference clip costs in memory: the peak resident memory above what the process held, for
clips of a few lengths, on the tiny test codec and on S2's own codec shape (random weights: the cost does not
depend on them), each in a fresh process that reads, resamples and encodes the clip exactly as the engine does
(`codec.resample.encode_file`), with glibc set up as `s2studio serve` sets it. Why references stop at 30 s
(`state.audio_limits.MAX_REFERENCE_SECONDS`).

    python bench/reference_memory.py [--sizes tiny full] [--seconds 10 20 30]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import sys, numpy as np, soundfile as sf, torch
from pathlib import Path
from s2studio.codec.codec import Codec
from s2studio.codec.resample import encode_file
from s2studio.demo_model.codec_weights import SIZES
from s2studio.serve.server import return_large_buffers
return_large_buffers()  # as `s2studio serve` runs
torch.set_num_threads(1)
size, seconds, folder = sys.argv[1], float(sys.argv[2]), Path(sys.argv[3])
clip = folder / "clip.wav"
t = np.arange(int(seconds * 16000)) / 16000
sf.write(clip, (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000, subtype="PCM_16")
codec = Codec(SIZES[size]).eval()
def kb(field):
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(field + ":"))
before = kb("VmRSS")
open("/proc/self/clear_refs", "w").write("5")
codes = encode_file(codec, clip)
print((kb("VmHWM") - before) // 1024, codes.shape[1])
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["tiny", "full"], choices=["tiny", "full"])
    parser.add_argument("--seconds", nargs="+", type=float, default=[10.0, 20.0, 30.0])
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[1]
    print(f"{'codec':<6} {'clip':>6} {'frames':>7} {'peak above before':>18} {'per second':>11}")
    for size in args.sizes:
        for seconds in args.seconds:
            with tempfile.TemporaryDirectory() as folder:
                out = subprocess.run([sys.executable, "-c", CHILD, size, str(seconds), folder], cwd=root,
                                     capture_output=True, text=True, check=True,
                                     env={"PYTHONPATH": str(root), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
            mb, frames = (int(x) for x in out.stdout.split())
            print(f"{size:<6} {seconds:>5.0f}s {frames:>7} {mb:>15} MB {mb / seconds:>8.1f} MB")


if __name__ == "__main__":
    main()
