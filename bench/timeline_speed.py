"""Timeline costs per event at 10, 100 and 1000 lines (design.md §6: one timeline, flat costs).

    .venv/bin/python bench/timeline_speed.py [--line-s 4.0] [--repeat 200]

Prints, per project size, the median wall time of:
- one chunk: `Timeline.append` of one AudioChunk (4 frames, 8192 samples) to the line streaming at the
  end, and of one read of a 1024-sample block by the player (`Layout.read_into`);
- one take swap: `Timeline.set_audio` of a new take of the first line (every other line moves) and of
  the middle line, its length changed.
The chunk should not grow with the project at all; the swap moves one start per following line in one
vectorised add, so it may grow a little (a copy of the starts array) but should stay in microseconds.
A script, not a test: figures vary by machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from s2studio.audio.timeline import Timeline  # noqa: E402

RATE = 44100
CHUNK = 4 * 2048


def _median_us(fn, repeat: int) -> float:  # noqa: ANN001
    for _ in range(repeat // 10):  # warm up: caches, the allocator, the stream buffer's first doublings
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1000


def measure(lines: int, line_s: float, repeat: int) -> dict[str, float]:
    ids = [f"l{i}" for i in range(lines + 1)]
    take = np.full(round(line_s * RATE), 0.1, np.float32)
    takes = {k: take for k in ids[:-1]}  # one array for all: the timeline never copies, and memory stays flat
    tl = Timeline(gap_s=0.4, sample_rate=RATE)
    tl.set_lines(ids, takes)  # every line rendered but the last, which streams in
    tl.begin_stream(ids[-1])
    chunk = np.full(CHUNK, 0.2, np.float32)
    offset = [0]

    def append() -> None:
        tl.append(ids[-1], offset[0], chunk)
        offset[0] += CHUNK

    out = np.zeros(1024, np.float32)
    middle = tl.layout.bounds(ids[lines // 2])[0]
    variants = [np.full(round(line_s * RATE) + d, 0.3, np.float32) for d in (-2048, 2048)]
    flip = [0]

    def swap(line_id: str) -> None:
        flip[0] ^= 1
        tl.set_audio(line_id, variants[flip[0]])

    return {
        "chunk": _median_us(append, repeat),
        "read": _median_us(lambda: tl.layout.read_into(out, middle), repeat),
        "swap first": _median_us(lambda: swap(ids[0]), repeat),
        "swap middle": _median_us(lambda: swap(ids[lines // 2]), repeat),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--line-s", type=float, default=4.0, help="seconds of audio per line")
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    print(f"median µs per event, lines of {args.line_s:g} s, {args.repeat} repeats")
    print(f"{'lines':>6} {'chunk':>8} {'read':>8} {'swap first':>11} {'swap middle':>12}")
    for lines in (10, 100, 1000):
        r = measure(lines, args.line_s, args.repeat)
        print(f"{lines:>6} {r['chunk']:>8.1f} {r['read']:>8.1f} {r['swap first']:>11.1f} {r['swap middle']:>12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
