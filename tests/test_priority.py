"""The studio's background threads run below the window's thread (Linux: their nice value), and what they start
inherits it."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from s2studio import priority


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own nice value is Linux's")
def test_a_background_thread_runs_below_the_thread_that_started_it_and_its_threads_inherit_that() -> None:
    seen: dict[str, int] = {}

    def inner() -> None:
        seen["started by it"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def work() -> None:
        priority.background()
        seen["background"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        priority.background()  # again: unchanged
        seen["again"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        thread = threading.Thread(target=inner)
        thread.start()
        thread.join()

    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    expected = max(mine, priority.BACKGROUND_NICE)
    assert seen == {"background": expected, "again": expected, "started by it": expected}
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine  # this thread as it was
