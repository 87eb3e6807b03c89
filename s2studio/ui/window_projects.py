"""Project half of the main window: new, open, save, save as, and restore after a crash."""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QMessageBox

from s2studio.errors import UserError
from s2studio.state.project import Project

logger = logging.getLogger(__name__)


class ProjectsMixin:
    """Mixed into MainWindow; uses its store (ProjectStore), session, editor and settings panel."""

    def set_project(self, project: Project) -> None:
        self.flow.cancel()
        self.player.pause()
        self.project = project
        self.session.set_project(project)
        self.settings_panel.set_settings(project.settings)
        self.editor.setPlainText(project.script)
        self.reparse()
        self._timeline_changed()
        self.player.seek(0)

    def new_project(self) -> None:
        self.set_project(Project(settings=self.project.settings))
        self.store.new()

    def open_project(self, path: Path | None = None) -> None:
        if path is None:
            name = QFileDialog.getExistingDirectory(self, "Open project (.s2proj folder)")
            if not name:
                return
            path = Path(name)
        try:
            self.set_project(self.store.open(path))
        except UserError as exc:
            QMessageBox.warning(self, "Open project", str(exc))
            return
        self.setWindowTitle(f"{path.name} — S2 Studio")
        self._report_unreadable_takes("Open project")

    def _report_unreadable_takes(self, title: str) -> None:
        problems = self.store.problems
        if problems:
            shown = "\n".join(problems[:10]) + (f"\n… and {len(problems) - 10} more" if len(problems) > 10 else "")
            QMessageBox.warning(self, title, f"{len(problems)} take{'s' * (len(problems) != 1)} could not be read "
                                f"and {'were' if len(problems) != 1 else 'was'} left out:\n{shown}")

    def save_project(self) -> None:
        if self.store.path is None:
            self.save_project_as()
        else:
            self._save_to(self.store.path)

    def save_project_as(self, path: Path | None = None) -> None:
        if path is None:
            name, _ = QFileDialog.getSaveFileName(self, "Save project", "Untitled.s2proj", "S2 project (*.s2proj)")
            if not name:
                return
            path = Path(name)
        self._save_to(path)

    def _save_to(self, path: Path) -> None:
        try:
            saved = self.store.save(self.project, path)
        except UserError as exc:
            QMessageBox.warning(self, "Save project", str(exc))
            return
        self.setWindowTitle(f"{saved.name} — S2 Studio")
        self.statusBar().showMessage(f"Saved {saved}.", 4000)

    def offer_restore(self) -> bool:
        """After a crash: ask to restore the autosaved project. Returns True when restored."""
        if not self.store.crashed_before():
            return False
        answer = QMessageBox.question(self, "Restore?", "S2 Studio did not close cleanly last time. "
                                      "Restore the autosaved project?")
        if answer != QMessageBox.StandardButton.Yes:
            return False
        return self.restore_autosave()

    def restore_autosave(self) -> bool:
        try:
            project, origin = self.store.restore()
        except UserError as exc:
            logger.warning("cannot restore the autosave: %s", exc)
            QMessageBox.warning(self, "Restore", f"The autosaved project could not be restored: {exc} "
                                f"It was kept in {self.store.autosave_dir} and will not be offered again.")
            return False
        self.set_project(project)
        self.store.path = origin
        self.store.changed(project)
        stale = len(self.session.stale_lines())
        self.statusBar().showMessage(
            "Restored the autosaved project." + (f" {stale} line{'s' * (stale != 1)} still to render: "
                                                 "Render ▸ Render Stale Lines (Ctrl+Shift+R)." if stale else ""), 15000)
        self._report_unreadable_takes("Restore")
        return True
