"""A full garbage collection asked for by code of any layer, run on the thread that may run it.

Python's cycle collector frees whatever garbage it finds, whoever made it. In the studio's window process that
can be Qt objects (a window's parts in a reference cycle), and Qt destroys an object safely only on its own
thread: there the window runs every collection on its thread (`ui.control.heap.collect_on_window_thread`) and
routes `collect` there. The layers below the window (the engine freeing a model, a project being read) cannot
import it, so they call `collect` here. Where nothing was routed (the command line, the server, a training
process, tests) it collects at once, on the calling thread. Imports nothing of the package."""

from __future__ import annotations

import gc
from collections.abc import Callable

_route: Callable[[], None] | None = None


def collect() -> None:
    """A full collection, done when this returns: here, or where it was routed (which may give up waiting when
    that thread is held up; see there)."""
    route = _route
    if route is None:
        gc.collect()
    else:
        route()


def route(to: Callable[[], None] | None) -> None:
    """From now on `collect` calls `to` (None: collect on the calling thread again)."""
    global _route  # noqa: PLW0603 - one route per process
    _route = to
