"""How the studio's own work grows with the length of the script: a book of 100 to 10,000 lines.

    .venv/bin/python bench/long_form.py [--sizes 100,1000,3000,10000] [--steps open,type,render,save,...]
                                        [--engine instant,paced] [--render-limit 600] [--json out.json]
                                        [--root DIR] [--book DIR/n10000/book.s2proj]
                                        [--profile out.prof --profile-step paste|open|type|render|save|reopen]
                                        [--passes N] [--why blocks.jsonl]

Builds a script of N lines (about 12 words each, 20 speakers, a `# Chapter` heading every 50 lines, an inline
tag on about one line in six, a `Name:` at every change of speaker), opens the real window (offscreen) with
20 library voices named like the speakers and the project's FakeEngine (a line is about 80 frames, 3.7 s of
audio, streamed 4 frames a chunk), so that only the studio's own cost shows, and measures per size:

- open: the script pasted into an empty editor (as Edit ▸ Paste does) until parsed and idle, and the
  script-only project opened, until idle;
- type: a person typing 40 keys 100-350 ms apart in the middle (latency from when the key is due until
  it is handled and painted: p50 / p90 / max);
- render: Render All with an instant engine (no wait per frame) and at a realistic pace (0.5 ms per
  frame): time until the first line starts, lines per second, the CPU time it took (the GUI thread's, the
  whole process's, the take checker's process, and each thread's: on a loaded machine, what wall time the
  render would need with the cores to itself is about the larger of the busiest thread and the sum over the
  cores), the whole render (or what was done when `--render-limit` ran out; the rest of the takes are then
  made without the window, as a render would);
- save: Save As to a new folder; autosave: the autosave after one edit; reopen: the saved project opened
  in a fresh process (time and RSS);
- navigate (the rendered project): a cursor move to the next line, a click on the waveform, zoom in and out,
  the fitted timeline's repaint, a change of the line being heard;
- export: the mix (WAV) and 20 speaker stems (FLAC) through the export dialog's own code, on its thread
  (time and peak RSS; the address space is capped at the current size + `--export-cap-gb`).

A rendered book is slow to make: `--root DIR` keeps the run's files, and a later run with `--book
DIR/N/book.s2proj` and steps without `render` opens that book for save and reopen. `--profile` writes a
cProfile of the GUI thread during one step (reopen: in its fresh process); `--passes N` prints each step's N
passes of the GUI thread with the most CPU, each with what ran in it (`gui_passes.py`). The render also prints
the CPU that pressing Render All took before it returned (`trigger_cpu_ms`). `--why FILE` says where each
block over 35 ms went (`thread_times.py`): the window's own run time, its wait for a core, the rest asleep (for the
interpreter's lock, mostly), and which other threads ran meanwhile.

For each step: the longest block of the GUI thread (the largest gap between ticks of a 10 ms timer: how
long the window could not repaint or take a key). A script, not a test: figures vary by machine and load.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import multiprocessing
import os
import random
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gui_passes import PassLog  # noqa: E402
import thread_times  # noqa: E402

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

WORDS = ("the a and of to in that it was he she they you not but what all were when we there can an your which "
         "their said if do will each about how up out them then many some so these would other into has more her "
         "two like him see time could no make than first been its who now people my made over did down only way "
         "find use may water long little very after words called just where most know").split()
TAGS = ("[whispering]", "[laughing]", "[sigh]", "[excited]", "[sad]", "[shouting]")
NAMES = ("Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy", "Mallory", "Niaj",
         "Olivia", "Peggy", "Rupert", "Sybil", "Trent", "Victor", "Walter", "Yvonne")
STEPS = ("open", "type", "render", "save", "autosave", "reopen", "navigate", "export")


def book(lines: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    out, previous = [], None
    for i in range(lines):
        if i % 50 == 0:
            out.append(f"# Chapter {i // 50 + 1}")
        speaker = rng.choice(NAMES) if previous is None or rng.random() < 0.7 else previous
        words = [rng.choice(WORDS) for _ in range(rng.randint(10, 14))]
        words[0] = words[0].capitalize()
        if rng.random() < 1 / 6:
            words.insert(rng.randrange(len(words)), rng.choice(TAGS))
        text = " ".join(words) + rng.choice(".?!")
        out.append(f"{speaker}: {text}" if speaker != previous else text)
        previous = speaker
    return "\n".join(out) + "\n"


# -- measuring -------------------------------------------------------------------------------------


def rss_mb(field: str = "VmRSS") -> float:
    for row in Path("/proc/self/status").read_text().splitlines():
        if row.startswith(field + ":"):
            return int(row.split()[1]) / 1024
    return 0.0


def thread_cpu() -> dict[int, tuple[str, float]]:
    """CPU seconds each live thread of this process has used: native id -> (its name, seconds). Python names
    its threads only for itself, so the names come from `threading` where it knows the thread, else from the
    kernel (Qt names its own threads there)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rpartition(")")[2].split()
            comm = (task / "comm").read_text().strip()
        except OSError:
            continue
        tid = int(task.name)
        out[tid] = (names.get(tid, comm), (int(fields[11]) + int(fields[12])) / tick)
    return out


def children_cpu() -> float:
    """CPU seconds used by the live child processes (the take checker) and those already waited for."""
    tick, total = os.sysconf("SC_CLK_TCK"), resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = total.ru_utime + total.ru_stime
    for child in multiprocessing.active_children():
        try:
            fields = Path(f"/proc/{child.pid}/stat").read_text().rpartition(")")[2].split()
            seconds += (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            pass
    return seconds


def cpu_by_thread(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
                  process_s: float) -> dict[str, float]:
    """CPU seconds per thread between two `thread_cpu` readings, a pool's threads (`name_3`) summed under
    their pool's name; what threads that ended meanwhile used is the process's rest."""
    out: dict[str, float] = {}
    for tid, (name, seconds) in after.items():
        group = name.rstrip("0123456789").rstrip("_-") or name
        out[group] = out.get(group, 0.0) + seconds - before.get(tid, (name, 0.0))[1]
    out["ended threads"] = process_s - sum(out.values())
    return {k: round(v, 1) for k, v in sorted(out.items(), key=lambda kv: -kv[1]) if abs(v) >= 0.05}


def reset_peak() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


class Gaps:
    """A 10 ms timer on the GUI thread: the longest gap between its ticks since `reset` is the longest time
    the window could not answer. What the window's thread did in a block: run this script under a sampling
    profiler (`py-spy record --threads -- python bench/long_form.py ...`); a watcher thread in this process
    that read the GUI thread's stack while it ran crashed Python 3.11 on long runs."""

    def __init__(self) -> None:
        import gc

        from PySide6.QtCore import Qt, QTimer

        self.timer = QTimer()
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.setInterval(10)
        self.timer.timeout.connect(self._tick)
        self._gc_started = self._gc_cpu = 0.0
        gc.callbacks.append(self._collection)
        self.passes = PassLog(PASSES) if PASSES else None
        """`--passes N`: the N passes with the most CPU since `reset`, each with its profile."""
        self.why = WHY.open("a") if WHY else None
        """`--why FILE`: a line per block over 35 ms, where its time went (`thread_times`)."""
        self.threads = thread_times.snapshot() if self.why else {}
        self.reset()
        self.timer.start()

    def _collection(self, phase: str, info: dict) -> None:
        """The longest full garbage collection (every thread waits for it) since `reset`: its wall time, the
        thread that ran it and that thread's CPU in it."""
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._gc_started, self._gc_cpu = time.perf_counter(), time.thread_time()
        else:
            took = time.perf_counter() - self._gc_started
            if took > self.longest_gc:
                self.longest_gc = took
                gui = threading.current_thread() is threading.main_thread()
                self.longest_gc_where = "gui" if gui else threading.current_thread().name
                self.longest_gc_cpu = time.thread_time() - self._gc_cpu

    def reset(self) -> None:
        self.longest_gc = self.longest_gc_cpu = 0.0
        self.longest_gc_where = ""
        self.last = time.perf_counter()
        self.last_cpu = time.thread_time()
        self.longest = self.longest_cpu = 0.0
        self.busy_until = self.last
        if self.passes is not None:
            self.passes.start()

    def _tick(self) -> None:
        now, cpu = time.perf_counter(), time.thread_time()
        gap = now - self.last
        if self.why is not None:
            threads = thread_times.snapshot()
            if gap > 0.035:
                why = thread_times.explain(gap, self.threads, threads, threading.main_thread().native_id)
                self.why.write(json.dumps({"at": time.strftime("%H:%M:%S"), **why}) + "\n")
                self.why.flush()
            self.threads = threads
        self.longest = max(self.longest, gap)
        self.longest_cpu = max(self.longest_cpu, cpu - self.last_cpu)
        if self.passes is not None:
            self.passes.tick(cpu - self.last_cpu)
        self.last_cpu = cpu
        if gap > 0.03:
            self.busy_until = now
        self.last = now

    def longest_ms(self) -> float:
        return 1000 * max(self.longest, time.perf_counter() - self.last)

    def longest_cpu_ms(self) -> float:
        """The most CPU the GUI thread used between two ticks: the block without the time this process waited
        for a CPU on a loaded machine (GIL waits behind other threads are in `longest_ms` only)."""
        return 1000 * max(self.longest_cpu, time.thread_time() - self.last_cpu)

    def blocks_ms(self) -> dict:
        if self.passes is not None and self.passes.running:
            note("the longest passes of the window's thread (profiled, so slower than without --passes):\n"
                 + PassLog.show(self.passes.stop()))
        return {"block_ms": round(self.longest_ms(), 1), "cpu_ms": round(self.longest_cpu_ms(), 1),
                "full_gc_ms": round(1000 * self.longest_gc, 1), "full_gc_thread": self.longest_gc_where,
                "full_gc_cpu_ms": round(1000 * self.longest_gc_cpu, 1)}


def note(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def run_for(seconds: float) -> None:
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    QTimer.singleShot(max(int(seconds * 1000), 0), loop.quit)
    loop.exec()


def wait_until(predicate, timeout_s: float) -> bool:  # noqa: ANN001
    deadline = time.perf_counter() + timeout_s
    while not predicate():
        if time.perf_counter() > deadline:
            return False
        run_for(0.005)
    return True


def settle(gaps: Gaps, started: float, quiet_s: float = 0.25, timeout_s: float = 120.0, done=None) -> float:  # noqa: ANN001
    """Run the event loop until it has been idle `quiet_s` and `done()` (when given) holds; seconds from `started` to
    its last busy pass or to when `done()` was first seen true (polled every 50 ms), the later."""
    deadline = time.perf_counter() + timeout_s
    done_at = None
    while time.perf_counter() < deadline:
        run_for(0.05)
        if done_at is None and (done is None or done()):
            done_at = time.perf_counter()
            gaps.done_s = done_at - started
        if done_at is not None and time.perf_counter() - gaps.busy_until >= quiet_s:
            break
    return max(gaps.busy_until - started, (done_at or started) - started, 0.0)


def opening_done(w) -> bool:  # noqa: ANN001
    """Whether the window has done what opening a project asks of it: every slice (the timeline, the lines' states,
    the cast), the script's colours and the listing of the takes to check."""
    from s2studio.ui.control.slices import Slices

    listing = getattr(w.check_commands.checks, "_listing", None)  # a timer in code before, a `Slices` now
    return (not any(work.busy for work in w.findChildren(Slices)) and not w.editor.highlighter.pending
            and not (listing is not None and hasattr(listing, "isActive") and listing.isActive()))


@contextlib.contextmanager
def profiled(step: str):  # noqa: ANN201
    """A cProfile of the GUI thread during `step` when `--profile FILE --profile-step STEP` name it."""
    if not PROFILE or step != PROFILE_STEP:
        yield
        return
    import cProfile

    profile = cProfile.Profile(time.thread_time)  # the GUI thread's CPU, not the loaded wall clock
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        profile.dump_stats(PROFILE)


def timed(gaps: Gaps, action, quiet_s: float = 0.25, step: str = "", done=None) -> dict:  # noqa: ANN001
    """`action()`, then until idle (and `done()`): seconds to idle and the longest block; with `done`, also
    `done_s`: seconds until `done()` was first seen true (polled every 50 ms), the window's part of the work."""
    run_for(0.05)
    gaps.reset()
    started = time.perf_counter()
    with profiled(step):
        action()
        gaps._tick()
        called = time.perf_counter() - started
        gaps.done_s = None
        idle = max(settle(gaps, started, quiet_s, done=done), called)
    done_s = {"done_s": round(max(gaps.done_s, called), 3)} if done is not None and gaps.done_s is not None else {}
    return {"s": round(idle, 3), **done_s, **gaps.blocks_ms()}


# -- the studio ------------------------------------------------------------------------------------


def open_window(data: Path, frame_latency_s: float):  # noqa: ANN201
    from PySide6.QtCore import QSettings

    from s2studio import app
    from s2studio.engine.fake import FakeEngine
    from s2studio.ui.control import heap

    app.make_application()
    heap.collect_on_window_thread()  # as `app.main` does
    QSettings().clear()
    engine = FakeEngine(frame_latency_s=frame_latency_s, frames_per_char=1.0, chunk_frames=4, min_frames=8)
    w = app.build_window("fake", factory=lambda: engine)
    w.ask_on_close = False
    w.live.enabled = False
    w.resize(1400, 900)
    w.show()
    heap.keep()  # as `app.main` does
    w.store.begin_session()
    app.start_engine(w)
    wait_until(lambda: w.model.info is not None and not w.model.busy, 60)
    if not w.library.list():
        import numpy as np
        import soundfile as sf

        for i, name in enumerate(NAMES):
            clip = data / f"clip{i}.wav"
            t = np.arange(44100) / 44100
            sf.write(clip, (0.3 * np.sin(2 * np.pi * (150 + 15 * i) * t)).astype(np.float32), 44100)
            w.library.create(name, [(clip, "hello there, this is a voice")])
    w.voices.refresh()
    w.voice_commands.changed.emit("")
    if WITHOUT == "autosave":
        w.store.autosave_now = lambda: None
    w.statusBar().messageChanged.connect(lambda text: text and note(f"status bar: {text}"))
    from PySide6.QtWidgets import QMessageBox

    for kind in ("warning", "critical", "information"):  # a modal box would stop the run: said, not shown
        setattr(QMessageBox, kind, staticmethod(lambda _parent, title, text, *a, **k: note(f"{title}: {text}")))
    QMessageBox.question = staticmethod(lambda *_a, **_k: QMessageBox.StandardButton.Discard)
    return w


def close_window(w) -> None:  # noqa: ANN001
    w.player.close()
    w.close()
    w.ctx.host.shutdown()


def paste(w, text: str, lines: int) -> None:  # noqa: ANN001
    """What Edit ▸ Paste does over a selection of the whole script, until the pasted text's `lines` are parsed."""
    from PySide6.QtGui import QTextCursor

    cursor = w.editor.textCursor()
    cursor.select(QTextCursor.SelectionType.Document)
    w.editor.setTextCursor(cursor)
    w.editor.paste()  # the clipboard holds `text` (set before the step's clock started)
    wait_until(lambda: len(w.document.script.lines) == lines and w.document.project.script == text, 120)


def step_open(w, gaps: Gaps, text: str, folder: Path) -> dict:  # noqa: ANN001
    from s2studio.state.script import parse_script

    lines = len(parse_script(text).lines)
    w.projects.new()
    settle(gaps, time.perf_counter())
    from PySide6.QtWidgets import QApplication

    QApplication.clipboard().setText(text)
    out = {"paste": timed(gaps, lambda: paste(w, text, lines), step="paste")}
    path = folder / "script-only.s2proj"
    w.projects.save_as(path)
    settle(gaps, time.perf_counter())
    w.projects.new()
    out["project"] = timed(gaps, lambda: w.projects.open(path), step="open")
    out["rss_mb"] = round(rss_mb())
    return out


def step_type(w, gaps: Gaps, keys: int = 40) -> dict:  # noqa: ANN001
    rng = random.Random(1)
    line = w.document.script.lines[len(w.document.script.lines) // 2]
    cursor = w.editor.textCursor()
    cursor.setPosition(line.end)
    w.editor.setTextCursor(cursor)
    w.editor.setFocus()
    run_for(0.3)
    gaps.reset()
    latencies, due = [], time.perf_counter()
    with profiled("type"):
        type_keys(w, rng, keys, latencies, due)
    settle(gaps, time.perf_counter())
    cuts = statistics.quantiles(latencies, n=10)
    return {"p50_ms": round(statistics.median(latencies), 1), "p90_ms": round(cuts[-1], 1),
            "max_ms": round(max(latencies), 1), **gaps.blocks_ms()}


def type_keys(w, rng: random.Random, keys: int, latencies: list[float], due: float) -> None:  # noqa: ANN001
    """`keys` key presses at human pauses (0.1-0.35 s), each one's latency from when it was due."""
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    for k in range(keys):
        due += rng.uniform(0.1, 0.35)
        while time.perf_counter() < due:
            run_for(min(0.005, max(due - time.perf_counter(), 0)))
        QTest.keyClick(w.editor, Qt.Key.Key_A if k % 5 else Qt.Key.Key_Space)
        QApplication.processEvents()
        latencies.append(1000 * (time.perf_counter() - due))


def step_render(w, gaps: Gaps, limit_s: float) -> dict:  # noqa: ANN001
    first: list[float] = []
    w.ctx.host.line_started.connect(lambda _e: first.append(time.perf_counter()) if not first else None)
    n = len(w.document.script.lines)
    action = w.actions_by_name["render_all"]
    if not wait_until(action.isEnabled, 120):  # a model (re)load after opening a project
        return {"error": "Render All stayed disabled"}
    run_for(0.1)
    gaps.reset()
    threads, children = thread_cpu(), children_cpu()
    with profiled("render"):
        started, gui_cpu, cpu = time.perf_counter(), time.thread_time(), time.process_time()
        action.trigger()
        trigger_cpu = time.thread_time() - gui_cpu
        done = wait_until(lambda: not w.flow.busy, limit_s)
        took = time.perf_counter() - started
        gui_cpu, cpu = time.thread_time() - gui_cpu, time.process_time() - cpu
        threads, children = cpu_by_thread(threads, thread_cpu(), cpu), children_cpu() - children
    finished = sum(1 for k in w.document.script.line_ids if w.document.project.current(k) is not None)
    blocks = gaps.blocks_ms()
    if not done:
        w.flow.cancel()
        wait_until(lambda: not w.flow.busy, 60)
    return {"first_line_s": round(first[0] - started, 3) if first else None, "lines": finished, "of": n,
            "s": round(took, 1), "lines_per_s": round(finished / took, 1), "complete": done,
            "trigger_cpu_ms": round(1000 * trigger_cpu, 1),
            "cpu_s": {"gui": round(gui_cpu, 1), "process": round(cpu, 1), "child processes": round(children, 1)},
            "cpu_s_by_thread": threads,
            **blocks, "rss_mb": round(rss_mb())}


def complete_takes(w) -> int:  # noqa: ANN001
    """Takes for the lines the render did not reach, made as the FakeEngine makes them, without the window."""
    import numpy as np

    from s2studio.audio import FRAME_SAMPLES, SAMPLE_RATE
    from s2studio.state.project import Take, now_iso
    from s2studio.state.staleness import take_settings

    project, made = w.document.project, 0
    settings = take_settings(project.settings)
    speakers = {s: i for i, s in enumerate(w.document.script.speakers)}
    for line in w.document.script.lines:
        if project.current(line.line_id) is not None:
            continue
        frames = max(8, len(line.text.encode()))
        n = np.arange(frames * FRAME_SAMPLES)
        audio = (0.2 * np.sin(2 * np.pi * 180 * 2 ** (speakers[line.speaker] / 5) * n / SAMPLE_RATE)).astype(np.float32)
        codes = np.random.default_rng(made).integers(0, 1024, size=(10, frames), dtype=np.int64)
        project.add_take(Take(f"synth{made:05d}", line.line_id, line.text, audio, codes, made, speaker=line.speaker,
                              voice=w.document.voice_key_of(line.speaker), settings=dict(settings), created=now_iso()))
        made += 1
    return made


def step_save(w, gaps: Gaps, path: Path) -> dict:  # noqa: ANN001
    saved: list[bool] = []
    out = timed(gaps, lambda: saved.append(w.projects.save_as(path)), step="save")
    if not saved[0]:
        return {"error": "not saved"}
    if not wait_until(lambda: not w.store.unsaved_work, 120):
        out["note"] = "still marked unsaved 120 s after"
    out["files"] = sum(1 for _ in path.rglob("*"))
    out["mb"] = round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6)
    return out


def step_autosave(w, gaps: Gaps) -> dict:  # noqa: ANN001
    cursor = w.editor.textCursor()
    cursor.setPosition(w.document.script.lines[len(w.document.script.lines) // 3].end)
    cursor.insertText(" Edited.")
    w.reparse()
    return timed(gaps, w.store.autosave_now if hasattr(w.store, "autosave_now") else lambda: None)


def step_navigate(w, gaps: Gaps) -> dict:  # noqa: ANN001
    from PySide6.QtCore import QPoint, Qt
    from PySide6.QtTest import QTest

    wave, out = w.player_bar.waveform, {}
    line = w.document.script.lines[len(w.document.script.lines) // 2]
    w.lines.select(line.line_id)
    settle(gaps, time.perf_counter())
    w.editor.setFocus()
    out["down_key"] = timed(gaps, lambda: [QTest.keyClick(w.editor, Qt.Key.Key_Down) for _ in range(10)])
    x = wave.width() // 3
    out["waveform_click"] = timed(gaps, lambda: QTest.mouseClick(wave, Qt.MouseButton.LeftButton,
                                                                 pos=QPoint(x, wave.height() // 2)))
    out["zoom_in_out"] = timed(gaps, lambda: ([wave.zoom_in() for _ in range(4)], wave.repaint(),
                                              [wave.zoom_out() for _ in range(4)], wave.repaint()))

    def repaint_fitted() -> None:
        wave.fit()
        wave.resize(wave.width() - 1, wave.height())  # a new size: every column drawn again
        wave.repaint()

    out["fit_repaint"] = timed(gaps, repaint_fitted)
    layout = w.timeline.layout

    def heard_lines() -> None:  # what the transport does when playback crosses into the next lines
        for track, start in list(zip(layout.tracks, layout.starts, strict=True))[100:110]:
            wave.set_playhead(int(start), moving=True)
            wave.set_current_line(track.line_id)
            found = w.document.script.line(track.line_id)
            w.editor.set_playing_block(found.source_line - 1 if found else -1)
            wave.repaint()

    out["line_changes"] = timed(gaps, heard_lines)
    return out


def step_export(w, gaps: Gaps, folder: Path, cap_gb: float) -> dict:  # noqa: ANN001
    """The mix as WAV, then 20 stems as FLAC, each through the export dialog's own code and threads."""
    from s2studio.ui.dialogs.export_dialog import ExportDialog

    out = {}
    names = {v.id: v.name for v in w.library.list()}
    for what in ("mix", "stems"):
        dialog = ExportDialog(w.document.project, w.document.script, w.model.info, names, [], w.ctx.settings, w, name="book")
        wait_until(lambda: dialog.ready, 600)  # its lines counted
        dialog.options.mix.setChecked(what == "mix")
        dialog.options.stems.setChecked(what == "stems")
        if hasattr(dialog, "stems_flac"):
            dialog.options.stems_flac.setChecked(True)
        dialog.options.format.setCurrentIndex(dialog.options.format.findData("wav"))
        (folder / what).mkdir(parents=True, exist_ok=True)
        dialog.options.out.setText(str(folder / what / "book.wav"))  # a folder each: the second export replaces
        dialog.options.stems_dir.setText(str(folder / what / "stems"))  # nothing (it would ask first)
        limit = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (int((rss_mb("VmSize") / 1024 + cap_gb) * 2 ** 30), limit[1]))
        run_for(0.05)
        reset_peak()
        before = rss_mb()
        gaps.reset()
        started = time.perf_counter()
        try:
            dialog.start()
            wait_until(lambda: not dialog._task.running and not getattr(dialog, "_phase", ""), 3600)
        finally:
            resource.setrlimit(resource.RLIMIT_AS, limit)
        out[what] = {"s": round(time.perf_counter() - started, 2), **gaps.blocks_ms(),
                     "peak_mb": round(rss_mb("VmHWM")), "before_mb": round(before), "status": dialog.status.text()[:100]}
        dialog.deleteLater()
    return out


WITHOUT = ""
PASSES = 0
WHY: Path | None = None
PROFILE = ""
PROFILE_STEP = "render"
BOOK: Path | None = None


def reopen_child(path: Path) -> dict:
    """In a fresh process: open the saved project until idle; time, longest block and RSS."""
    data = Path(tempfile.mkdtemp(prefix="long-form-reopen-"))
    os.environ["S2STUDIO_DATA_DIR"] = str(data)
    w = open_window(data, 0.0)
    gaps = Gaps()
    from s2studio.ui.control.slices import Slices

    assert w.findChildren(Slices), "the window's slices are not found"
    out = timed(gaps, lambda: w.projects.open(path), quiet_s=0.5, step="reopen", done=lambda: opening_done(w))
    out["rss_mb"] = round(rss_mb())
    close_window(w)
    return out


# -- the run ---------------------------------------------------------------------------------------


def measure(size: int, steps: set[str], engines: list[str], limit_s: float, cap_gb: float, root: Path) -> dict:
    """Every step at one size: the first engine's window goes on to save, reopen, navigate and export."""
    text, result = book(size), {"lines": size}
    folder = root / f"n{size}"
    folder.mkdir(parents=True, exist_ok=True)
    saved = folder / "book.s2proj"
    for engine in engines:
        os.environ["S2STUDIO_DATA_DIR"] = str(folder / f"data-{engine}")
        w = open_window(folder, 0.0 if engine == "instant" else 0.0005)
        gaps = Gaps()

        def step(name: str, run, wanted: bool = True) -> None:  # noqa: ANN001
            if wanted and name.split(" ")[0] in steps:
                note(f"{size} lines: {name}")
                result[name.replace(" (", "_").rstrip(")")] = run()

        w.editor.setPlainText(text)
        w.reparse()
        first = engine == engines[0]
        step("open", lambda: step_open(w, gaps, text, folder), first)
        step("type", lambda: step_type(w, gaps), first)
        step(f"render ({engine})", lambda: step_render(w, gaps, limit_s))
        if first and BOOK is not None and "render" not in steps:  # a book rendered and saved by an earlier run
            w.projects.open(BOOK)
            settle(gaps, time.perf_counter())
            saved = BOOK if "save" not in steps else folder / f"book-copy-{time.strftime('%H%M%S')}.s2proj"
        elif first and steps & {"save", "autosave", "reopen", "navigate", "export"}:  # steps on a rendered book
            result["takes_made_without_the_window"] = complete_takes(w)
        if first and steps & {"save", "autosave", "reopen", "navigate", "export"}:
            step("save", lambda: step_save(w, gaps, saved))
            if "save" not in steps and saved != BOOK:
                w.projects.save_as(saved)
                wait_until(lambda: not w.store.unsaved_work, 600)
            step("autosave", lambda: step_autosave(w, gaps))
            if steps & {"navigate", "export"}:
                w.projects.open(saved)
                settle(gaps, time.perf_counter())
            step("navigate", lambda: step_navigate(w, gaps))
            step("export", lambda: step_export(w, gaps, folder / "export", cap_gb))
        close_window(w)
    if "reopen" in steps:
        note(f"{size} lines: reopen")
        profile = ["--profile", PROFILE, "--profile-step", "reopen"] if PROFILE and PROFILE_STEP == "reopen" else []
        profile += ["--passes", str(PASSES)] if PASSES else []
        child = subprocess.run([sys.executable, __file__, "--reopen", str(saved), *profile],
                               capture_output=True, text=True, timeout=3600)
        rows = [r for r in child.stdout.splitlines() if r.startswith("{")]
        result["reopen"] = json.loads(rows[-1]) if rows else {"error": child.stderr[-300:]}
        sys.stderr.write("".join(r + "\n" for r in child.stderr.splitlines() if "propagateSizeHints" not in r))
    return result


def show(result: dict) -> None:
    print(f"\n== {result['lines']:,} lines")
    for key, value in result.items():
        if key != "lines":
            print(f"  {key:<18} {json.dumps(value)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--steps", default=",".join(STEPS), help="any of " + ",".join(STEPS))
    parser.add_argument("--engine", default="instant,paced", help="instant, paced or both (instant first)")
    parser.add_argument("--render-limit", type=float, default=600.0, help="seconds a render may take")
    parser.add_argument("--export-cap-gb", type=float, default=8.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--without", default="", choices=["", "autosave"],
                        help="autosave: no autosave during the steps (to see the rest of the studio's cost)")
    parser.add_argument("--profile", default="", help="write a cProfile of the GUI thread during a step to this file")
    parser.add_argument("--profile-step", default="render",
                        choices=["paste", "open", "type", "render", "save", "reopen"])
    parser.add_argument("--passes", type=int, default=0,
                        help="print the N passes of the window's thread with the most CPU in each step, with what ran")
    parser.add_argument("--why", type=Path, help="append a line per block of the window over 35 ms to this file: "
                        "its own run time, its wait for a core, the rest asleep, the other threads that ran (Linux)")
    parser.add_argument("--root", type=Path, help="keep the run's files (scripts, saved books) in this folder")
    parser.add_argument("--book", type=Path, help="a rendered book saved by an earlier run (--root DIR: "
                        "DIR/n10000/book.s2proj): without the render step, save and reopen use it")
    parser.add_argument("--reopen", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    faulthandler.enable()  # a crash prints every thread's stack
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>`: where a step is stuck
    global WITHOUT, PROFILE  # noqa: PLW0603 - options read by every step
    global PROFILE_STEP, BOOK, PASSES, WHY  # noqa: PLW0603
    WITHOUT, PROFILE, PROFILE_STEP, BOOK, WHY = args.without, args.profile, args.profile_step, args.book, args.why
    PASSES = args.passes
    if PASSES and PROFILE:
        parser.error("--passes profiles every pass: not with --profile")
    if args.reopen:
        print(json.dumps(reopen_child(args.reopen)))
        return 0
    steps = set(args.steps.split(","))
    unknown = steps - set(STEPS)
    if unknown:
        parser.error(f"unknown steps: {', '.join(sorted(unknown))}")
    root = args.root or Path(tempfile.mkdtemp(prefix="long-form-"))
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        results.append(measure(size, steps, args.engine.split(","), args.render_limit, args.export_cap_gb, root))
        show(results[-1])
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
