"""Where a long block of the window's thread went (Linux): its own run time, its wait for a core, and the rest,
asleep (the interpreter's lock held by another thread, a lock, the disk); and each other thread's run time in it.
Read from the scheduler's counters of every thread of this process (`/proc/self/task/*/schedstat`), so the
window's thread spends a few tens of microseconds a look and nothing samples it. `bench/long_form.py --why FILE`
writes one line per block over 35 ms."""

from __future__ import annotations

import os
import threading

Snapshot = dict[int, tuple[int, int]]
"""Thread id -> (ns run on a core, ns waited for one), since the thread started."""


def snapshot() -> Snapshot:
    times: Snapshot = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                run, wait, _ = f.read().split()
        except (OSError, ValueError):
            continue  # ended meanwhile
        times[int(tid)] = (int(run), int(wait))
    return times


def explain(gap_s: float, before: Snapshot, after: Snapshot, window: int) -> dict[str, object]:
    """The block of `gap_s` between two snapshots: the window thread's (`window`: its native id) run, wait for a
    core and the rest; the other threads that ran over 2 ms in it, by name, most first."""
    names = {t.native_id: t.name for t in threading.enumerate()}

    def ms(ns: int) -> float:
        return round(ns / 1e6, 1)

    ran = {tid: after[tid][0] - before.get(tid, (0, 0))[0] for tid in after}
    own_run = ran.get(window, 0)
    own_wait = after.get(window, (0, 0))[1] - before.get(window, (0, 0))[1]
    others = sorted(((ns, names.get(tid, f"thread {tid}")) for tid, ns in ran.items() if tid != window and ns > 2e6),
                    reverse=True)
    return {"block_ms": round(gap_s * 1e3, 1), "run_ms": ms(own_run), "core_wait_ms": ms(own_wait),
            "asleep_ms": max(0.0, round(gap_s * 1e3 - own_run / 1e6 - own_wait / 1e6, 1)),
            "others_ms": {name: ms(ns) for ns, name in others[:8]}}
