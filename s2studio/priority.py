"""The studio's background threads give way to the window's: a lower scheduling priority for the thread that calls
`background`.

Threads share the interpreter in turns, and the cores by the system's scheduler: while a book renders, the engine,
the project writer and its encoders, the peaks and the take checks all want a core, and the window's thread, as
one of many, waited for one several times as long as it ran. The system's scheduler shares the cores by the
threads' nice values: the window's thread, which runs briefly and then waits for events, is run soon after it
wakes, ahead of threads that rank below it; when the window is idle the background threads still have every core,
and a render is as fast.

Linux only, where the nice value is a thread's own and the threads and processes a thread starts inherit it.
Elsewhere (where it belongs to the process, or the call could reach another process by the thread's number) it
does nothing. Imports nothing of the package."""

from __future__ import annotations

import logging
import os
import sys
import threading

logger = logging.getLogger(__name__)

BACKGROUND_NICE = 5
"""How far below the window's thread the background threads run (the system gives a thread of nice 5 about a
third of the CPU it gives one of nice 0 when both want it)."""


def background() -> None:
    """Lower the calling thread's priority to `BACKGROUND_NICE` (once; never raised back: only a privileged
    process may)."""
    if not sys.platform.startswith("linux"):
        return
    thread = threading.get_native_id()
    try:
        if os.getpriority(os.PRIO_PROCESS, thread) < BACKGROUND_NICE:
            os.setpriority(os.PRIO_PROCESS, thread, BACKGROUND_NICE)
    except OSError as exc:  # e.g. a sandbox that forbids it: the thread runs as it was
        logger.info("could not lower the priority of the thread %s: %s", threading.current_thread().name, exc)
