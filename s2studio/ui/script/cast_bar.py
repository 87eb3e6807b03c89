"""The cast bar above the editor: one voice picker per speaker named in the script."""

from __future__ import annotations

from functools import partial

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QSizePolicy, QWidget

from s2studio.ui.colors import is_dark, speaker_color

NO_VOICE = ""


class CastBar(QWidget):
    cast_changed = Signal(str, str)
    """(speaker, voice id) after the user picked a voice ("" = none)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("castBar")
        self.setAccessibleName("Cast: a voice for each speaker")
        self._layout = QHBoxLayout(self)
        self._layout.setContentsMargins(8, 4, 8, 4)
        self._layout.setSpacing(10)
        self._title = QLabel("<b>Cast</b>")
        self._layout.addWidget(self._title)
        self._hint = QLabel("Write <i>Name:</i> at the start of a line to add a speaker.")
        self._hint.setEnabled(False)
        self._layout.addWidget(self._hint)
        self._layout.addStretch(1)
        self.combos: dict[str, QComboBox] = {}
        self._labels: dict[str, QLabel] = {}
        self._voices: list[tuple[str, str]] = []
        self._speakers: tuple[str, ...] = ()
        self._cast: dict[str, str] = {}

    @property
    def has_voices(self) -> bool:
        return bool(self._voices)

    def set_voices(self, voices: list[tuple[str, str]]) -> None:
        """(voice id, display name) of every voice in the library."""
        self._voices = list(voices)
        self._rebuild()

    def set_speakers(self, speakers: tuple[str, ...], cast: dict[str, str]) -> None:
        if speakers == self._speakers and cast == self._cast:
            return
        self._speakers, self._cast = tuple(speakers), dict(cast)
        self._rebuild()

    def _rebuild(self) -> None:
        for w in list(self.combos.values()) + list(self._labels.values()):
            self._layout.removeWidget(w)
            w.deleteLater()
        self.combos.clear()
        self._labels.clear()
        self._hint.setVisible(not self._speakers)
        dark = is_dark(self.palette())
        for i, speaker in enumerate(self._speakers):
            label = QLabel(speaker)
            label.setStyleSheet(f"color: {speaker_color(speaker, dark).name()}; font-weight: 600;")
            combo = QComboBox()
            combo.setObjectName(f"cast:{speaker}")
            combo.setAccessibleName(f"Voice for {speaker}")
            combo.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
            combo.setMinimumContentsLength(10)
            combo.addItem("— choose a voice —", NO_VOICE)
            for vid, name in self._voices:
                combo.addItem(name, vid)
            current = self._cast.get(speaker, NO_VOICE)
            idx = combo.findData(current)
            combo.setCurrentIndex(max(idx, 0))
            combo.currentIndexChanged.connect(partial(self._picked, speaker))
            label.setBuddy(combo)
            self._layout.insertWidget(1 + 2 * i, label)
            self._layout.insertWidget(2 + 2 * i, combo)
            self._labels[speaker] = label
            self.combos[speaker] = combo

    def _picked(self, speaker: str, _index: int = 0) -> None:
        vid = self.combos[speaker].currentData() or NO_VOICE
        self._cast[speaker] = vid
        self.cast_changed.emit(speaker, vid)
