"""Full garbage collections walk only what is new: what survived one stays frozen, another project's read too,
and what a project read (or shown) made is frozen at once."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from s2studio.state.project import Project, Take
from s2studio.state.project_folder import ProjectFolder
from s2studio.state.project_journal import capture
from s2studio.ui.control import heap


class Node:
    me: Node


def test_survivors_of_a_full_collection_stay_frozen_and_what_a_read_makes_is_frozen_at_once() -> None:
    installed = heap._collected in gc.callbacks
    heap.install()
    try:
        node = Node()
        node.me = node  # a cycle: only the collector frees it
        ref = weakref.ref(node)
        gc.collect()
        assert gc.get_freeze_count() > 0
        del node
        gc.collect()
        assert ref() is not None  # frozen: the full collection did not walk it
        young = Node()
        young.me = young
        young_ref = weakref.ref(young)
        del young
        with heap.reading():  # another project read: one collection of what is not frozen, before it
            assert young_ref() is None
            assert ref() is not None  # what is frozen is not walked again, a read's collection neither
            read = Node()
            read.me = read
        assert gc.get_freeze_count() > 0
        kept = weakref.ref(read)
        del read
        gc.collect()
        assert kept() is not None  # what was read is frozen at once: no full collection walks it
        shown = Node()
        shown.me = shown
        shown_ref = weakref.ref(shown)
        heap.keep()  # what was made to show it
        del shown
        gc.collect()
        assert shown_ref() is not None
    finally:
        if not installed:
            gc.callbacks.remove(heap._collected)
        gc.unfreeze()
        gc.collect()


def test_no_collection_runs_while_a_project_of_thousands_of_takes_is_read(tmp_path: Path) -> None:
    """Each full collection during a read walks every object again while every thread waits: none runs there, and
    the collector runs again after it, with the project read frozen."""
    n = 2000
    p = Project(script="".join(f"Ann: Line {i}.\n" for i in range(n)), line_ids=[f"l{i}" for i in range(n)])
    for i in range(n):
        p.add_take(Take(f"t{i:04d}", f"l{i}", f"Line {i}.", np.full(20, i / 1000, np.float32),
                        np.full((4, 2), i, np.int64), i))
    ProjectFolder(tmp_path / "p.s2proj").save(capture(p))
    del p
    collections: list[int] = []

    def counted(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    try:
        with heap.reading():
            gc.callbacks.append(counted)
            folder, opened = ProjectFolder.open(tmp_path / "p.s2proj")
            gc.callbacks.remove(counted)
        assert sum(len(line.takes) for line in opened.project.lines.values()) == n
        assert collections == []
        assert gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        if counted in gc.callbacks:
            gc.callbacks.remove(counted)
        gc.unfreeze()


def test_what_a_project_job_made_is_frozen_when_it_ends(qtbot: Any) -> None:
    """A save's document as written lives until the next save: no full collection walks it."""
    from s2studio.ui.control.write_queue import WriteQueue

    queue = WriteQueue()
    ended: list[object] = []
    queue.finished.connect(lambda _ticket, result, _error: ended.append(result))

    def work(_task: object) -> object:
        made = Node()
        made.me = made
        return made

    try:
        gc.collect()
        queue.submit("save", lambda: work)
        qtbot.waitUntil(lambda: bool(ended), timeout=5000)
        made = ended[0]
        assert isinstance(made, Node)
        assert not any(o is made for o in gc.get_objects())  # frozen: listed by no generation a collection walks
        gc.unfreeze()
        assert any(o is made for o in gc.get_objects())
    finally:
        gc.unfreeze()
        queue.deleteLater()
