"""The Render menu's commands and Export, as the window offers them: which lines (all, the stale ones, the cursor's,
several takes of the selection), the questions asked first (no model loaded, engines that cannot do all this
computer does, how many takes), and the one box that says a render failed. The render itself is the render flow's
(`ui.control.render`)."""

from __future__ import annotations

from operator import attrgetter

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QInputDialog, QMainWindow, QMessageBox

from s2studio.engine.plan import MAX_TAKES
from s2studio.errors import UserError
from s2studio.state.script import Line
from s2studio.state.voices import VoiceLibrary
from s2studio.ui.check_commands import CheckCommands
from s2studio.ui.control.context import StudioContext
from s2studio.ui.control.document import Document
from s2studio.ui.control.model import ModelController
from s2studio.ui.control.projects import ProjectStore
from s2studio.ui.control.render import RenderFlow
from s2studio.ui.control.session import RenderSession
from s2studio.ui.script.editor import ScriptEditor
from s2studio.ui.status import StatusPanel


class RenderCommands(QObject):
    def __init__(self, window: QMainWindow, ctx: StudioContext, library: VoiceLibrary, document: Document,
                 editor: ScriptEditor, model: ModelController, flow: RenderFlow, session: RenderSession,
                 store: ProjectStore, status: StatusPanel, checks: CheckCommands) -> None:
        super().__init__(window)
        self.checks = checks
        self.window, self.ctx, self.library, self.document, self.editor = window, ctx, library, document, editor
        self.model, self.flow, self.session, self.store, self.status = model, flow, session, store, status
        self.takes = 2
        """What Render Takes… offered last (it offers the same again)."""
        self._accepted_notes: tuple[str, ...] | None = None
        session.failed.connect(self.failed)

    def _say(self, text: str, ms: int) -> None:
        self.window.statusBar().showMessage(text, ms)

    def all(self) -> None:
        self.render(list(self.document.script.lines))

    def stale(self) -> None:
        self.render(self.document.stale_lines())

    def cursor_line(self) -> None:
        line = self.editor.line_at_cursor(self.document.script)
        if line is not None:
            self.render([line])

    def render_takes(self) -> None:
        """Ask how many takes, then render that many of the selected lines (or the cursor's line) side by side;
        each joins its line's takes."""
        lines = self.editor.lines_in_selection(self.document.script)
        if not lines:
            self._say("Put the cursor on a line (or select lines) to render takes of.", 5000)
            return
        dialog = QInputDialog(self.window)
        dialog.setObjectName("takesDialog")
        dialog.setWindowTitle("Render takes")
        dialog.setInputMode(QInputDialog.InputMode.IntInput)
        dialog.setIntRange(1, MAX_TAKES)
        dialog.setIntValue(self.takes)
        which = "this line" if len(lines) == 1 else f"each of the {len(lines)} selected lines"
        dialog.setLabelText(f"Takes of {which}, rendered at once (1–{MAX_TAKES}):")
        if dialog.exec() != QInputDialog.DialogCode.Accepted:
            return
        self.takes = dialog.intValue()
        self.render(lines, takes=self.takes)

    def render(self, lines: list[Line], takes: int = 1) -> None:
        if not lines:
            self._say("Nothing to render: every line is up to date.", 5000)
            return
        if self.model.info is None:
            self._say("Load a model first (File ▸ Model…).", 8000)
            return
        if not self._engines_accepted(lines):
            return
        try:
            self.flow.render(lines, takes)
        except UserError as exc:
            self.failed(str(exc))

    def _engines_accepted(self, lines: list[Line]) -> bool:
        """Before rendering on engines that cannot do all this computer does (a server that ignores seeds, a voice's
        LoRA), say so per server and voice and ask; once per set of notes."""
        switch = self.ctx.engine_switch
        voices = (self.document.voice_of(s) for s in dict.fromkeys(map(attrgetter("speaker"), lines)))
        lora = [v.name for v in voices if v is not None and v.lora is not None]
        notes = tuple(switch.travel_notes(lora)) if switch is not None else ()
        if not notes or notes == self._accepted_notes:
            return True
        box = QMessageBox(QMessageBox.Icon.Question, "Render on these engines?",
                          "Some engines of this render cannot do all that this computer does:\n\n"
                          + "\n".join(f"• {n}" for n in notes) + "\n\nRender anyway?",
                          QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel, self.window)
        box.setObjectName("travel_question")
        if box.exec() != QMessageBox.StandardButton.Yes:
            return False
        self._accepted_notes = notes
        return True

    def failed(self, message: str) -> None:
        self.status.stop("")  # said for a while, not kept after the cause is fixed
        self._say("Render failed.", 15000)
        QMessageBox.warning(self.window, "Render failed", message[:1].upper() + message[1:])

    def export(self) -> None:
        from s2studio.ui.dialogs.export_dialog import ExportDialog  # noqa: PLC0415 - opened rarely

        if not self.checks.confirm_export():  # picked takes that failed a check: asked whether to export them
            return
        project, script = self.document.project, self.document.script
        names = {v.id: v.name for v in self.library.list()}
        selected = [ln.line_id for ln in self.editor.lines_in_selection(script)]
        name = self.store.path.stem if self.store.path is not None else ""
        dialog = ExportDialog(project, script, self.model.info, names, selected, self.ctx.settings,
                              self.window, name=name)
        dialog.gap_changed.connect(self.set_gap)
        dialog.exec()
        dialog.deleteLater()

    def set_gap(self, gap_s: float) -> None:
        """The project's gap changed (export dialog): the player's timeline is laid out with it."""
        self.document.set_gap(gap_s)
        self.session.relayout()
