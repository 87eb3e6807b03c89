"""First fast-path start: `s2studio synth --fast` on the tiny demo model with an empty user cache, timed whole and
for the model load it reports ("loaded … in X s"), interleaved for each checkout given.

    .venv/bin/python bench/first_start.py                       # this checkout
    .venv/bin/python bench/first_start.py --checkout /tmp/old   # beside another one (e.g. one that compiled its
                                                                # kernels at first use)
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def once(checkout: Path, model: Path) -> tuple[float, float, str]:
    with tempfile.TemporaryDirectory() as cache:
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "s2studio", "synth", "--model", str(model), "--fast",
                               "--device", "cpu", "--threads", "1", "--seed", "1", "--max-new-tokens", "8",
                               "--text", "<|speaker:0|>First start.", "--out", f"{cache}/line.wav"],
                              cwd=checkout, env={"XDG_CACHE_HOME": cache, "PATH": "/usr/bin:/bin", "HOME": cache},
                              capture_output=True, text=True, timeout=1800)
        wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(done.stderr)
    loaded = re.search(r"loaded .* on (.*) in ([\d.]+) s", done.stderr)
    return wall, float(loaded.group(2)), loaded.group(1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, action="append", default=[], help="another checkout to time")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "tiny"
        subprocess.run([sys.executable, "-m", "s2studio", "demo-model", str(model)], cwd=ROOT, check=True,
                       capture_output=True)
        for round_ in range(1, args.rounds + 1):
            for checkout in [ROOT, *args.checkout]:
                wall, load, how = once(checkout, model)
                print(f"round {round_} {checkout}: command {wall:.1f} s, load {load:.1f} s ({how})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
