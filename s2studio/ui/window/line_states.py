"""Every line's state where the person looks for it (the editor's gutter, the waveform), the selected line
(the one under the editor's cursor, or clicked in the waveform or the gutter) and its takes in the takes
panel, with delete and its undo. Composed by the window over the document, the session and the widgets.

The work follows what changed, not the length of the script (a book has 10,000 lines):

- a finished take, a pick or a delete refreshes that line; an edit the lines it touched
  (`Document.change`); a render's start and end refresh nothing per line (the gutter and the waveform
  read `RenderSession.rendering` when they draw);
- the gutter asks for the marks of the rows on screen when it paints them, and for a mark's words when
  the pointer rests on it;
- the waveform keeps the set of stale lines, told which lines entered or left it;
- what changes every line (another project, the settings, the voices) recounts every line, `LINES_A_STEP` at a
  time from the project's plain data (`Document.stale_ids`), in slices (`Slices`) between which the window keeps
  answering.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QTabWidget

from s2studio.state.project import Take
from s2studio.state.script import Line
from s2studio.state.staleness import describe
from s2studio.ui.control.document import Document
from s2studio.ui.control.player import Player
from s2studio.ui.control.session import RenderSession
from s2studio.ui.control.slices import Slices, pass_budget
from s2studio.ui.inspector.takes_panel import TakesPanel
from s2studio.ui.player.waveform import WaveformView
from s2studio.ui.script.editor import ScriptEditor, lines_on_row
from s2studio.ui.script.gutter import LineMark

WORDS = {"none": "not rendered", "fresh": "up to date", "rendering": "rendering…"}
ROWS_ONE_BY_ONE = 16
"""Up to this many lines changed, the gutter repaints their rows only."""
RECOUNT_ABOVE = 500
"""More lines than this touched by one change (a book pasted), every line is recounted in later passes."""
SOON_LINES = 1000
"""In a script of this many lines or more, the lines an edit touched are refreshed a pass after its parse (a
book's line tables, made anew by each parse, are not read in the pass that parsed a pause in typing)."""
LINES_A_STEP = 250
"""Lines a step of a recount works out together."""


class LineStates(QObject):
    def __init__(self, document: Document, session: RenderSession, player: Player, editor: ScriptEditor,
                 waveform: WaveformView, takes: TakesPanel, inspector: QTabWidget,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.document, self.session, self.player = document, session, player
        self.editor, self.waveform, self.takes, self.inspector = editor, waveform, takes, inspector
        self.deleted: tuple[Take, int, bool] | None = None
        """The last deleted take, for Undo delete."""
        self.updates = 0
        """Lines whose state was worked out for the gutter and the waveform, counted (what a change costs)."""
        self._stale: set[str] = set()
        self._recount: Slices[Sequence[str]] = Slices(self._count, self._counted, self)
        self._touched: set[str] = set()
        self._gone: set[str] = set()
        """Lines a book's edits touched and took away, refreshed at the next turn (`_follow_turn`)."""
        editor.gutter.set_source(self.mark_at, self.tip_at)
        waveform.set_rendering(session.rendering, lambda: session.busy, lambda: session.pending)
        editor.cursor_line_changed.connect(lambda _block: self._selection_moved())
        editor.mark_clicked.connect(self.select)
        waveform.line_clicked.connect(self.select)
        takes.delete_requested.connect(self._delete)
        takes.restore_requested.connect(self._restore)
        session.rendering_changed.connect(self._rendering_changed)
        document.takes_changed.connect(self._takes_changed)
        document.script_changed.connect(self._script_changed)
        document.replaced.connect(self._forget_deleted)

    def selected(self) -> Line | None:
        return self.editor.line_at_cursor(self.document.script)

    def words(self, line: Line) -> str:
        """The line's state in words: "up to date", "stale: text edited", "rendering…"."""
        if self.session.rendering(line.line_id):
            return WORDS["rendering"]
        state = self.document.state(line)
        return describe(state.reasons) if state.kind == "stale" else WORDS[state.kind]

    # -- what the gutter asks for the rows it paints ----------------------------------------------

    def mark_at(self, block: int) -> LineMark | None:
        lines = lines_on_row(self.document.script, block + 1)
        if not lines:
            return None
        line = lines[0]
        state = self.document.state(line)
        kind = "rendering" if self.session.rendering(line.line_id) else state.kind
        return LineMark(line.line_id, kind, state.takes, state.check.verdict if state.check is not None else "")

    def tip_at(self, block: int) -> str:
        lines = lines_on_row(self.document.script, block + 1)
        if not lines:
            return ""
        line = lines[0]
        state = self.document.state(line)
        takes = state.takes
        tip = f"{line.speaker}: {self.words(line)}" + (f"; {takes} take{'s' * (takes != 1)}" if takes else "")
        return tip + (f"\nChecks of the picked take: {state.check.summary()}" if state.check is not None else "")

    # -- keeping up with changes -----------------------------------------------------------------

    def show(self, now: bool = True) -> None:
        """Every line may have changed (another project, the settings, the voices): recount them all, beginning
        in this pass or (`now` False) the next."""
        self._stale = set()
        self.waveform.set_stale(self._stale, None)
        ids = self.document.script.line_ids
        self._recount.start((ids[i:i + LINES_A_STEP] for i in range(0, len(ids), LINES_A_STEP)), now)
        self.editor.gutter.refresh()
        self._selection_moved()  # the line under the cursor, by id

    def refresh(self, line_ids: Collection[str]) -> None:
        """These lines' states may have changed."""
        stale = self.document.stale_ids(line_ids)
        self.updates += len(line_ids)
        entered = stale - self._stale
        left = {line_id for line_id in line_ids if line_id in self._stale and line_id not in stale}
        self._stale |= entered
        self._stale -= left
        if entered or left:
            self.waveform.set_stale(self._stale, entered | left)
        self.editor.gutter.refresh(self._rows(line_ids))

    def _count(self, line_ids: Sequence[str]) -> None:
        """A step of a recount, as the script is now (an edit during the recount has refreshed its lines)."""
        self.updates += len(line_ids)
        self._stale |= self.document.stale_ids(line_ids)

    def _counted(self) -> None:
        self.waveform.set_stale(self._stale, None)

    def _script_changed(self, _order_changed: bool) -> None:
        change = self.document.change
        if change is None:
            self.show()
            return
        if len(change.touched) > RECOUNT_ABOVE:  # a book pasted: recounted in slices after the pass that parsed it
            self.show(now=False)
            return
        if len(self.document.script.lines) < SOON_LINES:
            self._follow(change.touched, change.gone)
            return
        self._touched.update(change.touched)  # the edits since the last turn, together
        self._gone.update(change.gone)
        pass_budget().ask(self._follow_turn)

    def _follow_turn(self, _until: float) -> None:
        touched, gone, self._touched, self._gone = self._touched, self._gone, set(), set()
        self._follow(touched, gone)

    def _follow(self, touched: Collection[str], gone: Collection[str]) -> None:
        """The lines an edit touched and those it took away."""
        self._stale -= set(gone)
        self.refresh(touched)
        if gone:
            self.waveform.set_stale(self._stale, gone)
        self._selection_moved()  # by id: a line inserted above moved the cursor's line, not the selection

    def _takes_changed(self, line_id: str) -> None:
        self.refresh((line_id,))
        selected = self.selected()
        if selected is not None and selected.line_id == line_id:
            self.show_takes()

    def _rows(self, line_ids: Collection[str]) -> list[int] | None:
        """The editor rows of these lines (None, for every row on screen, when they are many)."""
        if len(line_ids) > ROWS_ONE_BY_ONE:
            return None
        script = self.document.script
        return [line.source_line - 1 for i in line_ids if (line := script.line(i)) is not None]

    def _rendering_changed(self, line_ids: tuple[str, ...]) -> None:
        """Lines started or stopped rendering: nothing per line here; the views read the session."""
        self.editor.gutter.refresh(self._rows(line_ids))
        self.waveform.rendering_changed(line_ids)
        selected = self.selected()
        if selected is not None and (len(line_ids) > 1 or selected.line_id in line_ids):
            self.show_takes()

    # -- the selected line -----------------------------------------------------------------------

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
        self.editor.set_selected_block(line.source_line - 1 if line else -1)
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
