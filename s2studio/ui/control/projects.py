"""Save/open projects, autosave, recent projects and crash restore, off the window's thread. QtCore only.

Every write of a project folder runs on one writer thread, one job at a time (`WriteQueue`), each from a
snapshot the GUI thread takes when the job starts (`project_journal.capture`: takes never change, so it copies
references, not audio). The folders' writers (`ProjectFolder`) remember what each folder holds, so a save
writes only what changed (`state/project_folder.py`):

- a new take's files are written as soon as it arrives (`lines_changed`), into the open project's folder, or
  into the autosave's for a project never saved or a folder that cannot be written (by the first autosave
  when it has not been written yet this session); once; while `MAX_UNWRITTEN` of them wait in memory for it,
  the engine waits (`unwritten`);
- the autosave, `<data>/autosave/current.s2proj`, is a project folder that names the project it belongs to
  (`autosave_of`, inside its own document, so a SIGKILL at any instant keeps the two together) and reads that
  project's takes from its folder; it appends what changed 3 s after an edit, and at most every
  `RENDER_AUTOSAVE_S` while takes arrive (a render); opening another project writes it whole again;
- Save, Save As, Open and Restore run there too, with progress; the window waits for them with its event
  loop running (`dialogs/project_commands.py`).

A `session.lock` file exists only while the studio runs. Finding it at start-up means the last session did
not end cleanly: the window offers the autosaved project. An autosave that cannot be opened is moved aside
(`damaged-<time>.s2proj`, kept for the person) so that it is not offered again at every start. A clean exit
with unsaved changes nobody chose to discard keeps the autosave too (with a `kept-unsaved` mark), and the next
start offers it the same way.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QSettings, QTimer, Signal

from s2studio.native_memory import release_free_pages
from s2studio.state.project import Project, Take
from s2studio.state.project_files import ProjectFile, exists, recover
from s2studio.state.project_folder import ProjectFolder
from s2studio.state.project_journal import DocState, capture
from s2studio.ui.control.background import Background
from s2studio.ui.control import heap
from s2studio.ui.control.unwritten import UnwrittenTakes
from s2studio.ui.control.write_queue import WriteQueue

logger = logging.getLogger(__name__)

MAX_RECENT = 8
AUTOSAVE_DELAY_MS = 3000
"""After an edit (typing comes in bursts)."""
RENDER_AUTOSAVE_S = 10.0
"""While takes arrive, at most this often: a take's own files are written at once; its row waits this long."""
Ahead = Callable[[ProjectFile], object]
"""Work on a project file just read, on the writer thread (its script parsed, its voices looked up)."""


class ProjectStore(QObject):
    path_changed = Signal(object)
    """The project's file (None when unsaved) changed."""
    recent_changed = Signal()
    unsaved_changed = Signal(bool)
    """`unsaved_work` changed (the window's title marks it with "*")."""

    def __init__(self, autosave_dir: Path, settings: QSettings, parent: QObject | None = None,
                 hold_engine: Callable[[bool], None] | None = None) -> None:
        """`hold_engine(True)` while too many new takes wait in memory for their files, `(False)` when the writer
        caught up (`EngineHost.hold`)."""
        super().__init__(parent)
        self.autosave_dir = autosave_dir
        self.settings = settings
        self.path: Path | None = None
        self.dirty = False
        self._told: bool | None = None
        """The last `unsaved_work` told by `unsaved_changed`."""
        self._project: Project | None = None
        self._changes = 0
        """Counts changes: a save leaves the project clean only when none came while it was written."""
        self.problems: tuple[str, ...] = ()
        """Takes the last opened or restored project could not read (left out); the window shows them."""
        self.packed_voices: dict[str, Path] = {}
        """The voices packed in the last opened project (voice id -> its .s2voice inside it)."""
        self.ahead_result: object = None
        """What the last open's or restore's `ahead` made of its project."""
        self.queue = WriteQueue(self)
        self.finished = self.queue.finished
        """(ticket, result, error) of a save, open or restore that ended (`WriteQueue.finished`)."""
        self.progress = self.queue.progress
        self._folder: ProjectFolder | None = None
        """The open project's folder (None while it has none)."""
        self._home_ok = True
        """New takes go into the project's folder (False after that failed once: into the autosave's)."""
        self._autosave = ProjectFolder(self.autosave_path)
        self._new_takes: dict[str, Take] = {}
        self.unwritten = UnwrittenTakes(self)
        """The new takes in memory until their files are written (the engine waits while too many are)."""
        self.queue.finished.connect(lambda *_: self.unwritten.written(self.queue.busy))
        if hold_engine is not None:
            self.unwritten.behind.connect(hold_engine)
        self._last_autosave = float("-inf")
        self._captured: DocState | None = None
        """The last autosave's capture: the next copies only the lines changed since (a book has 10,000)."""
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self.autosave_now)

    @property
    def autosave_path(self) -> Path:
        return self.autosave_dir / "current.s2proj"

    @property
    def lock_path(self) -> Path:
        return self.autosave_dir / "session.lock"

    @property
    def kept_path(self) -> Path:
        return self.autosave_dir / "kept-unsaved"

    # -- crash restore ---------------------------------------------------------------------------

    def crashed_before(self) -> bool:
        """True when the last session left its lock behind and an autosave exists."""
        if not self.lock_path.exists():
            return False
        recover(self.autosave_path)
        return self.autosave_path.is_dir()  # a damaged one too: restoring it reports it and sets it aside

    def kept_before(self) -> bool:
        """True when the last session ended with unsaved work that nobody chose to discard (its autosave
        was kept for this start)."""
        if not self.kept_path.exists():
            return False
        recover(self.autosave_path)
        return exists(self.autosave_path)

    def begin_session(self) -> None:
        self.autosave_dir.mkdir(parents=True, exist_ok=True)
        self.lock_path.write_text(str(os.getpid()))

    def end_session(self, discard: bool = False) -> None:
        """A clean exit. The autosave goes only when nothing unsaved is in it or the person chose to discard
        it; otherwise it is brought up to date (here, at once) and kept, and the next start offers it."""
        self._timer.stop()
        if self.unsaved_work and not discard:
            self.autosave_now()
            self.queue.drain()
            if not exists(self.autosave_path):  # no session folder (never begun) or a failing disk: logged
                return
            try:
                self.kept_path.write_text(str(os.getpid()))
            except OSError as exc:  # the lock then stays: the next start offers the autosave as after a crash
                logger.warning("cannot mark the autosave as kept: %s", exc)
                return
            self.lock_path.unlink(missing_ok=True)
            return
        self.queue.drain()
        self.lock_path.unlink(missing_ok=True)
        self.kept_path.unlink(missing_ok=True)
        shutil.rmtree(self.autosave_path, ignore_errors=True)

    def restore(self, ahead: Ahead | None = None) -> int:
        """Open the autosave (off the window's thread); `finished` brings (project, the file it belongs to).
        One that cannot be opened is moved aside first, so the next start does not offer it again. `ahead`:
        work to do on the project file there too (its script parsed), its result in `ahead_result`."""
        self.kept_path.unlink(missing_ok=True)

        def done(result: Any, error: str) -> tuple[Project, Path | None] | None:
            if error:
                self.set_aside()
                return None
            folder, opened, self.ahead_result = result
            self._autosave = folder  # it knows what the autosave holds: the next one appends
            self.problems = opened.problems
            return opened.project, opened.autosave_of

        return self.queue.submit("restore", lambda: lambda task: _opened(
            lambda: ProjectFolder.open(self.autosave_path, autosave=True, progress=task.progress.emit), ahead), done)

    def set_aside(self) -> Path | None:
        """Move the autosave out of the way (kept as `damaged-<time>.s2proj`); returns where it went."""
        target = self.autosave_dir / f"damaged-{time.strftime('%Y%m%d-%H%M%S')}.s2proj"
        try:
            self.autosave_path.rename(target)
        except OSError as exc:
            logger.warning("cannot move the damaged autosave aside: %s", exc)
            shutil.rmtree(self.autosave_path, ignore_errors=True)
            return None
        self._autosave = ProjectFolder(self.autosave_path, self.path)
        logger.warning("the autosave could not be opened; kept it as %s", target)
        return target

    # -- autosave --------------------------------------------------------------------------------

    @property
    def unsaved_work(self) -> bool:
        """Changes since the last save or open, in a project that holds something (text or takes)."""
        p = self._project
        return self.dirty and p is not None and bool(p.script.strip() or p.lines)

    def changed(self, project: Project, soon: bool = False) -> None:
        """Mark dirty and schedule an autosave: `soon` (takes changed) within `RENDER_AUTOSAVE_S` of the last
        one, else within `AUTOSAVE_DELAY_MS` (an autosave already due sooner is not put off)."""
        self.dirty = True
        self._changes += 1
        self._project = project
        self._tell_unsaved()
        if soon:
            wait = max(0.0, RENDER_AUTOSAVE_S - (time.monotonic() - self._last_autosave))
            if not self._timer.isActive() or self._timer.remainingTime() > wait * 1000:
                self._timer.start(int(wait * 1000))
        elif not self._timer.isActive():
            self._timer.start(AUTOSAVE_DELAY_MS)

    def lines_changed(self, line_id: str) -> None:
        """A line's takes changed (`Document.takes_changed`): a new take's files are written now."""
        entry = self._project.lines.get(line_id) if self._project is not None else None
        fresh = [t for t in entry.takes if t.files is None and not t.held] if entry is not None else []
        if fresh:
            self._new_takes.update((t.take_id, t) for t in fresh)
            self.queue.submit("takes", self._write_new_takes, self._takes_written, coalesce=True)
            self.unwritten.add(fresh, self.queue.busy)

    def _write_new_takes(self) -> Any:
        takes = [t for t in self._new_takes.values() if t.files is None and not t.held]
        self._new_takes.clear()
        folder = self._folder if self._home_ok else None
        if not takes:
            return None
        if folder is None:  # no folder of its own (or one that cannot be written): the autosave holds them
            folder = self._autosave
            if folder.base is None:  # not written this session yet: the autosave writes them with its rows
                self.autosave_now()
                return None
            # their files now, their rows with the next autosave (within RENDER_AUTOSAVE_S, as a saved
            # project's rows), not an autosave of the whole book after every take
        return lambda _task: folder.write_takes(takes)

    def _takes_written(self, _result: object, error: str) -> None:
        if error:
            logger.warning("new takes go to the autosave from now on: %s", error)
            self._home_ok = False
            self.autosave_now()

    def autosave_now(self) -> None:
        """Autosave soon (one job for any number of asks while it waits)."""
        self._timer.stop()
        self.queue.submit("autosave", self._autosave_job, self._autosaved, coalesce=True)

    def _autosave_job(self) -> Any:
        if self._project is None:
            return None
        state = self._captured = capture(self._project, self.path, since=self._captured)
        folder = self._autosave
        self._last_autosave = time.monotonic()
        return lambda _task: _autosave(folder, state)

    def _autosaved(self, _result: object, error: str) -> None:
        if error:
            logger.warning("autosave failed: %s", error)

    def flush(self) -> None:
        """Write what is waiting now (an autosave included), waiting for it here."""
        self.autosave_now()
        self.queue.drain()

    # -- files -----------------------------------------------------------------------------------

    def save(self, project: Project, path: Path, voices: Mapping[str, bytes] | None = None) -> int:
        """Save to `path` (with `voices` packed: voice id -> .s2voice bytes) off the window's thread; returns
        the ticket `finished` names with the folder saved (or the error). Clean then, unless it changed meanwhile."""
        started: dict[str, Any] = {}

        def prepare() -> Any:
            same = self._folder is not None and self._folder.path == Path(path)
            folder = self._folder if same else ProjectFolder(Path(path))
            state = capture(project, None)
            started.update(folder=folder, changes=self._changes)
            return lambda task: _saved(folder, state, voices=dict(voices or {}), progress=task.progress.emit,
                                       cancel=task.cancel)

        def done(_result: object, error: str) -> Path | None:
            if error:
                return None
            folder = started["folder"]
            self._folder, self._home_ok = folder, True
            moved = folder.path != self.path
            if self._project is project and started["changes"] == self._changes:
                self._clean(project)
            self.path = folder.path
            self.add_recent(folder.path)
            self.path_changed.emit(folder.path)
            if moved:  # the autosave names the new file, and reads the takes from it
                self._autosave = ProjectFolder(self.autosave_path, folder.path)
                self.autosave_now()
            return folder.path

        return self.queue.submit("save", prepare, done)

    def open(self, path: Path, ahead: Ahead | None = None) -> int:
        """Open the project at `path` off the window's thread; `finished` brings the project (or one
        `UserError` message); unreadable takes are in `problems`. `ahead`: as for `restore`."""

        def done(result: Any, error: str) -> Project | None:
            if error:
                logger.warning("cannot open %s: %s", path, error)
                return None
            folder, opened, self.ahead_result = result
            self._folder, self._home_ok = folder, True
            self.problems = opened.problems
            self.packed_voices = dict(opened.packed_voices)
            for problem in self.problems:
                logger.warning("%s: %s", path, problem)
            self._clean(opened.project)
            self.path = Path(path)
            self._autosave = ProjectFolder(self.autosave_path, self.path)  # written whole at its next save
            self.add_recent(self.path)
            self.path_changed.emit(self.path)
            return opened.project

        return self.queue.submit("open", lambda: lambda task: _opened(
            lambda: ProjectFolder.open(Path(path), progress=task.progress.emit), ahead), done)

    def run(self, kind: str, work: Callable[[], object]) -> int:
        """`work` on the writer thread, in turn with saves (a project just read, prepared before it is shown);
        `finished` brings its result for the ticket."""
        return self.queue.submit(kind, lambda: lambda _task: work())

    def cancel(self) -> None:
        """Stop the running save (a long copy stops between takes; the folder stays as it was)."""
        self.queue.cancel()

    def new(self, project: Project, path: Path | None = None) -> None:
        """`project` is open now, not yet saved (`path`: the file it will be saved to, for a restored autosave)."""
        self._clean(project)
        self.path = path
        self._folder = ProjectFolder(path) if path is not None and exists(path) else None
        self._home_ok = True
        if self._autosave.fallback != path:
            self._autosave = ProjectFolder(self.autosave_path, path)
        self.path_changed.emit(path)

    def _clean(self, project: Project) -> None:
        """`project` is what is open now, with nothing unsaved (no autosave of the one before is pending)."""
        self._timer.stop()
        if project is not self._project:
            self.unwritten.clear()
            self._captured = None  # (the last project's takes are not held for it)
        self._project = project
        self.dirty = False
        self._tell_unsaved()

    def _tell_unsaved(self) -> None:
        unsaved = self.unsaved_work
        if unsaved != self._told:
            self._told = unsaved
            self.unsaved_changed.emit(unsaved)

    def last(self) -> Path | None:
        """The project that was open when the studio last closed (reopened at start), if it is still there."""
        raw = self.settings.value("project/last", "")
        return Path(raw) if isinstance(raw, str) and raw and exists(Path(raw)) else None

    def remember_last(self) -> None:
        """At a clean exit: the project file open now is the one to reopen (none for an unsaved project)."""
        self.settings.setValue("project/last", str(self.path) if self.path is not None else "")

    def recent(self) -> list[Path]:
        raw = self.settings.value("recent", []) or []
        if isinstance(raw, str):
            raw = [raw]
        return [Path(p) for p in raw if isinstance(p, str) and exists(Path(p))]

    def add_recent(self, path: Path) -> None:
        items = [str(path)] + [str(p) for p in self.recent() if p != path]
        self.settings.setValue("recent", items[:MAX_RECENT])
        self.recent_changed.emit()


def _saved(folder: ProjectFolder, state: Any, **options: Any) -> None:
    """`folder.save` on the writer thread, with no collection run meanwhile (`heap.paused`); what the save made
    and keeps is frozen when its job ends (`WriteQueue`)."""
    with heap.paused():
        folder.save(state, **options)


def _autosave(folder: ProjectFolder, state: Any) -> None:
    """On the writer thread: the autosave, then the free pages in the process's heaps go back to the system
    (`native_memory`: the holes a render's takes leave there would stay resident). After each autosave: at most
    every `RENDER_AUTOSAVE_S` while takes arrive, and soon after the last (each take asks for one), so a render
    hands back what its takes freed without paying for it at every take."""
    _saved(folder, state)
    release_free_pages()


def _opened(read: Callable[[], tuple[ProjectFolder, ProjectFile]],
            ahead: Ahead | None) -> tuple[ProjectFolder, ProjectFile, object]:
    """(writer, project file, what `ahead` made of the project), read on the writer thread, where the full
    garbage collections that its objects cause run too (`heap.reading`)."""
    with heap.reading():
        opened = read()
        return (*opened, ahead(opened[1]) if ahead is not None else None)
