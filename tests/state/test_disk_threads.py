"""Work done side by side: calls that wait on the disk on many threads, work that keeps a core busy (encoding a
take's audio) on one thread fewer than the cores, so that the window's thread keeps a core."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from s2studio.state import disk, take_files
from s2studio.state.project import Take, now_iso
from s2studio.state.take_audio import TakeSound


def threads_used(monkeypatch: pytest.MonkeyPatch, cpu: bool, cpu_threads: int) -> tuple[set[int], int]:
    monkeypatch.setattr(disk, "CPU_THREADS", cpu_threads)
    monkeypatch.setattr(disk, "_pools", {})
    seen: set[int] = set()
    running = [0, 0]  # now, most at once
    lock = threading.Lock()

    def work(_item: int) -> None:
        with lock:
            seen.add(threading.get_ident())
            running[0] += 1
            running[1] = max(running)
        time.sleep(0.02)  # (long enough for the pool's threads to start on a loaded machine)
        with lock:
            running[0] -= 1

    disk.in_parallel(work, range(24), cpu=cpu)
    return seen, running[1]


def test_work_that_keeps_a_core_busy_runs_on_one_thread_fewer_than_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    seen, most = threads_used(monkeypatch, cpu=True, cpu_threads=3)
    assert len(seen) <= 3 and most <= 3 and most >= 2
    seen, most = threads_used(monkeypatch, cpu=True, cpu_threads=1)  # two cores: on the calling thread
    assert seen == {threading.get_ident()}
    seen, most = threads_used(monkeypatch, cpu=False, cpu_threads=1)  # waiting on the disk: side by side
    assert most > 3 and threading.get_ident() not in seen
    assert disk.CPU_THREADS >= 1


def test_a_takes_audio_is_encoded_as_work_that_keeps_a_core_busy(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    monkeypatch.setattr(disk, "CPU_THREADS", 1)
    encoders: set[int] = set()
    encode = take_files.flac_bytes

    def flac_bytes(pcm: np.ndarray) -> bytes:
        encoders.add(threading.get_ident())
        return encode(pcm)

    monkeypatch.setattr(take_files, "flac_bytes", flac_bytes)
    takes = []
    for i in range(3):
        audio = np.full(4410, 0.1 * i, np.float32)
        takes.append(Take(f"{i:032x}", "l1", "Hi.", audio, np.zeros((10, 1), np.int64), i, created=now_iso(),
                          sound=TakeSound.of(audio)))
    written = take_files.write_takes(takes, tmp_path)
    assert len(written) == 3 and encoders == {threading.get_ident()}
