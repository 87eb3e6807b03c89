"""In the studio's window process every garbage collection runs on the window's thread (`heap.WindowCollections`):
a Qt object in a reference cycle made garbage while another thread allocates is destroyed there, once the event
loop runs; collections other threads ask for run there; a project read still runs none. Without it (the command
line, the server) Python collects as before."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from PySide6.QtCore import QObject

from s2studio import garbage
from s2studio.ui.control import heap

CHURN = 100_000
"""Objects a thread makes and keeps: past every generation's threshold (700, 10 and 10 by default) many times."""


class Cycle:
    """A Qt object held by a reference cycle: only the collector frees it. Where it was destroyed is recorded."""

    def __init__(self, threads: list[int]) -> None:
        self.me = self
        self.threads = threads
        self.obj = QObject()
        self.obj.destroyed.connect(lambda: threads.append(threading.get_ident()))

    def __del__(self) -> None:
        self.threads.append(threading.get_ident())


def on_thread(work: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=work, name="worker")
    thread.start()
    return thread


def churn(kept: list[object]) -> Callable[[], None]:
    return lambda: kept.append([[] for _ in range(CHURN)])


@pytest.fixture
def collections(qapp: Any) -> Iterator[heap.WindowCollections]:
    had_callback = heap._collected in gc.callbacks
    policy = heap.collect_on_window_thread()
    try:
        yield policy
    finally:
        policy.stop()
        if not had_callback:
            gc.callbacks.remove(heap._collected)
        gc.unfreeze()


@pytest.fixture
def generations() -> Iterator[list[tuple[int, int]]]:
    """(generation, thread) of each collection that starts."""
    seen: list[tuple[int, int]] = []

    def record(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            seen.append((info["generation"], threading.get_ident()))

    gc.callbacks.append(record)
    try:
        yield seen
    finally:
        gc.callbacks.remove(record)


def test_a_qt_object_made_garbage_while_another_thread_allocates_is_destroyed_on_the_window_thread(
        qtbot: Any, collections: heap.WindowCollections) -> None:
    assert not gc.isenabled()
    window, destroyed, kept = threading.get_ident(), [], []
    Cycle(destroyed)  # garbage at once, in a cycle
    worker = on_thread(churn(kept))
    worker.join()
    assert destroyed == []  # the worker passed every threshold and collected nothing
    assert gc.get_count()[0] > CHURN
    qtbot.waitUntil(lambda: len(destroyed) == 2, timeout=5000)
    assert destroyed == [window, window]  # the Python object, then its Qt object
    assert gc.get_count()[0] < gc.get_threshold()[0]  # the counts came back down
    kept.clear()


def test_a_collection_another_thread_asks_for_runs_on_the_window_thread_and_is_waited_for(
        qtbot: Any, collections: heap.WindowCollections, generations: list[tuple[int, int]]) -> None:
    window, freed_by_then = threading.get_ident(), []
    frozen = Cycle([])
    gc.freeze()  # only a full collection of what was frozen frees it (what the engine's unload asks for)
    ref = weakref.ref(frozen)
    del frozen

    def unload() -> None:
        gc.unfreeze()
        garbage.collect()
        freed_by_then.append(ref() is None)

    worker = on_thread(unload)
    qtbot.waitUntil(lambda: not worker.is_alive(), timeout=5000)
    assert freed_by_then == [True]
    assert [thread for generation, thread in generations if generation == 2] == [window]


def test_the_window_thread_collects_what_the_automatic_collector_would(
        collections: heap.WindowCollections, generations: list[tuple[int, int]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Generation 0 once its count passes its threshold, 1 once 0 was collected more often than its threshold, 2
    likewise, or instead of 1 where that would leave `OLD_MOST` objects in the old generation; a count past the
    threshold many times over counts as that many collections."""
    thresholds = gc.get_threshold()
    gc.set_threshold(100, 2, 2)
    kept: list[object] = []

    def ticks(n: int) -> list[int]:
        del generations[:]
        for _ in range(n):
            kept.append([[] for _ in range(150)])
            collections.tick()
        collections.tick()  # nothing is due: nothing runs
        return [generation for generation, _ in generations]

    try:
        gc.collect()
        assert ticks(13) == [0, 0, 0, 1] * 3 + [2]
        assert len(gc.get_objects(generation=2)) == 0  # the survivors of the full collection are frozen
        monkeypatch.setattr(heap, "OLD_MOST", 500)
        assert ticks(7) == [0, 0, 0, 2, 0, 0, 0]  # 604 objects would move up at the fourth: walked and frozen
        assert len(gc.get_objects(generation=2)) == 0
        assert gc.get_count()[0] < 100
        gc.collect()
        del generations[:]
        kept.append([[] for _ in range(1350)])  # 13 times the first threshold at one look: what 13 collections would do
        collections.tick()
        assert [generation for generation, _ in generations] == [2]
    finally:
        gc.set_threshold(*thresholds)


@pytest.mark.parametrize("context", ["reading", "paused"])
def test_no_collection_runs_while_a_project_is_read_or_written_and_automatic_collection_stays_off(
        qtbot: Any, collections: heap.WindowCollections, generations: list[tuple[int, int]], context: str) -> None:
    inside, leave, kept, enabled = threading.Event(), threading.Event(), [], []
    during: list[int] = []

    def read() -> None:
        with getattr(heap, context)():
            del generations[:]
            inside.set()
            kept.append([[] for _ in range(CHURN)])
            leave.wait(10)
            during.extend(g for g, _ in generations)
        enabled.append(gc.isenabled())

    worker = on_thread(read)
    qtbot.waitUntil(inside.is_set, timeout=5000)
    qtbot.wait(200)  # the window's timer looks several times, with the counts past every threshold
    leave.set()
    qtbot.waitUntil(lambda: not worker.is_alive(), timeout=5000)
    assert during == []
    assert enabled == [False] and not gc.isenabled()
    kept.clear()


def test_the_reads_one_collection_runs_on_the_window_thread_before_the_read(
        qtbot: Any, collections: heap.WindowCollections, generations: list[tuple[int, int]]) -> None:
    window, started = threading.get_ident(), []
    gc.collect()  # (nothing else due meanwhile)
    del generations[:]

    def read() -> None:
        with heap.reading():
            started.append(list(generations))

    worker = on_thread(read)
    qtbot.waitUntil(lambda: not worker.is_alive(), timeout=5000)
    assert started == [[(2, window)]]


def test_without_the_window_collections_python_collects_on_the_thread_that_allocates(qapp: Any) -> None:
    """The command line's and the server's process (no Qt object here: one destroyed off its thread is what the
    window's collections exist to avoid)."""
    assert gc.isenabled()
    freed: list[int] = []

    class Plain:
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            freed.append(threading.get_ident())

    gc.collect()  # (nothing due on this thread meanwhile)
    Plain()
    kept: list[object] = []
    worker = on_thread(churn(kept))
    worker.join()
    assert freed == [worker.ident]
    gc.collect()
    Plain()
    asked = on_thread(garbage.collect)
    asked.join()
    assert freed == [worker.ident, asked.ident]
