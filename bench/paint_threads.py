"""What Qt's painting helper threads cost the window's thread: a pass of tall translucent fills (as the waveform's
marks over its lines) painted with Qt's pool of helper threads and alone (`QT_NO_GUI_THREADPOOL`, which the studio
sets), on a quiet process and beside two busy Python threads (as a render's or an export's).

    .venv/bin/python bench/paint_threads.py [--fills 300] [--passes 40]

Each case runs in a fresh process (Qt reads the variable when it first paints); the cases alternate, twice each.
Prints the wall time and the window's thread's CPU time of a pass, median and worst.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

PASS = r"""
import os, statistics, sys, threading, time
import numpy as np
from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor, QPainter, QPixmap
from PySide6.QtWidgets import QApplication
app = QApplication(["bench"])
fills, passes, busy = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "busy"
stop = False
def work():  # what a render's threads do: Python, and short calls that let go of the interpreter
    block = np.random.default_rng(0).random(44100).astype(np.float32)
    while not stop:
        np.clip(block * 0.5, -1, 1)
        sum(range(2000))
threads = [threading.Thread(target=work) for _ in range(2 if busy else 0)]
for t in threads:
    t.start()
pixmap = QPixmap(1200, 160)
walls, cpus = [], []
for n in range(passes + 1):  # the first warms up (not counted)
    pixmap.fill(QColor("white"))
    wall, cpu = time.perf_counter(), time.thread_time()
    p = QPainter(pixmap)
    for i in range(fills):
        p.fillRect(QRectF(4 * i % 1200, 0, 3, 160), QColor(30, 60, i % 255, 96))
    p.end()
    if n:
        walls.append(1000 * (time.perf_counter() - wall))
        cpus.append(1000 * (time.thread_time() - cpu))
    time.sleep(0.02)
stop = True
for t in threads:
    t.join()
print(statistics.median(walls), max(walls), statistics.median(cpus))
"""


def run(alone: bool, busy: bool, fills: int, passes: int) -> tuple[float, float, float]:
    env = {k: v for k, v in os.environ.items() if k != "QT_NO_GUI_THREADPOOL"}
    env.setdefault("QT_QPA_PLATFORM", "offscreen")
    if alone:
        env["QT_NO_GUI_THREADPOOL"] = "1"
    out = subprocess.run([sys.executable, "-c", PASS, str(fills), str(passes), "busy" if busy else "quiet"],
                         capture_output=True, text=True, env=env, check=True, timeout=600)
    wall, worst, cpu = (float(x) for x in out.stdout.split())
    return wall, worst, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fills", type=int, default=300)
    parser.add_argument("--passes", type=int, default=40)
    args = parser.parse_args()
    print(f"{args.fills} tall translucent fills a pass, {args.passes} passes; ms of a pass: wall median / worst, CPU median")
    for busy in (False, True):
        for round_ in range(2):
            for alone in (False, True):
                wall, worst, cpu = run(alone, busy, args.fills, args.passes)
                print(f"  {'beside two busy threads' if busy else 'quiet':24s} round {round_ + 1}  "
                      f"{'alone (the studio)' if alone else 'with Qt helper threads':24s} "
                      f"{wall:6.1f} / {worst:6.1f}   CPU {cpu:5.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
