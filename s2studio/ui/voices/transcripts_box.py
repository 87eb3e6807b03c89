"""Settings ▸ Transcripts: which speech-recognition model fills in the transcripts of new clips, and in which
language (detected by default). Kept in the window's QSettings (`asr/model`, `asr/language`), read by the
voice panel each time it transcribes; `asr_settings` is the one reader."""

from __future__ import annotations

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QComboBox, QFormLayout, QGroupBox, QLabel, QWidget

from s2studio.audio.asr import AsrSettings
from s2studio.audio.asr_languages import LANGUAGES
from s2studio.audio.asr_models import DEFAULT_MODEL, MODEL_SIZES, asr_missing, describe, looks_downloaded

MODEL_KEY = "asr/model"
LANGUAGE_KEY = "asr/language"


def asr_settings(settings: QSettings | None) -> AsrSettings:
    """The transcription settings chosen in Settings (the defaults without a settings store)."""
    if settings is None:
        return AsrSettings()
    return AsrSettings(str(settings.value(MODEL_KEY, DEFAULT_MODEL) or DEFAULT_MODEL),
                       str(settings.value(LANGUAGE_KEY, "") or ""))


class TranscriptsBox(QGroupBox):
    def __init__(self, settings: QSettings, parent: QWidget | None = None) -> None:
        super().__init__("Transcripts", parent)
        self.setObjectName("transcriptsBox")
        self._settings = settings
        form = QFormLayout(self)
        form.setContentsMargins(6, 6, 6, 6)
        current = asr_settings(settings)
        self.model = QComboBox()
        self.model.setAccessibleName("Speech-recognition model")
        for size in MODEL_SIZES.values():
            self.model.addItem(f"{size.label} ({size.megabytes:,} MB)", size.name)
        if current.model not in MODEL_SIZES:  # a folder named by hand (or by a test)
            self.model.addItem(f"Folder: {describe(current.model)}", current.model)
        self.model.setCurrentIndex(max(0, self.model.findData(current.model)))
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
        form.addRow(self.note)
        self.model.currentIndexChanged.connect(self._changed)
        self.language.currentIndexChanged.connect(self._changed)
        self._show_note()

    def _changed(self) -> None:
        self._settings.setValue(MODEL_KEY, self.model.currentData())
        self._settings.setValue(LANGUAGE_KEY, self.language.currentData())
        self._show_note()

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
            self.note.setText(f"Downloaded from Hugging Face the first time a clip is transcribed "
                              f"({size.megabytes:,} MB).")
        else:
            self.note.setText("That folder holds no faster-whisper model.")
