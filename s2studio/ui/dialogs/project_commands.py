"""File ▸ New, Open, Save, Save As, and the restore offer at start-up, with their dialogs.

Nothing unsaved is dropped without asking: New, Open and closing the window first offer to save the
script text, cast and takes changed since the last save (Save, Discard or Cancel)."""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

from s2studio.errors import UserError
from s2studio.state.project import Project
from s2studio.ui.control.document import Document
from s2studio.ui.control.projects import ProjectStore

logger = logging.getLogger(__name__)

Button = QMessageBox.StandardButton


class ProjectCommands(QObject):
    about_to_switch = Signal()
    """Another project is about to replace the open one (stop rendering and playing)."""
    message = Signal(str, int)
    """(status bar text, milliseconds)."""

    def __init__(self, window: QWidget, store: ProjectStore, document: Document) -> None:
        super().__init__(window)
        self.window, self.store, self.document = window, store, document
        self.ask = True
        """Ask before unsaved changes are lost (tests and the screenshot tool turn it off)."""

    # -- asking ----------------------------------------------------------------------------------

    def confirm_discard(self, before: str) -> bool | None:
        """Before unsaved work would be lost (`before`: "starting a new project", "closing" …): True to go
        on (saved, or nothing to save), None to go on discarding it (the person chose Discard), False to
        stay."""
        if not self.store.unsaved_work or not self.ask:
            return True
        name = self.store.path.name if self.store.path else "the project"
        answer = QMessageBox.question(self.window, "Save changes?",
                                      f"Save the changes to {name} before {before}?",
                                      Button.Save | Button.Discard | Button.Cancel, Button.Save)
        if answer == Button.Save:
            return self.save()
        if answer == Button.Discard:
            return None
        return False

    # -- commands --------------------------------------------------------------------------------

    def new(self) -> bool:
        if self.confirm_discard("starting a new project") is False:
            return False
        self.about_to_switch.emit()
        project = Project(settings=self.document.project.settings)
        self.store.new(project)
        self.document.replace(project)
        return True

    def open(self, path: Path | None = None) -> bool:
        if self.confirm_discard("opening another project") is False:
            return False
        if path is None:
            name = QFileDialog.getExistingDirectory(self.window, "Open project (.s2proj folder)")
            if not name:
                return False
            path = Path(name)
        try:
            project = self.store.open(path)
        except UserError as exc:
            QMessageBox.warning(self.window, "Open project", str(exc))
            return False
        self.about_to_switch.emit()
        self.document.replace(project)
        self._report_unreadable_takes("Open project")
        return True

    def _report_unreadable_takes(self, title: str) -> None:
        problems = self.store.problems
        if problems:
            shown = "\n".join(problems[:10]) + (f"\n… and {len(problems) - 10} more" if len(problems) > 10 else "")
            QMessageBox.warning(self.window, title, f"{len(problems)} take{'s' * (len(problems) != 1)} could not "
                                f"be read and {'were' if len(problems) != 1 else 'was'} left out:\n{shown}")

    def save(self) -> bool:
        if self.store.path is None:
            return self.save_as()
        return self._save_to(self.store.path)

    def save_as(self, path: Path | None = None) -> bool:
        if path is None:
            name, _ = QFileDialog.getSaveFileName(self.window, "Save project", "Untitled.s2proj",
                                                  "S2 project (*.s2proj)")
            if not name:
                return False
            path = Path(name)
        return self._save_to(path)

    def _save_to(self, path: Path) -> bool:
        try:
            saved = self.store.save(self.document.project, path)
        except UserError as exc:
            QMessageBox.warning(self.window, "Save project", str(exc))
            return False
        self.message.emit(f"Saved {saved}.", 4000)
        return True

    # -- start-up --------------------------------------------------------------------------------

    def offer_restore(self) -> bool:
        """After a crash, or an exit that kept unsaved work: offer the autosaved project. True when restored."""
        if self.store.crashed_before():
            question = "S2 Studio did not close cleanly last time. Restore the autosaved project?"
        elif self.store.kept_before():
            question = "Your last session ended with unsaved changes, which were kept. Restore them?"
        else:
            return False
        answer = QMessageBox.question(self.window, "Restore?", question)
        if answer != Button.Yes:
            return False
        return self.restore_autosave()

    def restore_autosave(self) -> bool:
        try:
            project, origin = self.store.restore()
        except UserError as exc:
            logger.warning("cannot restore the autosave: %s", exc)
            QMessageBox.warning(self.window, "Restore", f"The autosaved project could not be restored: {exc} "
                                f"It was kept in {self.store.autosave_dir} and will not be offered again.")
            return False
        self.about_to_switch.emit()
        self.store.new(project, origin)
        self.document.replace(project)
        self.store.changed(project)  # restored work is unsaved until it is saved
        stale = len(self.document.stale_lines())
        self.message.emit("Restored the autosaved project." + (
            f" {stale} line{'s' * (stale != 1)} still to render: Render ▸ Render Stale Lines (Ctrl+Shift+R)."
            if stale else ""), 15000)
        self._report_unreadable_takes("Restore")
        return True
