"""The chapter list beside the script: a book's headings, to jump to one, render one, or show one alone on the
timeline. It follows the script's headings (only rebuilt when they change) and marks the chapter the
cursor is in. A book's list follows its script a pass after the script changed (in a turn of the window's work
in slices), not in the pass that applies a pasted book's parse."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QLabel, QListWidget, QListWidgetItem, QPushButton, QVBoxLayout, QWidget

from s2studio.state.chapters import Chapter, chapter_at, chapter_lines, chapter_span, chapters
from s2studio.state.script import Line
from s2studio.ui.control.document import Document
from s2studio.ui.control.slices import pass_budget
from s2studio.ui.player.waveform import WaveformView
from s2studio.ui.script.editor import ScriptEditor


MIN_WIDTH = 1
SOON_LINES = 1000
"""A script of this many lines or more has its chapters followed a pass after it changed (or was opened)."""
BOOK_ON_TIMELINE = "Timeline: book"
CHAPTER_ON_TIMELINE = "Timeline: chapter"


class ChapterPanel(QWidget):
    """The list and its two buttons (no logic: `ChapterNavigation` drives it)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chapterPanel")
        self.setMinimumWidth(MIN_WIDTH)  # it gives way (to nothing) before the script does: never widens the window
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 0, 4)
        layout.setSpacing(4)
        title = QLabel("Chapters")
        title.setObjectName("chaptersTitle")
        font = title.font()
        font.setBold(True)
        title.setFont(font)
        layout.addWidget(title)
        self.list = QListWidget()
        self.list.setObjectName("chapterList")
        self.list.setAccessibleName("Chapters: click one to go to it")
        # a long title is cut in its middle (its start and its line count stay), never scrolled sideways;
        # its tooltip says it whole
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.list.setWordWrap(False)
        layout.addWidget(self.list, 1)
        self.empty = QLabel("Start a line with # to begin a chapter; chapters appear here.")
        self.empty.setWordWrap(True)
        self.empty.setObjectName("chaptersEmpty")
        layout.addWidget(self.empty)
        buttons = QVBoxLayout()  # one above the other: each as wide as the panel, however narrow it is
        buttons.setSpacing(4)
        self.render_button = QPushButton("Render chapter")
        self.render_button.setObjectName("renderChapter")
        self.render_button.setToolTip("Render every line of the selected chapter")
        self.render_button.setAccessibleName("Render the selected chapter")
        self.timeline_button = QPushButton(BOOK_ON_TIMELINE)
        self.timeline_button.setObjectName("chapterTimeline")
        self.timeline_button.setCheckable(True)
        self.timeline_button.setToolTip("Show only the selected chapter on the timeline, or the whole book again")
        self.timeline_button.toggled.connect(
            lambda on: self.timeline_button.setText(CHAPTER_ON_TIMELINE if on else BOOK_ON_TIMELINE))
        self.timeline_button.setAccessibleName("Show only the selected chapter on the timeline")
        buttons.addWidget(self.render_button)
        buttons.addWidget(self.timeline_button)
        layout.addLayout(buttons)


class ChapterNavigation(QObject):
    def __init__(self, panel: ChapterPanel, document: Document, editor: ScriptEditor, waveform: WaveformView,
                 render: Callable[[list[Line]], None], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.panel, self.document, self.editor, self.waveform, self._render = panel, document, editor, waveform, render
        self.chapters: list[Chapter] = []
        self._shown: tuple[tuple[str, int, int], ...] | None = None
        panel.list.itemClicked.connect(lambda item: self.jump(panel.list.row(item)))
        panel.list.currentRowChanged.connect(self._current_changed)
        panel.render_button.clicked.connect(self.render_selected)
        panel.timeline_button.toggled.connect(lambda _on: self._scope())
        document.script_changed.connect(lambda _order: self._script_changed())
        document.replaced.connect(self._script_changed)
        editor.cursor_line_changed.connect(self._cursor_moved)
        self.refresh()

    def _script_changed(self) -> None:
        if len(self.document.script.lines) >= SOON_LINES:
            pass_budget().ask(self._refresh_turn)
        else:
            self.refresh()

    def _refresh_turn(self, _until: float) -> None:
        self.refresh()

    def refresh(self) -> None:
        """The script changed: rebuild the list when its headings did, keep the timeline's chapter in step."""
        script = self.document.script
        self.chapters = chapters(script)
        shown = tuple((c.title, c.level, _count(chapter_span(script, c))) for c in self.chapters)
        if shown != self._shown:
            self._shown = shown
            current = self.panel.list.currentRow()
            self.panel.list.blockSignals(True)
            self.panel.list.clear()
            for title, level, count in shown:
                item = QListWidgetItem(f"{'    ' * max(level - 1, 0)}{title}  ·  {count}")
                item.setToolTip(f"{title}: {count} line{'s' * (count != 1)}")
                self.panel.list.addItem(item)
            self.panel.list.setCurrentRow(min(current, len(self.chapters) - 1))
            self.panel.list.blockSignals(False)
        has = bool(self.chapters)
        self.panel.list.setVisible(has)
        self.panel.empty.setVisible(not has)
        self.panel.render_button.setEnabled(has)
        self.panel.timeline_button.setEnabled(has)
        if self.panel.timeline_button.isChecked():
            self._scope()

    def selected(self) -> Chapter | None:
        row = self.panel.list.currentRow()
        return self.chapters[row] if 0 <= row < len(self.chapters) else None

    def lines_of(self, chapter: Chapter) -> Sequence[Line]:
        return chapter_lines(self.document.script, chapter)

    def jump(self, index: int) -> None:
        """Put the cursor on the chapter's heading, at the top of the editor."""
        if not 0 <= index < len(self.chapters):
            return
        self.panel.list.setCurrentRow(index)
        block = self.chapters[index].row - 1
        bar = self.editor.verticalScrollBar()
        self.editor.select_block(block)
        bar.setValue(bar.maximum())  # scrolled past, then back: the heading ends up at the top
        self.editor.select_block(block)
        self.editor.setFocus(Qt.FocusReason.OtherFocusReason)

    def render_selected(self) -> None:
        chapter = self.selected()
        if chapter is not None:
            self._render(list(self.lines_of(chapter)))

    def _current_changed(self, _row: int) -> None:
        if self.panel.timeline_button.isChecked():
            self._scope()

    def _scope(self) -> None:
        chapter = self.selected() if self.panel.timeline_button.isChecked() else None
        scope = None if chapter is None else tuple(ln.line_id for ln in self.lines_of(chapter))
        if scope != self.waveform.scope:
            self.waveform.set_scope(scope)

    def _cursor_moved(self, block: int) -> None:
        index = chapter_at(self.chapters, block + 1)
        if index is not None and index != self.panel.list.currentRow():
            self.panel.list.setCurrentRow(index)


def _count(span: tuple[int, int]) -> int:
    return span[1] - span[0]
