"""Which speech-recognition model and language transcribe new clips: chosen in Settings ▸ Transcripts, kept in
the window's QSettings (`asr/model`, `asr/language`), and read here, by the one reader, each time a clip is
transcribed or a take is checked."""

from __future__ import annotations

from PySide6.QtCore import QSettings

from s2studio.audio.asr import AsrSettings
from s2studio.audio.asr_models import DEFAULT_MODEL

MODEL_KEY = "asr/model"
LANGUAGE_KEY = "asr/language"


def asr_settings(settings: QSettings | None) -> AsrSettings:
    """The transcription settings chosen in Settings (the defaults without a settings store)."""
    if settings is None:
        return AsrSettings()
    return AsrSettings(str(settings.value(MODEL_KEY, DEFAULT_MODEL) or DEFAULT_MODEL),
                       str(settings.value(LANGUAGE_KEY, "") or ""))
