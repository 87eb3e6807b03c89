"""The cast above the editor: a voice picker per speaker named in the script, wrapping onto as many rows
as it needs (and scrolling beyond three), so twenty speakers never widen the window; and one line that
says which speakers still lack a voice, and which name looks like a typo of another."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QFont, QPalette, QResizeEvent
from PySide6.QtWidgets import QComboBox, QFrame, QHBoxLayout, QLabel, QScrollArea, QSizePolicy, QVBoxLayout, QWidget

from s2studio.state.script import near_name
from s2studio.ui import wheel_guard
from s2studio.ui.colors import is_dark, speaker_color, speaker_colors
from s2studio.ui.control.slices import Slices
from s2studio.ui.script.flow_layout import FlowLayout

NO_VOICE = ""
VISIBLE_ROWS = 3
"""Rows of speakers shown before the cast scrolls."""
AT_ONCE = 6
"""A cast of up to this many speakers has its rows built at once (a row with its voice combo costs 1-3 ms)."""
BUILD_BUDGET_S = 0.003
"""CPU time a pass may spend on a larger cast's rows: a book's 20 speakers are built over several passes,
between which the window keeps answering, and the pass that applies a pasted book's parse makes only its first
rows."""


def missing_voices_message(speakers: Sequence[str], voiced: Sequence[str]) -> str:
    """'3 speakers have no voice: Carol, Dave, Eve' and a 'did you mean' for each near-miss name."""
    if not speakers:
        return ""
    names = ", ".join(speakers)
    text = f"No voice for {names}" if len(speakers) == 1 else f"{len(speakers)} speakers have no voice: {names}"
    hints = [f"“{s}”: did you mean {near}?" for s in speakers if (near := near_name(s, voiced))]
    return "⚠ " + "  ·  ".join([text, *hints])


class CastPanel(QWidget):
    cast_changed = Signal(str, str)
    """(speaker, voice id) after the person picked a voice ("" = none)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("castPanel")
        self.setAccessibleName("Cast: a voice for each speaker")
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Maximum)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(8, 4, 8, 4)
        outer.setSpacing(2)
        head = QHBoxLayout()
        head.addWidget(QLabel("<b>Cast</b>"))
        self._hint = QLabel("Write <i>Name:</i> at the start of a line to add a speaker.")
        self._hint.setEnabled(False)
        head.addWidget(self._hint)
        self.summary = QLabel("")
        self.summary.setObjectName("castWarnings")
        self.summary.setAccessibleName("Cast warnings")
        self.summary.setWordWrap(True)
        self.summary.setStyleSheet("#castWarnings { color: #c2410c; }")
        self.summary.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        head.addWidget(self.summary, 1)
        outer.addLayout(head)
        self._chips = QWidget()
        self._flow = FlowLayout(self._chips, spacing=10)
        self._flow.setContentsMargins(0, 0, 0, 0)
        self.scroll = QScrollArea()
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setWidgetResizable(True)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroll.setWidget(self._chips)
        self.scroll.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        outer.addWidget(self.scroll)
        self.combos: dict[str, QComboBox] = {}
        self._voices: list[tuple[str, str]] = []
        self._speakers: tuple[str, ...] = ()
        self._cast: dict[str, str] = {}
        self._places: dict[str, int] = {}
        self._colors: dict[str, QColor] = {}
        self._dark = False
        self._builder: Slices[str] = Slices(self._build_row, self._built, self, budget_s=BUILD_BUDGET_S)
        """The speakers' rows, built in order a few a pass (`building`)."""

    def set_voices(self, voices: list[tuple[str, str]]) -> None:
        """(voice id, display name) of every voice in the library."""
        self._voices = list(voices)
        self._rebuild()

    def set_speakers(self, speakers: Sequence[str], cast: dict[str, str], places: dict[str, int]) -> None:
        """The script's speakers, their voices and their places in the palette (`Project.speaker_colors`)."""
        if tuple(speakers) == self._speakers and cast == self._cast and places == self._places:
            return
        same_speakers = tuple(speakers) == self._speakers and places == self._places
        self._speakers, self._cast, self._places = tuple(speakers), dict(cast), dict(places)
        if same_speakers:  # only voices picked (a book's speakers cast by name): the combos follow, none is rebuilt
            for speaker, combo in self.combos.items():
                combo.blockSignals(True)
                combo.setCurrentIndex(max(combo.findData(self._cast.get(speaker, NO_VOICE)), 0))
                combo.blockSignals(False)
            self._show_summary()
        else:
            self._rebuild()

    def unvoiced(self) -> list[str]:
        ids = {vid for vid, _ in self._voices}
        return [s for s in self._speakers if self._cast.get(s, NO_VOICE) not in ids]

    def _rebuild(self) -> None:
        while (item := self._flow.takeAt(0)) is not None:
            if item.widget() is not None:
                item.widget().hide()  # gone from view now; deleted when the event loop next runs
                item.widget().deleteLater()
        self.combos.clear()
        self._hint.setVisible(not self._speakers)
        self._show_summary()
        dark = is_dark(self.palette())
        self._colors, self._dark = speaker_colors(self._places, dark), dark
        self._builder.start(self._speakers)  # the panel keeps its height until the last row is built
        if len(self._speakers) <= AT_ONCE:
            self._builder.finish()

    def building(self) -> bool:
        """Rows are still being built (a large cast takes a few passes of the event loop)."""
        return self._builder.busy

    def _build_row(self, speaker: str) -> None:
        """One speaker's row, with its current voice."""
        chip = QWidget()
        row = QHBoxLayout(chip)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(4)
        label = QLabel(speaker)
        colored, bold = QPalette(self.palette()), QFont(self.font())
        bold.setWeight(QFont.Weight.DemiBold)
        colored.setColor(QPalette.ColorRole.WindowText, self._colors.get(speaker) or speaker_color(speaker, self._dark))
        label.setPalette(colored)  # not a style sheet: a widget with one of its own is slow to polish
        label.setFont(bold)
        combo = QComboBox()
        combo.setObjectName(f"cast:{speaker}")
        combo.setAccessibleName(f"Voice for {speaker}")
        combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        combo.setMinimumContentsLength(12)
        combo.addItem("— choose a voice —", NO_VOICE)
        for vid, name in self._voices:
            combo.addItem(name, vid)
        combo.setCurrentIndex(max(combo.findData(self._cast.get(speaker, NO_VOICE)), 0))
        combo.currentIndexChanged.connect(partial(self._picked, speaker))
        wheel_guard.guard(combo)
        label.setBuddy(combo)
        row.addWidget(label)
        row.addWidget(combo)
        self._flow.addWidget(chip)
        chip.show()
        self.combos[speaker] = combo

    def _built(self) -> None:
        self._fit_height()

    def _show_summary(self) -> None:
        missing = self.unvoiced() if self._voices else []
        voiced = [s for s in self._speakers if s not in missing]
        text = missing_voices_message(missing, voiced)
        self.summary.setText(text)
        self.summary.setToolTip(text)
        self.summary.setVisible(bool(text))

    def _fit_height(self) -> None:
        """As tall as the rows of speakers, up to VISIBLE_ROWS rows (then it scrolls)."""
        width = max(self.scroll.viewport().width(), 200)
        needed = self._flow.heightForWidth(width) if self._speakers else 0
        row = next((c.sizeHint().height() for c in self.combos.values()), 26)
        limit = VISIBLE_ROWS * row + (VISIBLE_ROWS - 1) * 10
        self.scroll.setFixedHeight(min(needed, limit))
        self.scroll.setVisible(bool(self._speakers))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._fit_height()

    def _picked(self, speaker: str, _index: int = 0) -> None:
        vid = self.combos[speaker].currentData() or NO_VOICE
        self._cast[speaker] = vid
        self._show_summary()
        self.cast_changed.emit(speaker, vid)
