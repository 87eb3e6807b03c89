"""Settings ▸ Transcripts: which speech-recognition model fills in the transcripts of new clips, and in which
language (detected by default). Kept in the window's QSettings; `ui.control.asr_choice.asr_settings` is the one
reader (the new-voice dialog and the take checks read it each time they transcribe).

The model is a size downloaded on first use, a model already on this computer (`audio.asr_local`: found in the
caches, so transcripts work offline), or a folder chosen with "Choose a folder…" (accepted only when it holds a
faster-whisper model; otherwise the choice stays as it was and the note says why)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings, Signal
from PySide6.QtWidgets import QComboBox, QFileDialog, QFormLayout, QGroupBox, QLabel, QVBoxLayout, QWidget

from s2studio.audio.asr_languages import LANGUAGES
from s2studio.audio.asr_local import local_models, present_instead
from s2studio.audio.asr_models import MODEL_SIZES, asr_missing, describe, looks_downloaded, model_folder
from s2studio.errors import UserError
from s2studio.ui.control.asr_choice import LANGUAGE_KEY, MODEL_KEY, asr_settings

CHOOSE = "choose-a-folder"
"""The data of the "Choose a folder…" entry (never stored: choosing it opens the folder dialog)."""


class TranscriptsBox(QGroupBox):
    changed = Signal()
    """Another model or language was chosen (stored already)."""

    def __init__(self, settings: QSettings, parent: QWidget | None = None) -> None:
        super().__init__("Transcripts", parent)
        self.setObjectName("transcriptsBox")
        self._settings = settings
        column = QVBoxLayout(self)  # the form, then the note under it at its full height
        column.setContentsMargins(6, 6, 6, 6)
        form = QFormLayout()
        column.addLayout(form)
        current = asr_settings(settings)
        self.model = QComboBox()
        self.model.setAccessibleName("Speech-recognition model")
        for size in MODEL_SIZES.values():
            self.model.addItem(f"{size.label} ({size.megabytes:,} MB)", size.name)
        for local in local_models():
            if local.model not in MODEL_SIZES:
                self.model.addItem(local.label, local.model)
        if self.model.findData(current.model) < 0:  # a folder chosen before (or named by a test)
            self.model.addItem(f"Folder: {describe(current.model)}", current.model)
        self.model.addItem("Choose a folder…", CHOOSE)
        self.model.setCurrentIndex(max(0, self.model.findData(current.model)))
        self._shown = self.model.currentIndex()
        """The entry in use: what the box goes back to when a chosen folder is refused."""
        form.addRow("Model", self.model)
        self.language = QComboBox()
        self.language.setAccessibleName("Language of the clips")
        self.language.addItem("Detect automatically", "")
        for code, name in sorted(LANGUAGES.items(), key=lambda kv: kv[1]):
            self.language.addItem(name, code)
        self.language.setCurrentIndex(max(0, self.language.findData(current.language)))
        form.addRow("Language", self.language)
        self.note = QLabel("")
        self.note.setWordWrap(True)
        self.note.setEnabled(False)
        column.addWidget(self.note)
        self.model.currentIndexChanged.connect(self._changed)
        self.language.currentIndexChanged.connect(self._changed)
        self._show_note()

    def _changed(self) -> None:
        if self.model.currentData() == CHOOSE:
            self._choose_folder()
            return
        self._shown = self.model.currentIndex()
        self._settings.setValue(MODEL_KEY, self.model.currentData())
        self._settings.setValue(LANGUAGE_KEY, self.language.currentData())
        self._show_note()
        self.changed.emit()

    def _choose_folder(self) -> None:
        """Ask for a folder; a faster-whisper model is added and chosen, anything else refused with the reason."""
        self.model.blockSignals(True)
        self.model.setCurrentIndex(self._shown)  # the choice in use until a folder is accepted
        self.model.blockSignals(False)
        name = QFileDialog.getExistingDirectory(self, "Choose a faster-whisper model folder")
        if not name:
            return
        try:
            folder = str(model_folder(Path(name)))
        except UserError as exc:
            self.note.setText(f"✗ {exc}.")
            return
        row = self.model.findData(folder)
        if row < 0:
            row = self.model.count() - 1  # before "Choose a folder…"
            self.model.insertItem(row, f"Folder: {describe(folder)}", folder)
        self.model.setCurrentIndex(row)

    def _show_note(self) -> None:
        missing = asr_missing()
        if missing:
            self.note.setText(missing + ".")
            return
        model = self.model.currentData()
        size = MODEL_SIZES.get(model)
        if looks_downloaded(model):
            self.note.setText("New clips are transcribed automatically; check each transcript word for word.")
        elif size is not None:
            here = present_instead(model)
            offline = f" Without internet, choose one already on this computer: {here.label}." if here else ""
            self.note.setText(f"Downloaded from Hugging Face the first time a clip is transcribed "
                              f"({size.megabytes:,} MB).{offline}")
        else:
            self.note.setText("That folder holds no faster-whisper model.")
