"""Save/open projects, autosave, recent projects and crash restore.

Autosave writes the whole project to `<data>/autosave/current.s2proj` a few seconds after a change
(and after every rendered line), next to a `session.lock` file that exists only while the studio
runs. Finding the lock at start-up means the last session did not end cleanly: the window offers the
autosaved project. The autosave names the project file it belongs to inside itself (`autosave_of`), so
a SIGKILL at any instant keeps the two together. An autosave that cannot be opened is moved aside
(`damaged-<time>.s2proj`, kept for the person) so that it is not offered again at every start. A clean
exit with unsaved changes nobody chose to discard keeps the autosave too (with a `kept-unsaved` mark),
and the next start offers it the same way.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

from PySide6.QtCore import QObject, QSettings, QTimer, Signal

from s2studio.errors import UserError
from s2studio.state.project import Project
from s2studio.state.project_files import exists, read_project, recover, save_project

logger = logging.getLogger(__name__)

MAX_RECENT = 8
AUTOSAVE_DELAY_MS = 3000


class ProjectStore(QObject):
    path_changed = Signal(object)
    """The project's file (None when unsaved) changed."""
    recent_changed = Signal()
    unsaved_changed = Signal(bool)
    """`unsaved_work` changed (the window's title marks it with "*")."""

    def __init__(self, autosave_dir: Path, settings: QSettings, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.autosave_dir = autosave_dir
        self.settings = settings
        self.path: Path | None = None
        self.dirty = False
        self._told: bool | None = None
        """The last `unsaved_work` told by `unsaved_changed`."""
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(AUTOSAVE_DELAY_MS)
        self._project: Project | None = None
        self.problems: tuple[str, ...] = ()
        """Takes the last opened or restored project could not read (left out); the window shows them."""
        self.packed_voices: dict[str, Path] = {}
        """The voices packed in the last opened project (voice id -> its .s2voice inside it)."""
        self._timer.timeout.connect(self.autosave_now)

    @property
    def autosave_path(self) -> Path:
        return self.autosave_dir / "current.s2proj"

    @property
    def lock_path(self) -> Path:
        return self.autosave_dir / "session.lock"

    # -- crash restore ---------------------------------------------------------------------------

    @property
    def kept_path(self) -> Path:
        return self.autosave_dir / "kept-unsaved"

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
        it; otherwise it is brought up to date and kept, and the next start offers it (`kept_before`)."""
        self._timer.stop()
        if self.unsaved_work and not discard:
            self.autosave_now()
            if not exists(self.autosave_path):  # no session folder (never begun) or a failing disk: logged
                return
            try:
                self.kept_path.write_text(str(os.getpid()))
            except OSError as exc:  # the lock then stays: the next start offers the autosave as after a crash
                logger.warning("cannot mark the autosave as kept: %s", exc)
                return
            self.lock_path.unlink(missing_ok=True)
            return
        self.lock_path.unlink(missing_ok=True)
        self.kept_path.unlink(missing_ok=True)
        shutil.rmtree(self.autosave_path, ignore_errors=True)

    def restore(self) -> tuple[Project, Path | None]:
        """The autosaved project and the file it belongs to. A `UserError` (a damaged autosave) moves it
        aside first, so the next start does not offer it again."""
        self.kept_path.unlink(missing_ok=True)
        try:
            opened = read_project(self.autosave_path, autosave=True)
        except UserError:
            self.set_aside()
            raise
        self.problems = opened.problems
        return opened.project, opened.autosave_of

    def set_aside(self) -> Path | None:
        """Move the autosave out of the way (kept as `damaged-<time>.s2proj`); returns where it went."""
        target = self.autosave_dir / f"damaged-{time.strftime('%Y%m%d-%H%M%S')}.s2proj"
        try:
            self.autosave_path.rename(target)
        except OSError as exc:
            logger.warning("cannot move the damaged autosave aside: %s", exc)
            shutil.rmtree(self.autosave_path, ignore_errors=True)
            return None
        logger.warning("the autosave could not be opened; kept it as %s", target)
        return target

    # -- autosave --------------------------------------------------------------------------------

    @property
    def unsaved_work(self) -> bool:
        """Changes since the last save or open, in a project that holds something (text or takes)."""
        p = self._project
        return self.dirty and p is not None and bool(p.script.strip() or p.lines)

    def changed(self, project: Project, soon: bool = False) -> None:
        """Mark dirty and schedule an autosave: `soon` within the event loop's next turn, else within
        AUTOSAVE_DELAY_MS (an autosave already due sooner is not put off)."""
        self.dirty = True
        self._project = project
        self._tell_unsaved()
        if soon:
            self._timer.start(0)
        elif not self._timer.isActive():
            self._timer.start(AUTOSAVE_DELAY_MS)

    def autosave_now(self) -> None:
        if self._project is None:
            return
        try:
            save_project(self._project, self.autosave_path, autosave_of=self.path)
        except UserError as exc:
            logger.warning("autosave failed: %s", exc)

    # -- files -----------------------------------------------------------------------------------

    def save(self, project: Project, path: Path, voices: dict[str, bytes] | None = None) -> Path:
        """Save to `path` (with `voices` packed: voice id -> .s2voice bytes); the project is clean then."""
        path = save_project(project, path, voices=voices)
        moved = path != self.path
        self._clean(project)
        self.path = path
        self.add_recent(path)
        self.path_changed.emit(path)
        if moved:  # the autosave names the new file soon
            self._timer.start(0)
        return path

    def open(self, path: Path) -> Project:
        """The project at `path`, whole (one `UserError` otherwise); unreadable takes are in `problems`."""
        try:
            opened = read_project(path)
        except UserError as exc:
            logger.warning("cannot open %s: %s", path, exc)
            raise
        project = opened.project
        self.problems = opened.problems
        self.packed_voices = dict(opened.packed_voices)
        for problem in self.problems:
            logger.warning("%s: %s", path, problem)
        self._clean(project)
        self.path = Path(path)
        self.add_recent(self.path)
        self.path_changed.emit(self.path)
        return project

    def new(self, project: Project, path: Path | None = None) -> None:
        """`project` is open now, not yet saved (`path`: the file it will be saved to, for a restored autosave)."""
        self._clean(project)
        self.path = path
        self.path_changed.emit(path)

    def _clean(self, project: Project) -> None:
        """`project` is what is open now, with nothing unsaved (no autosave of the one before is pending)."""
        self._timer.stop()
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
