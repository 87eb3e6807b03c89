"""The project's data side for a book: takes written as they arrive, saves, the autosave's snapshot, reopening,
Save As and reading the whole timeline, at 1,000 to 10,000 lines (no window: `bench/long_form.py` measures the
studio around it).

    .venv/bin/python bench/book_data.py [--sizes 1000,3000,10000] [--json out.json]

Each line gets one take of about 3.7 s (a tone, as the fake engine makes: 163,840 samples and 80 frames of
codes), so 10,000 lines are 11.4 hours of audio. Per size:

- write: the takes' files written as a render delivers them (batches of 40, as the writer thread finds them);
- save: the first save (a new folder, the takes linked from where they were written), then an incremental one
  after one line edited and one take added (time, bytes appended to the journal), and a compaction;
- capture: the snapshot an autosave takes on the GUI thread (the only part of a save on that thread);
- reopen: in a fresh process, the project opened, its timeline laid out and every line's peaks read (what
  the window needs to draw it): time, RSS after, and how much audio was decoded (none);
- save as: the whole project to a new folder, linked, and copied (links refused, as across disks);
- read through: the timeline in 10 s blocks, as a streaming export reads it: time and peak RSS.

A script, not a test: figures vary by machine and load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from s2studio.state.project import Project, Take  # noqa: E402
from s2studio.state.project_folder import ProjectFolder  # noqa: E402
from s2studio.state.project_journal import capture  # noqa: E402

TAKE_SAMPLES = 80 * 2048
BATCH = 40

REOPEN = """
import json, sys, time
t0 = time.perf_counter()
from s2studio.audio.timeline import Timeline
from s2studio.state import take_audio
from s2studio.state.project_folder import ProjectFolder
imported = time.perf_counter()
folder, opened = ProjectFolder.open(__import__("pathlib").Path(sys.argv[1]))
project = opened.project
t1 = time.perf_counter()
timeline = Timeline(gap_s=project.gap_s)
ids = project.line_ids
timeline.set_lines(ids, {k: t.sound for k in ids if (t := project.current(k)) is not None})
peaks = sum(len(t.peaks()) for t in timeline.layout.tracks)
t2 = time.perf_counter()
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
print(json.dumps({"import_s": imported - t0, "open_s": t1 - imported, "layout_s": t2 - t1,
                  "takes": sum(len(e.takes) for e in project.lines.values()), "problems": len(opened.problems),
                  "decoded_mb": take_audio.CACHE.decoded_bytes / 1e6, "peaks": peaks,
                  "rss_mb": int(status["VmRSS"].split()[0]) / 1024, "hwm_mb": int(status["VmHWM"].split()[0]) / 1024}))
"""

READ_THROUGH = """
import json, sys, time
import numpy as np
from pathlib import Path
from s2studio.audio.timeline import Timeline
from s2studio.state import take_audio
from s2studio.state.project_folder import ProjectFolder
project = ProjectFolder.open(Path(sys.argv[1]))[1].project
timeline = Timeline(gap_s=project.gap_s)
timeline.set_lines(project.line_ids, {k: t.sound for k in project.line_ids if (t := project.current(k))})
Path("/proc/self/clear_refs").write_text("5")
block = np.zeros(10 * 44100, np.float32)
t0 = time.perf_counter()
for start in range(0, timeline.layout.end, len(block)):
    timeline.layout.read_into(block, start)
t1 = time.perf_counter()
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
print(json.dumps({"read_s": t1 - t0, "audio_h": timeline.layout.end / 44100 / 3600,
                  "decoded_gb": take_audio.CACHE.decoded_bytes / 1e9,
                  "hwm_mb": int(status["VmHWM"].split()[0]) / 1024}))
"""


def script(lines: int) -> str:
    """A book: 20 speakers, a heading every 50 lines, about 12 words a line."""
    rng = np.random.default_rng(0)
    words = "the a and of to in that it was she they you not but what all were when we there can".split()
    out = []
    for i in range(lines):
        if i % 50 == 0:
            out.append(f"# Chapter {i // 50 + 1}")
        out.append(f"Speaker{rng.integers(20)}: " + " ".join(rng.choice(words, 12)).capitalize() + ".")
    return "\n".join(out) + "\n"


def tone(i: int) -> np.ndarray:
    t = np.arange(TAKE_SAMPLES) / 44100
    return (0.3 * np.sin(2 * np.pi * (180 + i % 50) * t) * np.minimum(1, t * 20)).astype(np.float32)


def child(code: str, path: Path) -> dict:
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def du_mb(path: Path) -> float:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def measure(n: int, root: Path) -> dict:
    res: dict = {"lines": n}
    text = script(n)
    ids = [f"l{i:06d}" for i in range(n)]
    project = Project(script=text, line_ids=ids, title=f"Book of {n}")
    codes = np.zeros((10, 80), np.int64)
    home = ProjectFolder(root / "home.s2proj")
    home.save(capture(project))

    t0 = time.perf_counter()
    for start in range(0, n, BATCH):
        batch = [Take(f"{i:012x}", ids[i], "words", tone(i), codes, i) for i in range(start, min(n, start + BATCH))]
        for take in batch:
            project.add_take(take)
        home.write_takes(batch)
    res["write_takes_per_s"] = n / (time.perf_counter() - t0)

    t0 = time.perf_counter()
    state = capture(project)
    res["capture_ms"] = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    home.save(state)
    res["first_save_s"] = time.perf_counter() - t0

    book = root / "book.s2proj"
    folder = ProjectFolder(book)
    t0 = time.perf_counter()
    folder.save(capture(project))
    res["save_as_link_s"] = time.perf_counter() - t0
    res["size_mb"] = du_mb(book)
    res["files"] = sum(1 for p in book.rglob("*") if p.is_file())

    project.script = project.script.replace("Chapter 1\n", "Chapter One\n", 1)
    take = Take("f" * 12, ids[n // 2], "words", tone(7), codes, 7)
    project.add_take(take)
    journal = book / "journal.jsonl"
    before = journal.stat().st_size
    t0 = time.perf_counter()
    folder.save(capture(project))
    res["incremental_save_ms"] = (time.perf_counter() - t0) * 1000
    res["incremental_bytes"] = journal.stat().st_size - before
    t0 = time.perf_counter()
    ProjectFolder(book).save(capture(project))
    res["compaction_s"] = time.perf_counter() - t0

    res["reopen"] = child(REOPEN, book)
    res["read_through"] = child(READ_THROUGH, book)

    real_link = os.link
    os.link = lambda *a, **k: (_ for _ in ()).throw(OSError(18, "Invalid cross-device link"))  # as across disks
    try:
        t0 = time.perf_counter()
        ProjectFolder(root / "copy.s2proj").save(capture(project))
        res["save_as_copy_s"] = time.perf_counter() - t0
    finally:
        os.link = real_link
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,3000,10000")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    results = []
    for n in (int(s) for s in args.sizes.split(",")):
        root = Path(tempfile.mkdtemp(prefix=f"book{n}-"))
        try:
            res = measure(n, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        results.append(res)
        r, t = res["reopen"], res["read_through"]
        print(f"{n:>6} lines ({t['audio_h']:.2f} h, {res['files']} files, {res['size_mb']:.0f} MB): "
              f"takes written {res['write_takes_per_s']:.0f}/s | snapshot {res['capture_ms']:.1f} ms | "
              f"first save {res['first_save_s']:.2f} s | save (1 edit + 1 take) {res['incremental_save_ms']:.1f} ms, "
              f"{res['incremental_bytes']} B | compaction {res['compaction_s']:.2f} s | "
              f"save as: linked {res['save_as_link_s']:.1f} s, copied {res['save_as_copy_s']:.1f} s | "
              f"reopen {r['open_s']:.2f} s + layout and peaks {r['layout_s']:.2f} s, RSS {r['rss_mb']:.0f} MB, "
              f"decoded {r['decoded_mb']:.0f} MB | read through {t['read_s']:.1f} s, {t['decoded_gb']:.2f} GB "
              f"decoded, peak RSS {t['hwm_mb']:.0f} MB", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
