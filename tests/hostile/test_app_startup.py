"""The real app, started as a person starts it, in front of damaged projects and autosaves (one of each way they
fail): it opens the window, reports the problem, and exits 0 when closed (no abort), and a damaged autosave does
not make every later start fail. Then the window itself: File ▸ Open shows the field-naming message for every
damaged project and every unreadable take, and an exception no slot caught is one error dialog with "Copy
details", with the window still alive."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostile_projects import MALFORMED, UNREADABLE_TAKES, make_malformed, make_unreadable
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from s2studio.errors import UserError
from s2studio.state.project_files import read_project

QUIT_MS = "1500"


def _start(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "s2studio"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _env(data: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "S2STUDIO_DATA_DIR": str(data),
            "S2STUDIO_ENGINE": "fake", "QT_QPA_PLATFORM": "offscreen", "S2STUDIO_QUIT_AFTER_MS": QUIT_MS,
            "XDG_CONFIG_HOME": str(data / "config"), **extra}


def _run_all(jobs: list[tuple[str, dict[str, str]]], width: int = 4) -> dict[str, tuple[int, str]]:
    """name -> (exit code, stderr) of one app start per job, `width` at a time."""
    done: dict[str, tuple[int, str]] = {}
    pending = list(jobs)
    running: list[tuple[str, subprocess.Popen]] = []
    while pending or running:
        while pending and len(running) < width:
            name, env = pending.pop(0)
            running.append((name, _start(env)))
        name, proc = running.pop(0)
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        done[name] = (proc.returncode, err)
    return done


def _log(data: Path) -> str:
    path = data / "logs" / "studio.log"
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


STARTED = ("not_json", "not_utf8", "deeply_nested", "take_id_climbs_out", "line_id_with_escape")
"""The damaged projects the real app is started in front of: one of each way a document fails (not JSON, not
text, a parser's recursion, a path out of the folder, a control character); every other case goes through the
same `open_project` in process below (a start each costs seconds of CPU)."""
STARTED_TAKES = ("npy_holds_a_pickle", "flac_corrupt", "flac_links_outside")


def test_the_app_opening_damaged_projects_at_start_up_exits_0(tmp_path):
    jobs, expected = [], {}
    for case in (c for c in MALFORMED if c.name in STARTED):
        folder = make_malformed(case, tmp_path / case.name / "p.s2proj")
        with pytest.raises(UserError) as err:
            read_project(folder)
        expected[case.name] = str(err.value)
        jobs.append((case.name, _env(tmp_path / case.name / "data", S2STUDIO_OPEN=str(folder))))
    for name in STARTED_TAKES:
        folder = make_unreadable(name, tmp_path / name / "p.s2proj")
        expected[name] = read_project(folder).problems[0]
        jobs.append((name, _env(tmp_path / name / "data", S2STUDIO_OPEN=str(folder))))
    assert len(jobs) == len(STARTED) + len(STARTED_TAKES)
    results = _run_all(jobs)
    bad = {}
    for name, (code, err) in results.items():
        log = _log(tmp_path / name / "data")
        if code != 0 or "Traceback" in err or "Traceback" in log or expected[name] not in log:
            bad[name] = (code, err[-500:], log[-500:])
    assert bad == {}


def test_a_damaged_autosave_is_reported_once_and_set_aside(tmp_path):
    jobs = []
    cases = [c for c in MALFORMED if c.name in ("document_is_a_list", "not_utf8", "deeply_nested")]
    for case in cases:
        data = tmp_path / case.name / "data"
        make_malformed(case, data / "autosave" / "current.s2proj")
        (data / "autosave" / "session.lock").write_text("12345")  # the session before was killed
        jobs.append((case.name, _env(data, S2STUDIO_RESTORE="1")))
    first = _run_all(jobs)
    again = _run_all(jobs)  # the next start: nothing left to offer, nothing fails
    assert len(cases) == 3
    for case in cases:
        data = tmp_path / case.name / "data"
        assert first[case.name][0] == 0 and "Traceback" not in first[case.name][1], first[case.name]
        assert again[case.name][0] == 0 and "Traceback" not in again[case.name][1], again[case.name]
        names = sorted(p.name for p in (data / "autosave").iterdir())
        assert len(names) == 1 and names[0].startswith("damaged-"), names  # kept for the person, not offered
        assert _log(data).count("cannot restore the autosave") == 1


def test_a_data_dir_that_is_a_file_is_said_and_the_app_exits_cleanly(tmp_path):
    (tmp_path / "file").write_text("x")
    env = _env(tmp_path / "file")
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    proc = _start(env)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "Traceback" not in err, err
    assert f"S2STUDIO_DATA_DIR to a folder" in err  # logged to stderr: there is no data folder for the log


# ----------------------------------------------------------------------------- the window, in process


def _window(qtbot):
    from s2studio import app
    from s2studio.engine.fake import FakeEngine

    app.make_application()
    w = app.build_window("fake", factory=lambda: FakeEngine())
    w.ctx.settings.clear()
    w.projects.ask = False
    qtbot.addWidget(w)
    w.show()
    return w


def _answer_next_box() -> list[str]:
    """Close the next modal message box; its text lands in the returned list."""
    seen: list[str] = []
    deadline = time.monotonic() + 5

    def poll() -> None:
        box = QApplication.activeModalWidget()
        if isinstance(box, QMessageBox):
            seen.append(box.text())
            box.accept()
        elif time.monotonic() < deadline:
            QTimer.singleShot(20, poll)

    QTimer.singleShot(20, poll)
    return seen


def test_file_open_shows_the_field_naming_message_and_changes_nothing(qtbot, tmp_path):
    w = _window(qtbot)
    try:
        w.editor.setPlainText("Alice: My unsaved line.")
        for case in MALFORMED:
            folder = make_malformed(case, tmp_path / case.name / "p.s2proj")
            seen = _answer_next_box()
            w.projects.open(folder)
            assert len(seen) == 1 and re.search(case.message, seen[0]), (case, seen)
            assert w.editor.toPlainText() == "Alice: My unsaved line." and w.store.path is None
        for name, (_, _, problem) in UNREADABLE_TAKES.items():
            folder = make_unreadable(name, tmp_path / name / "p.s2proj")
            seen = _answer_next_box()
            w.projects.open(folder)
            assert len(seen) == 1 and "1 take could not be read and was left out" in seen[0] and problem in seen[0], \
                (name, seen)
            assert w.store.path == folder and len(next(iter(w.document.project.lines.values())).takes) == 2, name
    finally:
        w.player.close()
        w.close()
        w.ctx.host.shutdown()


def test_an_exception_no_slot_caught_is_one_dialog_and_the_window_lives(qtbot):
    from s2studio.ui.dialogs.error_dialog import ErrorDialog, install_excepthook

    w = _window(qtbot)
    hook = install_excepthook(lambda: w)
    try:
        def boom() -> None:
            raise RuntimeError("the slot broke")

        QTimer.singleShot(0, boom)
        qtbot.waitUntil(lambda: isinstance(hook.dialog, ErrorDialog) and hook.dialog.isVisible(), timeout=5000)
        dialog = hook.dialog
        assert "Something went wrong (RuntimeError: the slot broke)" in dialog.message.text()
        QTimer.singleShot(0, boom)  # a second error while it is open: counted, not a second dialog
        qtbot.waitUntil(lambda: dialog.more.isVisible(), timeout=5000)
        assert dialog.more.text() == "… and 1 more error since (in the log)."
        assert len([d for d in QApplication.topLevelWidgets() if isinstance(d, ErrorDialog) and d.isVisible()]) == 1
        dialog.copy_button.click()
        clip = QApplication.clipboard().text()
        assert clip.startswith("Traceback (most recent call last):") and "RuntimeError: the slot broke" in clip
        dialog.close_button.click()
        qtbot.waitUntil(lambda: hook.dialog is None, timeout=5000)
        assert w.isVisible()
        w.editor.setPlainText("still alive")
        assert w.editor.toPlainText() == "still alive"
        QTimer.singleShot(0, lambda: (_ for _ in ()).throw(UserError("a plain user error")))
        qtbot.waitUntil(lambda: hook.dialog is not None and hook.dialog.isVisible(), timeout=5000)
        assert hook.dialog.message.text() == "a plain user error"
        hook.dialog.reject()
    finally:
        hook.uninstall()
        w.player.close()
        w.close()
        w.ctx.host.shutdown()
