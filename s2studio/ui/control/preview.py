"""A voice's preview: a fixed test sentence rendered with the voice by the loaded model, so that a person hears
the clone before casting it. QtCore only.

The render takes the studio's own path: one render job (`engine.render.Render`: the voice's codes from the
library's cache, its clips encoded on the engine thread when missing, then the stream) run by the engine host. The sentence, the seed and the sampler are fixed, so the audio depends only on the voice (its clips and
transcripts, `voice_key`) and the model; it is kept in the user cache under both
(`paths.cache_dir()/previews/<voice>-<model>.wav`, written through `state.atomic`) and played from there the
next time, with no render.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
from PySide6.QtCore import QObject, Signal

from s2studio import paths
from s2studio.audio.io import write_wav
from s2studio.engine import api
from s2studio.engine.plan import lora_digest
from s2studio.engine.render import render_for_script
from s2studio.errors import UserError
from s2studio.settings import Sampling
from s2studio.state.script import parse_script
from s2studio.state.staleness import voice_key
from s2studio.state.voices import Voice, VoiceLibrary
from s2studio.worker import EngineHost

logger = logging.getLogger(__name__)

SENTENCE = "Hello! This is how I sound. I can read any script you write, in exactly this voice."
SEED = 20240517
SPEAKER = "Voice"


def preview_path(voice: Voice, info: api.ModelInfo, folder: Path | None = None, lora: Path | None = None) -> Path:
    """Where the preview of `voice` by the model `info` is kept; `lora`: rendered with that LoRA file instead of
    the voice's own (a fine-tuning checkpoint heard before it is kept), keyed by the file's content."""
    model = hashlib.sha256(f"{info.name}|{info.codec_fingerprint}|{info.precision}".encode()).hexdigest()[:12]
    if lora is not None:  # the voice's own LoRA is not heard then
        heard = voice_key(replace(voice, lora=None)) + f"|lora:{lora_digest(Path(lora))}"
    else:
        heard = voice_key(voice)
    key = hashlib.sha256(heard.encode()).hexdigest()[:16]
    return (folder or paths.cache_dir() / "previews") / f"{voice.id}-{key}-{model}.wav"


class VoicePreview(QObject):
    ready = Signal(str, object)
    """(voice id, the preview's WAV path): rendered now or found in the cache."""
    message = Signal(str)
    """A one-line notice (rendering, failed, no model)."""
    busy_changed = Signal(bool)

    def __init__(self, host: EngineHost, library: VoiceLibrary, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.host, self.library = host, library
        self.info: api.ModelInfo | None = None
        self.job_id: str | None = None
        self._voice: Voice | None = None
        self._lora: Path | None = None
        host.model_ready.connect(self._model_ready)
        host.line_finished.connect(self._line_finished)
        host.job_finished.connect(self._job_finished)
        host.job_failed.connect(self._job_failed)

    @property
    def busy(self) -> bool:
        return self.job_id is not None

    def _model_ready(self, event: api.ModelReady) -> None:
        self.info = event.info

    def preview(self, voice: Voice, lora: Path | None = None) -> Path | None:
        """Play the cached preview of `voice` (returns its path), or start rendering it (returns None; `ready`
        follows). It speaks with the voice's own LoRA, or with `lora` when given (a fine-tuning checkpoint)."""
        if self.busy:
            self.message.emit("A preview is being rendered; wait for it to finish.")
            return None
        info = self.info
        if info is None:
            self.message.emit("Load a model first (File ▸ Model…) to hear a preview of the voice.")
            return None
        cached = preview_path(voice, info, lora=lora)
        if cached.is_file():
            self.ready.emit(voice.id, cached)
            return cached
        speaks_with = lora if lora is not None else self.library.lora_path(voice)
        try:
            render = render_for_script(parse_script(f"{SPEAKER}: {SENTENCE}"), {SPEAKER: voice}, self.library,
                                       info.codec_fingerprint, self.host.new_job_id("preview"),
                                       Sampling(seed_mode="fixed", seed=SEED),
                                       lora_paths={voice.id: speaks_with} if speaks_with is not None else {})
        except UserError as exc:
            self.message.emit(f"Cannot render the preview: {exc}")
            return None
        self._voice, self._lora, self.job_id = voice, lora, render.job_id
        self.host.submit(render.job_id, render.work)
        self.busy_changed.emit(True)
        self.message.emit(f"Rendering a preview of “{voice.name}”…")
        return None

    def cancel(self) -> None:
        if self.job_id is not None:
            self.host.cancel(self.job_id)

    def _line_finished(self, event: api.LineFinished) -> None:
        if event.job_id != self.job_id or self._voice is None or self.info is None:
            return
        voice, path = self._voice, preview_path(self._voice, self.info, lora=self._lora)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_wav(path, np.asarray(event.audio, dtype=np.float32), self.info.sample_rate)
        except (OSError, UserError) as exc:
            self.message.emit(f"Cannot keep the preview: {exc}")
            return
        self.ready.emit(voice.id, path)

    def _job_finished(self, event: api.JobFinished) -> None:
        if event.job_id == self.job_id:
            self._done()

    def _job_failed(self, event: api.JobFailed) -> None:
        if event.job_id == self.job_id:
            self.message.emit(f"Cannot render the preview: {event.error}")
            self._done()

    def _done(self) -> None:
        self.job_id, self._voice = None, None
        self.busy_changed.emit(False)
