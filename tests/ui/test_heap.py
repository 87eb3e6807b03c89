"""Full garbage collections walk only what is new: what survived one is frozen until another project is read, and
what a project read (or shown) made is frozen at once."""

from __future__ import annotations

import gc
import weakref

from s2studio.ui.control import heap


class Node:
    me: Node


def test_survivors_of_a_full_collection_stay_frozen_until_another_project_is_read() -> None:
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
        with heap.reading():  # another project read: the collections it causes free the old cycles
            gc.collect()
            assert ref() is None
            read = Node()
            read.me = read
        assert gc.get_freeze_count() > 0
        kept = weakref.ref(read)
        del read
        gc.collect()
        assert kept() is not None  # what was read is frozen at once: no full collection walks it
        gc.unfreeze()
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
