"""Full garbage collections walk only what is new: what survived one is frozen until another project is opened."""

from __future__ import annotations

import gc
import weakref

from s2studio.ui.control import heap


class Node:
    me: Node


def test_survivors_of_a_full_collection_stay_frozen_until_released() -> None:
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
        heap.release()
        gc.collect()
        assert ref() is None
    finally:
        if not installed:
            gc.callbacks.remove(heap._collected)
        gc.unfreeze()
