"""Closing the studio while the take checker's process is still being started: shutdown (on the window's
thread) must not join a process that has not started yet (multiprocessing refuses with an AssertionError,
which escaped closeEvent and hung the app)."""

from __future__ import annotations

import multiprocessing
import threading
import time

from s2studio.audio.asr import AsrSettings
from s2studio.state.project import Project
from s2studio.ui.control import take_checks
from s2studio.ui.control.document import Document


_SPAWN = multiprocessing.get_context("spawn")
GATE, STARTING = threading.Event(), threading.Event()


class _Gated(_SPAWN.Process):  # type: ignore[name-defined,misc] - the spawn context's process class
    """A spawned process that waits at `start` until the test opens the gate."""

    def start(self) -> None:
        STARTING.set()
        GATE.wait(30)
        super().start()


class _GatedContext:
    """The spawn context, whose processes are `_Gated` and run nothing of the checker's."""

    def Pipe(self):  # noqa: ANN201, N802 - multiprocessing's name
        return _SPAWN.Pipe()

    def Process(self, **_kwargs):  # noqa: ANN003, ANN201, N802
        return _Gated(target=time.sleep, args=(0,), daemon=True)


def test_shutdown_while_the_checker_starts_joins_nothing_unstarted(qtbot, monkeypatch, tmp_path) -> None:
    GATE.clear()
    STARTING.clear()
    monkeypatch.setattr(take_checks.multiprocessing, "get_context", lambda _kind: _GatedContext())
    checks = take_checks.TakeChecks(Document(Project()), lambda _voice: (), lambda: AsrSettings("none", "en"))
    connecting = threading.Thread(target=checks._connect, args=(AsrSettings("none", "en"),), daemon=True)
    connecting.start()
    assert STARTING.wait(10)
    checks.shutdown()  # the process exists but has not started: nothing to join yet
    GATE.set()
    connecting.join(30)
    assert checks._process is not None and checks._process.pid is not None
    checks.shutdown()  # started now: joined
    assert checks._process.exitcode is not None


def _busy_checker(conn) -> None:  # noqa: ANN001 - a checker in the middle of a long check: it reads nothing
    time.sleep(60)


def test_shutdown_ends_a_checker_busy_with_a_long_check_without_waiting_for_it(qtbot, tmp_path) -> None:
    checks = take_checks.TakeChecks(Document(Project()), lambda _voice: (), lambda: AsrSettings("none", "en"))
    ours, theirs = _SPAWN.Pipe()
    process = _SPAWN.Process(target=_busy_checker, args=(theirs,), daemon=True)
    process.start()
    checks._process, checks._conn = process, ours
    started = time.monotonic()
    checks.shutdown()
    assert time.monotonic() - started < 3  # the grace, then the end: not the check's 60 s, nor a 5 s join
    assert process.exitcode is not None and process.exitcode != 0  # ended, not finished
