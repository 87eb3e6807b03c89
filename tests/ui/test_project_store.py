"""Projects are written off the window's thread: Save As and Open run on the writer thread while the window keeps
answering; a new take's files are written once, when it arrives, into the project's folder; the autosave of an
opened project names its takes without copying or encoding any; while takes arrive the autosave waits its
interval. The free pages a written take's audio leaves in the process's heaps go back to the system."""

from __future__ import annotations

import errno
import threading
import time

from PySide6.QtCore import QTimer

from s2studio.state import project_folder
from s2studio.state.disk import WriteError
from s2studio.state.project_document import read_document
from s2studio.state.project_files import read_project
from s2studio.state.script_edits import ScriptParser
from s2studio.state.take_check import TakeCheck
from s2studio.state.take_files import take_files
from s2studio.ui.control import heap, projects, unwritten
from ui_helpers import cast_two_voices, close_studio, fake_engine, open_studio


def _blocking(monkeypatch, name: str, ticks: list[int], seen: list[str]):
    """`ProjectFolder.<name>` made to wait until the window's event loop has run a few times: it can only
    return if the window keeps answering while it runs."""
    real = getattr(project_folder.ProjectFolder, name)

    def slow(*args, **kwargs):
        seen.append(threading.current_thread().name)
        deadline = time.monotonic() + 20
        start = len(ticks)
        while len(ticks) < start + 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        return real(*args, **kwargs)

    monkeypatch.setattr(project_folder.ProjectFolder, name, slow if name != "open" else classmethod(
        lambda cls, *a, **k: slow(*a, **k)))
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(1))
    timer.start(5)
    return timer


def test_save_as_and_open_run_off_the_window_thread(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, fake_engine)
    try:
        w.editor.setPlainText("Alice: Saved while the window answers.")
        w.reparse()
        ticks: list[int] = []
        seen: list[str] = []
        paused: list[int] = []
        with monkeypatch.context() as m:
            timer = _blocking(m, "save", ticks, seen)
            blocked = project_folder.ProjectFolder.save
            m.setattr(project_folder.ProjectFolder, "save",
                      lambda *a, **k: (paused.append(heap._paused), blocked(*a, **k))[1])
            assert w.projects.save_as(tmp_path / "scene.s2proj")
            timer.stop()
        assert seen and set(seen) == {"project-writer"} and len(ticks) >= 5  # (an autosave of the edit too)
        assert paused and min(paused) > 0  # no collection walks the document being written (`heap.paused`)
        assert read_project(tmp_path / "scene.s2proj").project.script == "Alice: Saved while the window answers."
        assert not w.store.unsaved_work and w.store.path == tmp_path / "scene.s2proj"
        assert w.projects.new()
        seen.clear()
        parsed_on: list[str] = []
        real_parse = ScriptParser.parse
        with monkeypatch.context() as m:
            timer = _blocking(m, "open", ticks, seen)
            m.setattr(ScriptParser, "parse", lambda *a, **k: (parsed_on.append(threading.current_thread().name),
                                                              real_parse(*a, **k))[1])
            assert w.projects.open(tmp_path / "scene.s2proj")
            timer.stop()
        assert seen == ["project-writer"]
        assert parsed_on == ["project-writer"]  # the script too: the window thread only swaps it in
        assert w.editor.toPlainText() == "Alice: Saved while the window answers."
    finally:
        close_studio(w)


def test_takes_are_written_once_as_they_arrive_and_the_autosave_copies_none(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, fake_engine)
    path = tmp_path / "scene.s2proj"
    try:
        cast_two_voices(w, tmp_path)
        assert w.projects.save_as(path)
        released: list[tuple[str, list[bool]]] = []  # (thread, the takes still in memory) at each release
        monkeypatch.setattr(projects, "release_free_pages", lambda: released.append((
            threading.current_thread().name, [t.sound.in_memory for e in w.document.project.lines.values()
                                              for t in e.takes])))
        w.actions_by_name["render_all"].trigger()
        qtbot.waitUntil(lambda: len(w.document.project.lines) == 2 and not w.session.busy, timeout=15000)
        takes = [e.current for e in w.document.project.lines.values()]
        qtbot.waitUntil(lambda: all(t.files is not None for t in takes), timeout=10000)
        assert all(t.files == take_files(path, t.take_id) and not t.sound.in_memory for t in takes)
        w.store.autosave_now()  # as one follows a render's takes
        qtbot.waitUntil(lambda: not w.store.queue.busy, timeout=10000)
        # the takes' arrays let go, the holes they leave in the heaps are handed back after the autosave
        assert released[-1] == ("project-writer", [False, False])
        inodes = {t.take_id: t.files.audio.stat().st_ino for t in takes}
        w.store.flush()
        autosave = w.store.autosave_path
        assert not (autosave / "takes").exists()  # the autosave names the project's takes, copies none
        assert {k: [r["take_id"] for r in v["takes"]] for k, v in read_document(autosave).values["lines"].items()} \
            == {t.line_id: [t.take_id] for t in takes}
        assert w.projects.save()
        assert {t.take_id: take_files(path, t.take_id).audio.stat().st_ino for t in takes} == inodes
        assert w.projects.open(path)  # a new session of the same project: its first autosave writes no take
        w.editor.setPlainText(w.editor.toPlainText() + "Alice: One more.\n")
        w.reparse()
        w.store.flush()
        assert not (autosave / "takes").exists()
        restored = read_project(autosave, autosave=True)
        assert restored.problems == () and restored.autosave_of == path
        assert sorted(t.take_id for e in restored.project.lines.values() for t in e.takes) == sorted(inodes)
    finally:
        close_studio(w)


def test_while_the_writer_is_behind_the_engine_waits_and_no_more_takes_wait_in_memory(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(unwritten, "MAX_UNWRITTEN", 2)
    gate, real = threading.Event(), project_folder.ProjectFolder.write_takes
    monkeypatch.setattr(project_folder.ProjectFolder, "write_takes", lambda self, takes: (gate.wait(20), real(self, takes)))
    w = open_studio(qtbot, fake_engine)
    try:
        cast_two_voices(w, tmp_path, "".join(f"{('Alice', 'Bob')[i % 2]}: Line {i}.\n" for i in range(8)))
        assert w.projects.save_as(tmp_path / "scene.s2proj")
        w.actions_by_name["render_all"].trigger()
        qtbot.waitUntil(lambda: w.ctx.host.held, timeout=15000)
        qtbot.wait(300)  # a window that went on would be handed the other lines' takes meanwhile
        takes = lambda: [t for e in w.document.project.lines.values() for t in e.takes]  # noqa: E731
        assert len(takes()) == 2 and all(t.sound.in_memory for t in takes())
        gate.set()
        qtbot.waitUntil(lambda: len(takes()) == 8 and not w.session.busy, timeout=15000)
        qtbot.waitUntil(lambda: not w.store.queue.busy, timeout=10000)
        assert not w.ctx.host.held and not any(t.sound.in_memory for t in takes())
    finally:
        gate.set()
        close_studio(w)


def test_an_unsaved_projects_takes_go_into_the_autosave_at_once_and_their_rows_with_its_next_save(
        qtbot, tmp_path, monkeypatch):
    """A project never saved: once its autosave exists, a take's files are written into it as the take arrives,
    and its row comes with the next autosave (not a save of the whole project after every take)."""
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(projects, "RENDER_AUTOSAVE_S", 600.0)  # no autosave falls due during the render
    w = open_studio(qtbot, fake_engine)
    try:
        cast_two_voices(w, tmp_path)
        w.store.flush()  # the autosave exists (the script, no take)
        saves: list[object] = []
        save = project_folder.ProjectFolder.save
        monkeypatch.setattr(project_folder.ProjectFolder, "save",
                            lambda self, *a, **k: (saves.append(self.path), save(self, *a, **k))[1])
        w.actions_by_name["render_all"].trigger()
        qtbot.waitUntil(lambda: len(w.document.project.lines) == 2 and not w.session.busy, timeout=15000)
        takes = [e.current for e in w.document.project.lines.values()]
        qtbot.waitUntil(lambda: all(t.files is not None for t in takes), timeout=10000)
        autosave = w.store.autosave_path
        assert all(t.files == take_files(autosave, t.take_id) and t.files.audio.is_file() for t in takes)
        assert saves == [] and read_project(autosave, autosave=True).project.lines == {}
        w.store.flush()
        assert saves == [autosave]
        restored = read_project(autosave, autosave=True)  # what a restart after a crash finds
        assert restored.problems == ()
        assert sorted(t.take_id for e in restored.project.lines.values() for t in e.takes) == \
            sorted(t.take_id for t in takes)
    finally:
        close_studio(w)


def test_while_takes_arrive_the_autosave_waits_its_interval(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, fake_engine)
    try:
        w.editor.setPlainText("Alice: Typed.")
        w.reparse()
        w.store.flush()  # an autosave just ran
        w.store.changed(w.document.project, soon=True)  # a take arrived
        assert w.store._timer.remainingTime() > (projects.RENDER_AUTOSAVE_S - 2) * 1000
        w.store._last_autosave -= projects.RENDER_AUTOSAVE_S  # long enough ago: the next take's autosave is due
        w.store.changed(w.document.project, soon=True)
        assert w.store._timer.remainingTime() < 1000
    finally:
        close_studio(w)


def test_takes_a_project_folder_cannot_take_go_to_the_autosave_and_nothing_is_lost(qtbot, tmp_path, monkeypatch):
    """A project on a read-only disk (or a full one): its new takes are kept in the autosave's folder instead, and
    a restore after a crash has them."""
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, fake_engine)
    path = tmp_path / "scene.s2proj"
    try:
        cast_two_voices(w, tmp_path)
        assert w.projects.save_as(path)

        def read_only(self, takes):
            raise WriteError(f"read-only file system: {self.path}; choose a folder on a writable disk", self.path,
                             errno.EROFS)

        monkeypatch.setattr(project_folder.ProjectFolder, "write_takes", read_only)
        w.actions_by_name["render_all"].trigger()
        qtbot.waitUntil(lambda: len(w.document.project.lines) == 2 and not w.session.busy, timeout=15000)
        w.store.flush()
        takes = [e.current for e in w.document.project.lines.values()]
        assert all(t.files is not None and t.files.folder == w.store.autosave_path for t in takes)
        assert not any(take_files(path, t.take_id).audio.exists() for t in takes)
        restored = read_project(w.store.autosave_path, autosave=True)  # what a restart after a crash finds
        assert restored.problems == ()
        assert sorted(t.take_id for e in restored.project.lines.values() for t in e.takes) == \
            sorted(t.take_id for t in takes)
    finally:
        close_studio(w)


def test_check_results_arriving_one_after_another_are_autosaved_at_the_takes_pace(qtbot, tmp_path, monkeypatch):
    """A check result (one a second for minutes after a book's render) is saved as a take is: at most once an
    interval while they keep coming, not after each short pause as typing is (each autosave of a book walks its
    lines on the writer's thread, which the window then waits behind for the interpreter)."""
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(projects, "AUTOSAVE_DELAY_MS", 50)  # typing's pause, short here: many autosaves if it applied
    w = open_studio(qtbot, fake_engine)
    try:
        cast_two_voices(w, tmp_path)
        w.actions_by_name["render_all"].trigger()
        qtbot.waitUntil(lambda: len(w.document.project.lines) == 2 and not w.session.busy, timeout=15000)
        w.store.flush()  # an autosave just ran
        saves: list[int] = []
        real = w.store._autosave_job
        monkeypatch.setattr(w.store, "_autosave_job", lambda: (saves.append(1), real())[1])
        take = w.document.project.current(w.document.script.lines[0].line_id)
        for i in range(10):  # ten results, 100 ms apart
            w.document.set_check(take, TakeCheck((), f"key {i}"))
            qtbot.wait(100)
        assert saves == []  # the interval since the last autosave has not passed
        assert w.store._timer.remainingTime() > (projects.RENDER_AUTOSAVE_S - 3) * 1000
    finally:
        close_studio(w)
