"""Save/open projects, autosave, recent projects and crash restore.

Autosave writes the whole project to `<data>/autosave/current.s2proj` a few seconds after a change
(and after every rendered line), next to a `session.lock` file that exists only while the studio
runs. Finding the lock at start-up means the last session did not end cleanly: the window offers the
autosaved project.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from PySide6.QtCore import QObject, QSettings, QTimer, Signal

from s2studio.errors import UserError
from s2studio.state.project import Project, load_project, save_project

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
        return self.lock_path.exists() and (self.autosave_path / "project.json").is_file()

    def begin_session(self) -> None:
        self.autosave_dir.mkdir(parents=True, exist_ok=True)
        self.lock_path.write_text(str(os.getpid()))

    def end_session(self) -> None:
        """A clean exit: no restore offer next time."""
        self._timer.stop()
        self.lock_path.unlink(missing_ok=True)
        shutil.rmtree(self.autosave_path, ignore_errors=True)

    def restore(self) -> tuple[Project, Path | None]:
        project = load_project(self.autosave_path)
        original = self.settings.value("autosave/origin", "")
        return project, Path(original) if original else None

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
            save_project(self._project, self.autosave_path)
            self.settings.setValue("autosave/origin", str(self.path) if self.path else "")
        except UserError as exc:
            logger.warning("autosave failed: %s", exc)

    # -- files -----------------------------------------------------------------------------------

    def save(self, project: Project, path: Path) -> Path:
        path = save_project(project, path)
        self.path = path
        self.dirty = False
        self.add_recent(path)
        self.path_changed.emit(path)
        return path

    def open(self, path: Path) -> Project:
        project = load_project(path)
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
        return [Path(p) for p in raw if Path(p, "project.json").is_file()]

    def add_recent(self, path: Path) -> None:
        items = [str(path)] + [str(p) for p in self.recent() if p != path]
        self.settings.setValue("recent", items[:MAX_RECENT])
        self.recent_changed.emit()
