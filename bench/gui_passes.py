"""The window's thread's longest passes during a bench step, each with what ran in it.

A bench's 10 ms timer on the window's thread (`long_form.Gaps`) says how much CPU the thread used between two of
its ticks; the longest such pass is the step's block. To see every pass that is too long (not only the longest),
`PassLog` keeps the N longest, each with a profile of that pass alone: a fresh `cProfile` (on the window's thread's
CPU clock) is started at every tick and kept only when its pass is among the longest. The garbage collector's
time in the pass is beside it (`gc.callbacks`: a collection is not a Python call, so a profile shows it only as a
gap between the functions' times and the pass's CPU). Profiling slows Python code down (about 1.5-2x on the
window's thread), so the passes' CPU under `--passes` is larger than without it: read them for what ran and how
the passes compare, the figures without it for the block. One profiler at a time: not with `--profile`.
"""

from __future__ import annotations

import cProfile
import gc
import heapq
import io
import pstats
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = f"{Path(__file__).resolve().parents[1]}/"
"""The repository's folder, left out of the profiles' file names."""


@dataclass(order=True)
class Pass:
    cpu_ms: float
    at_s: float = field(compare=False)
    """Seconds from the log's start to the pass's end."""
    gc_ms: float = field(compare=False)
    """Garbage collections in the pass (wall time, any thread's: the window's thread waits for them either way)."""
    gc_generations: tuple[int, ...] = field(compare=False)
    top: str = field(compare=False)
    """The pass's profile: its functions with the most time of their own and the project's with the most in all."""


def _summary(profile: cProfile.Profile, rows: int) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("tottime").print_stats(rows)
    own = out.getvalue()
    out.truncate(0)
    out.seek(0)
    stats.sort_stats("cumulative").print_stats("s2studio", rows)
    keep = [ln.replace(ROOT, "") for ln in (own + out.getvalue()).splitlines()
            if ln.strip() and ("(" in ln or "ncalls" in ln) and "function calls" not in ln]
    return "\n".join("      " + ln for ln in keep)


class PassLog:
    """The `keep` passes with the most CPU of the window's thread since `start`, each with its profile."""

    def __init__(self, keep: int = 10, rows: int = 8) -> None:
        self.keep, self.rows = keep, rows
        self.passes: list[Pass] = []
        self._profile: cProfile.Profile | None = None
        self._started = self._gc_at = 0.0
        self._gc_s = 0.0
        self._generations: list[int] = []
        self.running = False

    def _collection(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_at = time.perf_counter()
        else:
            self._gc_s += time.perf_counter() - self._gc_at
            self._generations.append(info.get("generation", -1))

    def start(self) -> None:
        self.passes, self.running = [], True
        self._started = time.perf_counter()
        if self._collection not in gc.callbacks:
            gc.callbacks.append(self._collection)
        self._next()

    def _next(self) -> None:
        if self._profile is not None:
            self._profile.disable()
        self._gc_s, self._generations = 0.0, []
        self._profile = cProfile.Profile(time.thread_time)
        self._profile.enable()

    def tick(self, cpu_s: float) -> None:
        """The pass that ended now used `cpu_s` of the window's thread."""
        if not self.running or self._profile is None:
            return
        self._profile.disable()
        cpu_ms = 1000 * cpu_s
        if len(self.passes) < self.keep or cpu_ms > self.passes[0].cpu_ms:
            found = Pass(round(cpu_ms, 1), round(time.perf_counter() - self._started, 2), round(1000 * self._gc_s, 1),
                         tuple(self._generations), _summary(self._profile, self.rows))
            (heapq.heappush if len(self.passes) < self.keep else heapq.heapreplace)(self.passes, found)
        self._next()

    def stop(self) -> list[Pass]:
        """The passes kept, the longest first."""
        if self._profile is not None:
            self._profile.disable()
        self._profile, self.running = None, False
        if self._collection in gc.callbacks:
            gc.callbacks.remove(self._collection)
        return sorted(self.passes, reverse=True)

    @staticmethod
    def show(passes: list[Pass]) -> str:
        rows = []
        for p in passes:
            rows.append(f"  pass at {p.at_s:.2f} s: {p.cpu_ms:.1f} ms CPU, garbage collection {p.gc_ms:.1f} ms "
                        f"(generations {list(p.gc_generations)})\n{p.top}")
        return "\n".join(rows)
