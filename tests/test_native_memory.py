"""Freed memory inside glibc's heaps goes back to the system when the studio asks (`release_free_pages`): the
holes between buffers that stay, which glibc itself never returns. In a fresh process, whose heaps hold nothing
else that was freed: the probe frees 300 of 400 take-sized buffers, every one between two it keeps."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from s2studio import native_memory

PROBE = """
from pathlib import Path
from s2studio import native_memory

def rss_mb():
    return next(int(l.split()[1]) for l in Path("/proc/self/status").read_text().splitlines()
                if l.startswith("VmRSS:")) / 1024

native_memory.map_large_buffers(32 << 20)  # buffers up to 32 MB from the heaps, as glibc's grown threshold has them
kept, freed = [], []
for i in range(400):
    (kept if i % 4 == 0 else freed).append(bytearray(256 << 10))
del freed
before = rss_mb()
native_memory.release_free_pages()
print(round(before - rss_mb()))
"""


@pytest.mark.skipif(getattr(native_memory._libc(), "malloc_trim", None) is None or not Path("/proc/self/status").exists(),
                    reason="glibc on Linux only")
def test_the_holes_a_freed_audio_buffer_leaves_go_back_to_the_system() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True)
    assert int(out.stdout.split()[-1]) >= 60  # of the 75 MB freed
