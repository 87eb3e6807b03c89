"""The engine's thread and the project writer's run below the window's thread (Linux: their nice value)."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import pytest

from s2studio import priority
from s2studio.ui.control.write_queue import WriteQueue
from s2studio.worker.host import EngineThread

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own nice value is Linux's")


def own_nice() -> int:
    """The calling thread's nice value (the tests' own thread is the window's here; a run already below
    `BACKGROUND_NICE` keeps its own)."""
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_the_engine_thread_runs_below_the_window(qtbot: Any) -> None:
    seen: list[int] = []

    class Scheduler:
        def run(self) -> None:
            seen.append(own_nice())

    thread = EngineThread(Scheduler())  # type: ignore[arg-type]
    thread.start()
    qtbot.waitUntil(thread.isFinished, timeout=5000)
    assert seen == [max(own_nice(), priority.BACKGROUND_NICE)]


def test_a_project_job_runs_below_the_window(qtbot: Any) -> None:
    queue = WriteQueue()
    ended: list[object] = []
    queue.finished.connect(lambda _ticket, result, _error: ended.append(result))
    queue.submit("save", lambda: lambda _task: own_nice())
    qtbot.waitUntil(lambda: bool(ended), timeout=5000)
    assert ended == [max(own_nice(), priority.BACKGROUND_NICE)]
    queue.deleteLater()
