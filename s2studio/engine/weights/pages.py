"""Weights on 2 MiB pages (Linux's transparent huge pages), so that a decode step streams them at memory speed.

A decode step reads every weight once, front to back: S2 Pro's int8 frame is ~4 GB over ~370 calls. On 4 KiB pages
that is a new page every 4 KiB, each a TLB miss and a page the hardware prefetcher will not run into; on 2 MiB
pages the same read has 512x fewer. On this project's 2-core AVX2 machine, torch.sum over 1 GiB reads ~20 % faster
from 2 MiB pages, and the CPU kernels' S2-shaped layers 5-35 % (bench/gemv_speed.py, interleaved). Most Linux
systems run huge pages in "madvise" mode: a program gets them only where it asks (`madvise(MADV_HUGEPAGE)`).

`on_huge_pages(t)` copies a large weight into a fresh anonymous mapping of its own (`mmap`), advised so from a
2 MiB boundary on before anything touches it: the copy's page faults then take whole huge pages, and nothing is
copied twice. (Memory that torch's allocator recycles was already touched in 4 KiB pages; making it huge after the
fact, `MADV_COLLAPSE`, is a second copy done by the kernel: measured, that made the copy twice a clone's time.)
The copy holds the same bytes: nothing computed changes. The up to 2 MiB of address space before the boundary is
never touched, so it costs no memory; the tail after the last whole huge page stays on 4 KiB pages. The mapping is
freed with the last tensor that uses it. Elsewhere (another OS, huge pages off, a device tensor, a small weight)
the tensor is returned as it is.
"""

from __future__ import annotations

import logging
import mmap
import sys

import torch
from torch import Tensor

log = logging.getLogger(__name__)

HUGE_PAGE = 2 << 20
MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", 14)
"""Linux's value (asm-generic/mman-common.h), where Python's mmap module does not name it."""


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
    mapping = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    raw = torch.frombuffer(mapping, dtype=torch.uint8)  # holds the mapping until the last view of it is gone
    offset = -raw.data_ptr() % HUGE_PAGE
    try:
        mapping.madvise(MADV_HUGEPAGE, offset, nbytes // HUGE_PAGE * HUGE_PAGE)
    except OSError as exc:
        log.debug("madvise(MADV_HUGEPAGE) refused (%s); the weight stays on 4 KiB pages", exc)
        return t
    region = raw.narrow(0, offset, nbytes)
    region.copy_(t.contiguous().view(-1).view(torch.uint8))
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
