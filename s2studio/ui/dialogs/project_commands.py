"""File ▸ New, Open, Save, Save As, Save with Voices, and the restore offer at start-up, with their dialogs.

Nothing unsaved is dropped without asking: New, Open and closing the window first offer to save the
script text, cast and takes changed since the last save (Save, Discard or Cancel). Every save records the
names of the cast's voices; a project saved with its voices packs them too, and opening a project finds
the voices this library lacks (`dialogs/project_voices.py`)."""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEventLoop, QObject, Qt, Signal
from PySide6.QtWidgets import QFileDialog, QMessageBox, QProgressDialog, QWidget

from s2studio.errors import UserError
from s2studio.state.project import Project
from s2studio.state.project_files import ProjectFile
from s2studio.state.project_voices import Missing, missing_voices, note_voice_names, pack, remap
from s2studio.state.staleness import upgrade_takes
from s2studio.state.voices import Voice, VoiceLibrary
from s2studio.ui.control.document import Document
from s2studio.ui.control.parse_ahead import ParsedAhead, parse_ahead
from s2studio.ui.control.projects import ProjectStore
from s2studio.ui.dialogs.project_voices import resolve_voices
from s2studio.ui.file_places import remember, start_in

logger = logging.getLogger(__name__)

Button = QMessageBox.StandardButton


class ProjectCommands(QObject):
    about_to_switch = Signal()
    """Another project is about to replace the open one (stop rendering and playing)."""
    message = Signal(str, int)
    """(status bar text, milliseconds)."""
    voices_added = Signal()
    """Opening a project added voices to the library (its packed copies)."""

    def __init__(self, window: QWidget, store: ProjectStore, document: Document, library: VoiceLibrary,
                 settle: Callable[[], object] | None = None) -> None:
        super().__init__(window)
        self.window, self.store, self.document, self.library = window, store, document, library
        self.ask = True
        """Ask before unsaved changes are lost (tests and the screenshot tool turn it off)."""
        self.waiting = False
        """A save, open or restore is being waited on (the smoke-test quit lets it end, so its report is logged)."""
        self.settle = settle or document.finish_parsing
        """Brings the editor's text whole into the document (the window's: a paste still going in, the last
        keystrokes, a parse on a thread): before asking about unsaved work and before a save, which must see it all."""
        document.takes_changed.connect(store.lines_changed)

    def _wait(self, ticket: int, title: str, cancel: bool = False) -> tuple[object, str]:
        """(result, error) of the store's job `ticket`, waited for with the event loop running: the window
        stays alive, and a job longer than a second shows its progress in a window-modal dialog."""
        outcome: dict[str, tuple[object, str]] = {}
        loop = QEventLoop()
        dialog = QProgressDialog(title, "Cancel" if cancel else "", 0, 1000, self.window)
        dialog.setWindowTitle(title)
        dialog.setWindowModality(Qt.WindowModality.WindowModal)
        dialog.setMinimumDuration(1000)
        dialog.setAutoClose(False)
        dialog.setAutoReset(False)
        if not cancel:
            dialog.setCancelButton(None)  # type: ignore[arg-type]
        dialog.canceled.connect(self.store.cancel)

        def ended(done: int, result: object, error: str) -> None:
            if done == ticket:
                outcome["end"] = (result, error)
                loop.quit()

        def step(fraction: float, text: str) -> None:
            dialog.setLabelText(text)
            dialog.setValue(int(fraction * 1000))

        self.store.finished.connect(ended)
        self.store.progress.connect(step)
        self.waiting = True
        try:
            dialog.setValue(0)
            if "end" not in outcome:
                loop.exec()
        finally:
            self.waiting = False
            self.store.finished.disconnect(ended)
            self.store.progress.disconnect(step)
            dialog.close()
            dialog.deleteLater()
        # the application quitting ends every nested loop: the job goes on on the writer thread, unwaited for here
        return outcome.get("end", (None, "S2 Studio is closing; this was left unfinished."))

    # -- asking ----------------------------------------------------------------------------------

    def confirm_discard(self, before: str) -> bool | None:
        """Before unsaved work would be lost (`before`: "starting a new project", "closing" …): True to go
        on (saved, or nothing to save), None to go on discarding it (the person chose Discard), False to
        stay."""
        self.settle()
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
            name = QFileDialog.getExistingDirectory(self.window, "Open project (.s2proj folder)", start_in("project"))
            if not name:
                return False
            path = Path(name)
            remember("project", path)
        library = self.library
        project, error = self._wait(self.store.open(path, functools.partial(_missing_voices, library=library)),
                                    "Opening the project…")
        if error or not isinstance(project, Project):
            QMessageBox.warning(self.window, "Open project", error)
            return False
        missing = self.store.ahead_result
        resolved = resolve_voices(self.window, library, missing if isinstance(missing, list) else [])
        if resolved.imported:
            self.voices_added.emit()
        ahead, takes = self._prepared(project, resolved.voices)
        self.about_to_switch.emit()
        self.document.replace(project, ahead)
        if resolved.voices:  # the cast now names this library's voices: worth saving
            self.store.changed(project)
        if resolved.notes:
            self.message.emit("Voices: " + "; ".join(resolved.notes) + ".", 15000)
        logger.info("opened the project %s (%d lines, %d takes)", path, len(self.document.script.lines), takes)
        self._report_unreadable_takes("Open project")
        return True

    def _ahead(self) -> ParsedAhead | None:
        """The script of the project just restored, parsed on the writer thread while it was read."""
        ahead = self.store.ahead_result
        return ahead if isinstance(ahead, ParsedAhead) else None

    def _prepared(self, project: Project, voices: dict[str, Voice]) -> tuple[ParsedAhead | None, int]:
        """A project just read made ready to show, on the writer thread (a book's takes walked three times, its
        script parsed: a second of work): the voices resolved applied to its cast and takes (`remap`), its script
        parsed with the cast as it is then, its takes brought to today's record (`upgrade_takes`). With the
        number of its takes."""
        library_voices = self.document.voices()

        def work() -> tuple[ParsedAhead, int]:
            remap(project, voices)
            ahead = parse_ahead(project, library_voices)
            upgrade_takes(project, ahead.script.lines, library_voices)
            return dataclasses.replace(ahead, upgraded=True), sum(len(e.takes) for e in project.lines.values())

        result, error = self._wait(self.store.run("prepare the project", work), "Opening the project…")
        if error or not isinstance(result, tuple):  # the document parses and upgrades it itself
            logger.warning("preparing the project off the window's thread failed: %s", error)
            remap(project, voices)
            return None, sum(len(e.takes) for e in project.lines.values())
        return result

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
            name, _ = QFileDialog.getSaveFileName(self.window, "Save project", start_in("project", "Untitled.s2proj"),
                                                  "S2 project (*.s2proj)")
            if not name:
                return False
            path = Path(name)
            remember("project", path)
        return self._save_to(path)

    def save_with_voices(self, on: bool) -> bool:
        """File ▸ Save with Voices: on, the project is saved now with its cast's voices packed in (and every
        later save packs them too); off, later saves leave them out."""
        project = self.document.project
        if project.with_voices != on:
            project.with_voices = on
            self.store.changed(project)
        if not on:
            self.message.emit("The voices will be left out of the project from its next save on.", 6000)
            return True
        return self.save()

    def _save_to(self, path: Path) -> bool:
        self.settle()
        project = self.document.project
        try:
            note_voice_names(project, self.library)
            voices = pack(project, self.library) if project.with_voices else None
        except UserError as exc:
            QMessageBox.warning(self.window, "Save project", str(exc))
            return False
        saved, error = self._wait(self.store.save(project, path, voices), "Saving the project…", cancel=True)
        if error == "Cancelled.":
            self.message.emit("Save cancelled: the project was not saved there.", 6000)
            return False
        if error:
            QMessageBox.warning(self.window, "Save project", error)
            return False
        packed = f" with {len(voices)} voice{'s' * (len(voices) != 1)}" if voices else ""
        logger.info("saved the project %s%s (%d lines, %d takes)", saved, packed, len(self.document.script.lines),
                    sum(len(entry.takes) for entry in project.lines.values()))
        self.message.emit(f"Saved {saved}{packed}.", 4000)
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
        voice_ids = self.document.voice_ids()
        restored, error = self._wait(self.store.restore(lambda opened: parse_ahead(opened.project, voice_ids)),
                                     "Restoring the autosaved project…")
        if error or not isinstance(restored, tuple):
            logger.warning("cannot restore the autosave: %s", error)
            QMessageBox.warning(self.window, "Restore", f"The autosaved project could not be restored: {error} "
                                f"It was kept in {self.store.autosave_dir} and will not be offered again.")
            return False
        project, origin = restored
        self.about_to_switch.emit()
        self.store.new(project, origin)
        self.document.replace(project, self._ahead())
        self.store.changed(project)  # restored work is unsaved until it is saved
        stale = len(self.document.stale_lines())
        logger.info("restored the autosave of %s (%d lines, %d to render)", origin or "an unsaved project",
                    len(self.document.script.lines), stale)
        self.message.emit("Restored the autosaved project." + (
            f" {stale} line{'s' * (stale != 1)} still to render: Render ▸ Render Stale Lines (Ctrl+Shift+R)."
            if stale else ""), 15000)
        self._report_unreadable_takes("Restore")
        return True


def _missing_voices(opened: ProjectFile, library: VoiceLibrary) -> list[Missing]:
    """The voices of a project just read that the library lacks (on the writer thread): a library that cannot be
    read leaves them unresolved (logged), it does not keep the project from opening."""
    try:
        return missing_voices(opened.project, library, opened.packed_voices)
    except OSError as exc:
        logger.warning("cannot look for the project's voices in the library: %s", exc)
        return []
