"""Save/open projects, autosave, recent projects and crash restore.

Autosave writes the whole project to `<data>/autosave/current.s2proj` a few seconds after a change
(and after every rendered line), next to a `session.lock` file that exists only while the studio
runs. Finding the lock at start-up means the last session did not end cleanly: the window offers the
autosaved project. The autosave names the project file it belongs to inside itself (`autosave_of`), so
a SIGKILL at any instant keeps the two together. An autosave that cannot be opened is moved aside
(`damaged-<time>.s2proj`, kept for the person) so that it is not offered again at every start.
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

    def __init__(self, autosave_dir: Path, settings: QSettings, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.autosave_dir = autosave_dir
        self.settings = settings
        self.path: Path | None = None
        self.dirty = False
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(AUTOSAVE_DELAY_MS)
        self._project: Project | None = None
        self.problems: tuple[str, ...] = ()
        """Takes the last opened or restored project could not read (left out); the window shows them."""
        self._timer.timeout.connect(self.autosave_now)

    @property
    def autosave_path(self) -> Path:
        return self.autosave_dir / "current.s2proj"

    @property
    def lock_path(self) -> Path:
        return self.autosave_dir / "session.lock"

    # -- crash restore ---------------------------------------------------------------------------

    def crashed_before(self) -> bool:
        """True when the last session left its lock behind and an autosave exists."""
        if not self.lock_path.exists():
            return False
        recover(self.autosave_path)
        return self.autosave_path.is_dir()  # a damaged one too: restoring it reports it and sets it aside

    def begin_session(self) -> None:
        self.autosave_dir.mkdir(parents=True, exist_ok=True)
        self.lock_path.write_text(str(os.getpid()))

    def end_session(self) -> None:
        """A clean exit: no restore offer next time."""
        self._timer.stop()
        self.lock_path.unlink(missing_ok=True)
        shutil.rmtree(self.autosave_path, ignore_errors=True)

    def restore(self) -> tuple[Project, Path | None]:
        """The autosaved project and the file it belongs to. A `UserError` (a damaged autosave) moves it
        aside first, so the next start does not offer it again."""
        try:
            opened = read_project(self.autosave_path)
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

    def changed(self, project: Project, soon: bool = False) -> None:
        """Mark dirty and schedule an autosave (`soon`: within the event loop's next turn)."""
        self.dirty = True
        self._project = project
        self._timer.start(0 if soon else AUTOSAVE_DELAY_MS)

    def autosave_now(self) -> None:
        if self._project is None:
            return
        try:
            save_project(self._project, self.autosave_path, autosave_of=self.path)
        except UserError as exc:
            logger.warning("autosave failed: %s", exc)

    # -- files -----------------------------------------------------------------------------------

    def save(self, project: Project, path: Path) -> Path:
        path = save_project(project, path)
        moved = path != self.path
        self.path = path
        self.dirty = False
        self.add_recent(path)
        self.path_changed.emit(path)
        if moved and self._project is not None:  # the autosave names the new file soon
            self._project = project
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
        for problem in self.problems:
            logger.warning("%s: %s", path, problem)
        self.path = Path(path)
        self.dirty = False
        self.add_recent(self.path)
        self.path_changed.emit(self.path)
        return project

    def new(self) -> None:
        self.path = None
        self.dirty = False
        self.path_changed.emit(None)

    def recent(self) -> list[Path]:
        raw = self.settings.value("recent", []) or []
        if isinstance(raw, str):
            raw = [raw]
        return [Path(p) for p in raw if isinstance(p, str) and exists(Path(p))]

    def add_recent(self, path: Path) -> None:
        items = [str(path)] + [str(p) for p in self.recent() if p != path]
        self.settings.setValue("recent", items[:MAX_RECENT])
        self.recent_changed.emit()
