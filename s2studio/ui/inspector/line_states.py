"""Every line's state where the person looks for it (the editor's gutter, the waveform), the selected line
(the one under the editor's cursor, or clicked in the waveform or the gutter) and its takes in the takes
panel, with delete and its undo. Composed by the window over the document, the session and the widgets."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QTabWidget

from s2studio.state.project import Take
from s2studio.state.script import Line
from s2studio.state.staleness import describe
from s2studio.ui.control.document import Document
from s2studio.ui.control.player import Player
from s2studio.ui.control.session import RenderSession
from s2studio.ui.inspector.takes_panel import TakesPanel
from s2studio.ui.player.waveform import WaveformView
from s2studio.ui.script.editor import ScriptEditor
from s2studio.ui.script.gutter import LineMark

WORDS = {"none": "not rendered", "fresh": "up to date", "rendering": "rendering…"}


class LineStates(QObject):
    def __init__(self, document: Document, session: RenderSession, player: Player, editor: ScriptEditor,
                 waveform: WaveformView, takes: TakesPanel, inspector: QTabWidget,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.document, self.session, self.player = document, session, player
        self.editor, self.waveform, self.takes, self.inspector = editor, waveform, takes, inspector
        self.deleted: tuple[Take, int, bool] | None = None
        """The last deleted take, for Undo delete."""
        editor.cursor_line_changed.connect(lambda _block: self._selection_moved())
        editor.mark_clicked.connect(self.select)
        waveform.line_clicked.connect(self.select)
        takes.delete_requested.connect(self._delete)
        takes.restore_requested.connect(self._restore)
        session.rendering_changed.connect(lambda _line: self.show())
        document.replaced.connect(self._forget_deleted)

    def selected(self) -> Line | None:
        return self.editor.line_at_cursor(self.document.script)

    def words(self, line: Line) -> str:
        """The line's state in words: "up to date", "stale: text edited", "rendering…"."""
        if self.session.rendering(line.line_id):
            return WORDS["rendering"]
        state = self.document.state(line)
        return describe(state.reasons) if state.kind == "stale" else WORDS[state.kind]

    def show(self) -> None:
        """Each line's state in the gutter and the waveform, and the selected line's takes."""
        marks: dict[int, LineMark] = {}
        stale, rendering = set(), set()
        for line in self.document.script.lines:
            state = self.document.state(line)
            kind = "rendering" if self.session.rendering(line.line_id) else state.kind
            if state.kind == "stale":
                stale.add(line.line_id)
            if kind == "rendering":
                rendering.add(line.line_id)
            block = line.source_line - 1
            if block not in marks:
                takes = f"; {state.takes} take{'s' * (state.takes != 1)}" if state.takes else ""
                marks[block] = LineMark(line.line_id, kind, state.takes, f"{line.speaker}: {self.words(line)}{takes}")
        self.editor.set_marks(marks)
        self.waveform.set_states(stale, rendering)
        self.show_takes()

    def show_takes(self) -> None:
        line = self.selected()
        if line is None:
            self.takes.show_line(None, "", None, "")
            return
        entry = self.document.project.lines.get(line.line_id)
        notes = [describe(self.document.reasons(line, t)) or "up to date" for t in (entry.takes if entry else ())]
        looping = self.player.looping and self.player.line == line.line_id
        self.takes.show_line(line.line_id, f"{line.speaker}: {line.text}", entry, self.words(line), notes,
                             looping)
        self.takes.set_can_restore(self.deleted is not None)

    def select(self, line_id: str) -> None:
        """Select a line (from the waveform or the gutter): the editor's cursor goes to it and the
        inspector shows its takes."""
        line = self.document.script.line(line_id)
        if line is None:
            return
        self.editor.select_block(line.source_line - 1, line.start)
        self.inspector.setCurrentWidget(self.takes)
        self._selection_moved()

    def _selection_moved(self) -> None:
        line = self.selected()
        self.waveform.set_selected_line(line.line_id if line else None)
        self.show_takes()

    def _delete(self, line_id: str, take_id: str) -> None:
        self.deleted = self.document.delete_take(line_id, take_id)
        self.show_takes()

    def _restore(self) -> None:
        if self.deleted is not None:
            take, index, picked = self.deleted
            self.deleted = None
            self.document.restore_take(take, index, picked)

    def _forget_deleted(self) -> None:
        self.deleted = None
