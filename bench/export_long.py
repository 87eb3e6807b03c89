"""Export of a long book: wall time and peak memory above the idle process, for 1,000, 3,000 and 10,000 lines.

    .venv/bin/python bench/export_long.py [--lines 1000,3000,10000] [--outputs mix,stems] [--folder DIR]

A book like the long-form study's: lines of about 3.7 s (80 codec frames), 20 speakers in turn, a `# Chapter`
heading every 50 lines, a 0.4 s gap. Each line's take is a slice of one tone per speaker, so the takes cost no
memory and what is measured is the export's own: the mix as WAV (with chapter markers and a CUE sheet), then the
20 speaker stems as FLAC (what the studio offers when WAV stems would be huge), each size in a fresh process.
Peak RSS is `VmHWM` after the export less the RSS just before it. Output goes to `--folder` (default: a temp
folder on the disk of /tmp; 10,000 lines need about 4 GB there) and is removed afterwards.

A script, not a test: the figures vary with the machine, its disk and its load.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LINE_S = 80 * 2048 / 44100
SPEAKERS = 20
CHAPTER_EVERY = 50

CHILD = r"""
import json, sys, time
from pathlib import Path
import numpy as np
from s2studio.audio.export import ExportSettings, Metadata, RenderedLine, export

lines_n, outputs, folder, line_s, speakers, every = (int(sys.argv[1]), sys.argv[2].split(","), Path(sys.argv[3]),
                                                     float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
SR = 44100
n = round(line_s * SR)
t = np.arange(n + 2 * SR) / SR
tones = [(0.3 * np.sin(2 * np.pi * (110 + 15 * k) * t)).astype(np.float32) for k in range(speakers)]
lines = [RenderedLine(f"l{i}", f"Speaker {i % speakers}", f"Line {i}.", tones[i % speakers][:n + (i * 7919) % SR],
                      chapter=f"Chapter {i // every + 1}" if i % every == 0 else None) for i in range(lines_n)]

def status(field):
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(field))

results = {}
for what in outputs:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here
    idle = status("VmRSS:")
    t0 = time.perf_counter()
    settings = ExportSettings(format="wav", stems_format="flac", metadata=Metadata(title="Book"))
    if what == "mix":
        result = export(lines, settings, out=folder / "book.wav", cue=folder / "book.cue")
    else:
        result = export(lines, settings, stems_dir=folder / "stems")
    seconds = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in result.files)
    results[what] = {"seconds": seconds, "peak_above_idle": status("VmHWM:") - idle, "idle": idle, "bytes": size,
                     "hours": result.samples / SR / 3600, "files": len(result.files)}
    for p in result.files:
        p.unlink()
print(json.dumps(results))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", default="1000,3000,10000")
    ap.add_argument("--outputs", default="mix,stems")
    ap.add_argument("--folder", type=Path)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="s2-export-bench-", dir=args.folder))
    try:
        print(f"{'lines':>6} {'audio':>7} {'output':>6} {'files':>5} {'size':>9} {'time':>8} {'x real time':>11} "
              f"{'peak RSS above idle':>20}")
        for count in (int(x) for x in args.lines.split(",")):
            proc = subprocess.run([sys.executable, "-c", CHILD, str(count), args.outputs, str(folder), str(LINE_S),
                                   str(SPEAKERS), str(CHAPTER_EVERY)], capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{count:>6} failed: {proc.stderr.strip().splitlines()[-1]}")
                continue
            for what, r in json.loads(proc.stdout).items():
                print(f"{count:>6} {r['hours']:6.2f}h {what:>6} {r['files']:>5} {r['bytes'] / 1e9:7.2f}GB "
                      f"{r['seconds']:7.1f}s {r['hours'] * 3600 / r['seconds']:10.0f}x "
                      f"{r['peak_above_idle'] / 2**20:17.0f} MB  (idle {r['idle'] / 2**20:.0f} MB)", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
