"""A background task's end reaches all of `done`'s slots in one pass on the GUI thread, `running` already False:
no pass of the event loop sees the task over and its follow-up (a render it starts) not begun."""

from __future__ import annotations

import threading

from PySide6.QtCore import Qt

from s2studio.ui.control.background import Background


def test_done_runs_every_slot_on_the_gui_thread_in_one_pass(qtbot) -> None:
    task = Background("probe")
    seen: list[tuple[int, bool, str]] = []
    # a direct connection runs where `done` is emitted: the task's own thread, if it were emitted there
    task.done.connect(lambda result, _e: seen.append((threading.get_ident(), task.running, result)),
                      Qt.ConnectionType.DirectConnection)
    task.done.connect(lambda result, _e: seen.append((threading.get_ident(), task.running, result)))
    task.start(lambda _t: "built")
    qtbot.waitUntil(lambda: len(seen) == 2, timeout=5000)
    gui = threading.get_ident()
    assert seen == [(gui, False, "built"), (gui, False, "built")]


def test_a_kept_thread_runs_its_tasks_in_order_on_one_thread_and_ends_when_none_come(qtbot, monkeypatch) -> None:
    from s2studio.ui.control import background

    monkeypatch.setattr(background, "KEEP_S", 0.2)
    task = Background("kept", keep_thread=True)
    ran: list[tuple[int, int]] = []
    results: list[object] = []
    task.done.connect(lambda result, error: results.append(result or error))
    gate = threading.Event()
    task.start(lambda _t: (gate.wait(5), ran.append((1, threading.get_ident())), 1)[-1])
    task.start(lambda _t: (ran.append((2, threading.get_ident())), 2)[-1])  # waits behind the first
    task.start(lambda _t: 1 / 0)  # a failure is reported, and the thread goes on
    first = task.thread
    gate.set()
    task.wait()
    assert [n for n, _ in ran] == [1, 2] and len({ident for _, ident in ran}) == 1
    qtbot.waitUntil(lambda: len(results) == 3, timeout=5000)
    assert results == [1, 2, "ZeroDivisionError: division by zero"]
    qtbot.waitUntil(lambda: not first.is_alive(), timeout=5000)  # no task for KEEP_S: the thread ended
    task.start(lambda _t: 3)  # and a new one starts for the next
    qtbot.waitUntil(lambda: len(results) == 4, timeout=5000)
    assert results[-1] == 3 and task.thread is not first
