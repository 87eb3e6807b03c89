"""Weights on 2 MiB pages (Linux's transparent huge pages), so that a decode step streams them at memory speed.

A decode step reads every weight once, front to back: S2 Pro's int8 frame is ~4 GB over ~370 calls. On 4 KiB pages
that is a new page every 4 KiB, each a TLB miss and a page the hardware prefetcher will not run into; on 2 MiB
pages the same read has 512x fewer. On this project's 2-core AVX2 machine, torch.sum over 1 GiB reads ~20 % faster
from 2 MiB pages, and the CPU kernels' S2-shaped layers 5-35 % (bench/gemv_speed.py, interleaved). Most Linux
systems run huge pages in "madvise" mode: a program gets them only where it asks (`madvise(MADV_HUGEPAGE)`).

`on_huge_pages(t)` copies a large weight into memory that starts on a 2 MiB boundary and is advised so before it
is touched (the page faults of the copy then take whole huge pages); memory that the allocator recycles was
already touched in 4 KiB pages, so the range is also collapsed in place (`MADV_COLLAPSE`, Linux 6.1+) where the
kernel has that. The copy holds the same bytes: nothing computed changes. The 2 MiB of address space before the
boundary is never touched, so it costs no memory; the tail after the last whole huge page stays on 4 KiB pages.
Elsewhere (another OS, huge pages off, a device tensor, a small weight) the tensor is returned as it is.
"""

from __future__ import annotations

import ctypes
import logging
import sys

import torch
from torch import Tensor

log = logging.getLogger(__name__)

HUGE_PAGE = 2 << 20
MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25
"""Linux's advice values (asm-generic/mman-common.h; Python's mmap module has no MADV_COLLAPSE before 3.13)."""

_madvise = None


def _libc_madvise():
    global _madvise
    if _madvise is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.madvise.restype = ctypes.c_int
        _madvise = libc.madvise
    return _madvise


def huge_pages_offered() -> bool:
    """True on Linux when transparent huge pages are "always" or "madvise" (the active mode is in brackets)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled", encoding="ascii") as f:
            mode = f.read()
    except OSError:
        return False
    return "[never]" not in mode


def on_huge_pages(t: Tensor) -> Tensor:
    """`t`'s values in a fresh contiguous CPU tensor on 2 MiB pages, or `t` itself where that cannot be had or
    gains nothing (under one huge page, not on the CPU, huge pages off)."""
    nbytes = t.numel() * t.element_size()
    if t.device.type != "cpu" or nbytes < HUGE_PAGE or not huge_pages_offered():
        return t
    raw = torch.empty(nbytes + HUGE_PAGE, dtype=torch.uint8)
    offset = -raw.data_ptr() % HUGE_PAGE
    start, whole = raw.data_ptr() + offset, nbytes // HUGE_PAGE * HUGE_PAGE
    madvise = _libc_madvise()
    if madvise(start, whole, MADV_HUGEPAGE) != 0:
        log.debug("madvise(MADV_HUGEPAGE) refused (errno %d); the weight stays on 4 KiB pages", ctypes.get_errno())
        return t
    region = raw.narrow(0, offset, nbytes)
    region.copy_(t.contiguous().view(-1).view(torch.uint8))
    madvise(start, whole, MADV_COLLAPSE)  # recycled pages, already touched; refused by kernels before 6.1: no matter
    return region.view(t.dtype).view(t.shape)


def huge_page_bytes(t: Tensor) -> int:
    """Bytes on huge pages in the mappings that hold `t`, from /proc/self/smaps (for tests and benchmarks: the
    advised range is a mapping of its own, so this is `t`'s own count plus at most its 4 KiB tail's neighbours';
    0 where unknown)."""
    start, end = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
    try:
        with open("/proc/self/smaps", encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return 0
    total, inside = 0, False
    low = high = 0
    for line in lines:
        head = line.split(None, 1)[0]
        if "-" in head and not head.endswith(":"):
            low, high = (int(v, 16) for v in head.split("-"))
            inside = low < end and high > start
        elif inside and head == "AnonHugePages:":
            total += int(line.split()[1]) * 1024
    return total
