"""When glibc gives freed memory back to the system (Linux with glibc; elsewhere both calls do nothing).

glibc serves a buffer of at least its "mmap threshold" from a mapping of its own, unmapped when it is freed;
smaller ones come from its heaps (one per thread that allocates, up to eight per core), whose free space goes
back to the system only from a heap's top. The threshold starts at 128 KB and grows to the size of every mapped
buffer freed, up to 32 MB, so that a process that keeps making and freeing arrays of a few hundred KB on several
threads (a render's audio: each take through the engine, the window, the writer and its encoders) soon makes
them in the heaps, and the holes they leave between the objects that stay keep its resident memory up.

Two ways out, each for its process: a fixed threshold (`map_large_buffers`: every buffer above it is returned
when freed, at the price of a fresh mapping, and its page faults, for each: what a server whose large buffers
are a request's does), or handing the free pages inside the heaps back now and then (`release_free_pages`: what
the studio does, whose engine reuses its heaps' buffers at every step and would slow down with its own mapping
for each)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

M_MMAP_THRESHOLD = -3
"""`mallopt`'s parameter for the threshold (glibc's malloc.h); setting it also stops the threshold's growth."""


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def map_large_buffers(threshold: int) -> bool:
    """Give every buffer of `threshold` bytes or more a mapping of its own from now on, returned to the system
    when it is freed. False where this is not glibc (nothing changes)."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    return bool(mallopt(M_MMAP_THRESHOLD, int(threshold))) if mallopt is not None else False


def release_free_pages() -> bool:
    """Hand the whole free pages inside every heap of this process back to the system (`malloc_trim(0)`; they
    come back zeroed on their next use). It walks each heap's free lists while holding that heap's lock: a few
    milliseconds, on the calling thread. False where this is not glibc."""
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None)
    return bool(trim(0)) if trim is not None else False
