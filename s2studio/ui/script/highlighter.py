"""The script's colours: headings, speaker names in their colour, `[tags]`, raw `<|speaker:i|>` tags.

Rows are highlighted one at a time and each on its own (no row depends on another), so this does not use
QSyntaxHighlighter, which highlights every row of a document it is given at once: opening a book of 10,000
rows, or a change of colours, would hold the window for as long. Here a row an edit touched is highlighted
at once; the others (a text set whole, a paste, new colours) are highlighted in turns of the window's work in
slices (`slices.pass_budget`: one budget a pass shared with the cast's rows and the lines' states), the rows on
screen first, so the window shows them coloured and keeps answering while the rest follows. A row's formats go
into its layout (`QTextLayout.setFormats`, as QSyntaxHighlighter does), so they are neither text nor undo steps;
a row not laid out yet (a book's hidden rows) is coloured without a repaint of the view.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable

from PySide6.QtCore import QObject
from PySide6.QtGui import QColor, QFont, QTextBlock, QTextCharFormat, QTextDocument, QTextLayout

from s2studio.ui.colors import speaker_color, speaker_colors
from s2studio.ui.control.slices import pass_budget

HEADING = re.compile(r"^\s*#.*$")
SPEAKER = re.compile(r"^\s*([^\s\[\]:<>#][^\[\]:<>#]{0,39}):")
TAG = re.compile(r"\[[^\[\]\n]*\]")
RAW_SPEAKER = re.compile(r"<\|speaker:\d+\|>")
AT_ONCE = 64
"""An edit of up to this many rows is highlighted at once; a larger one (a paste, a text set whole) in turns."""


class ScriptHighlighter(QObject):
    def __init__(self, document: QTextDocument, dark: bool,
                 on_screen: Callable[[], Iterable[QTextBlock]] = lambda: ()) -> None:
        super().__init__(document)
        self._doc = document
        self._on_screen = on_screen
        """The rows the editor shows now: highlighted before the others."""
        self._places: dict[str, int] = {}
        self._colors: dict[str, QColor] = {}
        self._generation = 1
        """Bumped when every row must be highlighted again; a row highlighted for it keeps it as its state."""
        self._next = 0
        """The first row that may still wait for the current generation."""
        self._budget = pass_budget()
        self.rows_highlighted = 0
        """Rows highlighted, counted (what a change cost)."""
        document.contentsChange.connect(self._changed)
        self.set_dark(dark)

    # -- what to colour --------------------------------------------------------------------------

    def set_places(self, places: dict[str, int]) -> None:
        """Each speaker's place in the palette (`Project.speaker_colors`): its name takes that colour."""
        if places != self._places:
            self._places = dict(places)
            self._colors = speaker_colors(self._places, self._dark)
            self.rehighlight()

    def set_dark(self, dark: bool) -> None:
        self._dark = dark
        self._colors = speaker_colors(self._places, dark)
        self._heading = QTextCharFormat()
        self._heading.setFontWeight(QFont.Weight.Bold)
        self._heading.setForeground(QColor("#9aa4b0") if dark else QColor("#5a6470"))
        self._tag = QTextCharFormat()
        self._tag.setForeground(QColor("#d7a24a") if dark else QColor("#9a5b00"))
        self._tag.setBackground(QColor(215, 162, 74, 40))
        self._raw = QTextCharFormat()
        self._raw.setForeground(QColor("#8fb3ff") if dark else QColor("#2a55b0"))
        self._raw.setFontItalic(True)
        self.rehighlight()

    def formats(self, text: str) -> list[QTextLayout.FormatRange]:
        """The coloured ranges of one row."""
        out: list[QTextLayout.FormatRange] = []

        def add(start: int, length: int, fmt: QTextCharFormat) -> None:
            r = QTextLayout.FormatRange()
            r.start, r.length, r.format = start, length, fmt
            out.append(r)

        if HEADING.match(text):
            add(0, len(text), self._heading)
            return out
        m = SPEAKER.match(text)
        if m:
            fmt = QTextCharFormat()
            name = " ".join(m.group(1).split())
            fmt.setForeground(self._colors.get(name) or speaker_color(name, self._dark))
            fmt.setFontWeight(QFont.Weight.Bold)
            add(m.start(1), m.end() - m.start(1), fmt)
        for m in TAG.finditer(text):
            add(m.start(), m.end() - m.start(), self._tag)
        for m in RAW_SPEAKER.finditer(text):
            add(m.start(), m.end() - m.start(), self._raw)
        return out

    # -- when ------------------------------------------------------------------------------------

    def rehighlight(self) -> None:
        """Every row again: those on screen soon, the rest a slice at a time."""
        self._generation += 1
        self._next = 0
        self._budget.ask(self._work)

    @property
    def pending(self) -> bool:
        """Rows wait to be highlighted."""
        return self._next < self._doc.blockCount()

    def finish(self) -> None:
        """Highlight every row still waiting, now (tests, screenshots)."""
        while self.pending:
            self._work(until=float("inf"))

    def _changed(self, position: int, removed: int, added: int) -> None:
        if not (removed or added):
            return
        doc = self._doc
        block, last = doc.findBlock(position), doc.findBlock(position + added)
        if not last.isValid():
            last = doc.lastBlock()
        if last.blockNumber() - block.blockNumber() < AT_ONCE:
            while block.isValid():
                self._highlight(block, editing=True)
                if block == last:
                    return
                block = block.next()
            return
        block.setUserState(-1)  # the rows an edit began and ended in were rows before it: coloured anew too
        last.setUserState(-1)  # (the rows between are new ones, not coloured yet)
        self._next = min(self._next, block.blockNumber())  # many rows (a paste): in turns, those on screen first
        if self.pending:
            self._budget.ask(self._work)

    def _work(self, until: float) -> None:
        """A turn: the rows on screen, then rows in order until the thread's CPU time reaches `until`."""
        for block in self._on_screen():
            if block.userState() != self._generation:
                self._highlight(block)
        block = self._doc.findBlockByNumber(self._next)
        while block.isValid():
            if block.userState() != self._generation:
                self._highlight(block)
            block = block.next()
            self._next += 1
            if time.thread_time() >= until:
                break
        if self.pending:
            self._budget.ask(self._work)

    def _highlight(self, block: QTextBlock, editing: bool = False) -> None:
        """Colour `block` (`editing`: within the document's edit, `_changed`)."""
        layout = block.layout()
        if layout is None:
            return
        layout.setFormats(self.formats(block.text()))
        block.setUserState(self._generation)
        if editing or layout.lineCount():  # laid out already: laid out again, coloured
            self._doc.markContentsDirty(block.position(), block.length())
        else:  # never shown yet (most of a book just opened): laid out with its formats when it shows. Marked dirty
            # all the same (else the next edit's change would reach back to it), without the repaint of the view
            lays_out = self._doc.documentLayout()
            lays_out.blockSignals(True)
            self._doc.markContentsDirty(block.position(), block.length())
            lays_out.blockSignals(False)
        self.rows_highlighted += 1
