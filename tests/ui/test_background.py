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
