"""How many CPU threads torch uses, and how they wait: decided once per process, before torch is imported.

A desktop is never idle (a browser, a DAW, the studio's own GUI thread), and on a busy machine OpenMP's default
wait policy is the slowest choice there is: between parallel regions each worker spins for a while, so a worker
that lost its core to another program holds the whole team up while the others burn the cores it needs (on a
2-core machine with other work running, 2-thread runs were 3-18x slower than 1 thread; with passive waiting the
mid model went from 2584 to 145 ms per frame). OpenMP reads its settings once, when torch's library
initialises it, so they are environment variables that must be set before `import torch`: `prepare_threads()`
is called first thing by `cli.main`, the one entry point of the studio, every CLI command and the server
(the console script, `python -m s2studio` and the bundled app all go through it).

The thread count defaults to the cores this process may use (`os.sched_getaffinity`) less the ones other work
keeps busy (the 1-minute load average), at least 1; `--threads` and the studio's Threads setting override it
(`engine/s2/device.py:set_threads`). A person's own OMP_WAIT_POLICY or OMP_NUM_THREADS is kept as it is.

The thread count is part of the CPU's bits (reduction orders depend on it): pass `--threads N` for codes that
do not depend on how busy the machine was when the model loaded.
"""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger(__name__)

WAIT_POLICY = "OMP_WAIT_POLICY"
NUM_THREADS = "OMP_NUM_THREADS"
DEFAULT_WAIT_POLICY = "PASSIVE"
"""Workers sleep as soon as a parallel region ends: never slower than spinning by more than a wake-up
(microseconds, against milliseconds per layer), and much faster when a core is taken."""

_prepared = False


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def busy_cores() -> float:
    """Cores other work keeps busy: the 1-minute load average (0 where the OS has none, Windows)."""
    try:
        return max(0.0, os.getloadavg()[0])
    except (AttributeError, OSError):
        return 0.0


def free_cores(usable: int | None = None, busy: float | None = None) -> int:
    """The default thread count: usable cores less the busy ones, rounded to the nearest, at least 1."""
    usable = usable_cores() if usable is None else usable
    busy = busy_cores() if busy is None else busy
    return max(1, min(usable, round(usable - busy)))


def prepare_threads() -> None:
    """Set OpenMP's wait policy and default thread count for this process, unless the person set them; call it
    before torch is imported (later it changes nothing, and says so in the log). Runs once per process."""
    global _prepared
    if _prepared:
        return
    _prepared = True
    if "torch" in sys.modules:
        log.info("torch was imported before the thread settings; OpenMP keeps its defaults")
        return
    os.environ.setdefault(WAIT_POLICY, DEFAULT_WAIT_POLICY)
    os.environ.setdefault(NUM_THREADS, str(free_cores()))
    log.info("%s=%s, %s=%s", WAIT_POLICY, os.environ[WAIT_POLICY], NUM_THREADS, os.environ[NUM_THREADS])
