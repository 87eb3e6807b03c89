"""The helper threads that share a decode step's rows (`Helpers` in engine/weights/cpu_gemv.cpp).

They are our own threads, made on first use and never stopped, so what must hold is what a caller can see: the
same bits whoever computes which rows (several calling threads at once, the thread count changed between calls,
a forked child where the helpers do not exist), and no core burnt once the calls stop. The kernels are built when
the package is (in place by the test session's start when their sources changed: tests/conftest.py).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from s2studio.engine.weights import cpu_gemv
from s2studio.engine.weights.int4 import pack_codes, quantize_groups
from s2studio.engine.weights.int8 import quantize_rows



HELPER_NAME = "s2studio-rows"
"""What cpu_gemv.cpp names its helper threads (`kHelperName`)."""


@pytest.fixture(autouse=True)
def kernels():
    assert cpu_gemv.available(), f"the CPU kernels did not load: {cpu_gemv.kernel_path().reason}"
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _layers(seed: int = 0) -> tuple[torch.Tensor, list]:
    """x (1, 512) and three calls on 4096 rows: enough rows (>= 64 KiB of weights) that they are shared."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 512, generator=g)
    w = torch.randn(4096, 512, generator=g) * 0.02
    q8, s8 = quantize_rows(w)
    q4, sz = quantize_groups(w, 128)
    codes, bf16 = pack_codes(q4), w.to(torch.bfloat16)
    calls = [lambda x: cpu_gemv.linear_bf16(x, bf16),
             lambda x: cpu_gemv.linear_int8(x, q8, s8),
             lambda x: cpu_gemv.linear_int4(x, codes, sz, 128)]
    return x, calls


def _alone(x: torch.Tensor, calls: list) -> list[torch.Tensor]:
    torch.set_num_threads(1)  # the calling thread computes every row itself
    return [call(x) for call in calls]


def test_calls_from_several_threads_at_once_give_the_bits_of_one_thread_alone() -> None:
    x, calls = _layers()
    want = _alone(x, calls)
    torch.set_num_threads(2)
    wrong: list[str] = []

    def caller(index: int) -> None:
        torch.set_num_threads(2)
        for repeat in range(40):
            for kind, (call, expected) in enumerate(zip(calls, want)):
                if not torch.equal(call(x), expected):
                    wrong.append(f"thread {index}, repeat {repeat}, kind {kind}")

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    caller(-1)
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a caller never returned"
    assert wrong == []


def test_changing_the_thread_count_between_calls_changes_no_bit() -> None:
    x, calls = _layers(seed=1)
    want = _alone(x, calls)
    for threads in (2, 4, 1, 3, 2):
        torch.set_num_threads(threads)
        for _ in range(5):
            assert all(torch.equal(call(x), expected) for call, expected in zip(calls, want)), threads


def _helpers() -> dict[int, int]:
    """CPU clock ticks (user + system) of each helper thread of this process, by thread id."""
    ticks = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            if (task / "comm").read_text().strip() != HELPER_NAME:
                continue
            fields = (task / "stat").read_text().rpartition(")")[2].split()
        except OSError:  # a thread that ended meanwhile
            continue
        ticks[int(task.name)] = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the threads' names and times in /proc")
def test_helpers_are_made_per_thread_and_sleep_once_the_calls_stop() -> None:
    x, calls = _layers(seed=2)
    torch.set_num_threads(3)
    for _ in range(20):
        for call in calls:
            call(x)
    assert len(_helpers()) >= 2, "3 threads: the caller and two helpers"
    time.sleep(0.05)  # past their spin
    before = _helpers()
    time.sleep(0.5)
    after = _helpers()
    spent = sum(after[t] - before[t] for t in before if t in after) / os.sysconf("SC_CLK_TCK")
    assert spent < 0.05, f"idle helpers used {spent:.2f} s of CPU in 0.5 s"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_computes_the_same_bits_without_the_helpers() -> None:
    x, calls = _layers(seed=3)
    want = _alone(x, calls)
    torch.set_num_threads(2)
    for call in calls:
        call(x)  # the parent's helpers exist and are awake when it forks
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only this thread exists
        ok = all(torch.equal(call(x), expected) for call, expected in zip(calls, want))
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0):
        time.sleep(0.05)
    else:
        if time.monotonic() >= deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child's call never returned")
    answer = os.read(read, 1)
    os.close(read)
    assert answer == b"1"
