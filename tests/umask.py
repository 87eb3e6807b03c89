"""A test that checks the modes of what S2 Studio writes sets the process umask for its run: the writer reads the
umask once per process (`state/disk.umask`), so the set is followed by forgetting that reading, before and after."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from s2studio.state.disk import umask


@contextmanager
def umask_set(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    umask.cache_clear()
    try:
        yield
    finally:
        os.umask(old)
        umask.cache_clear()
