"""A voice's preview: a fixed test sentence rendered with the voice by the loaded model, so that a person hears
the clone before casting it. QtCore only.

The render takes the studio's own path: the voice's codes from the library's cache (its clips encoded on the
engine thread when missing, `EncodeBridge`), one request compiled by `engine.plan`, the job run by the engine
host. The sentence, the seed and the sampler are fixed, so the audio depends only on the voice (its clips and
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
from s2studio.engine.plan import compile_request, lora_digest
from s2studio.errors import Cancelled, UserError
from s2studio.state.script import parse_script
from s2studio.state.staleness import voice_key
from s2studio.state.voices import Voice, VoiceLibrary
from s2studio.ui.control.background import Background
from s2studio.ui.control.render import EncodeBridge
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
        self._bridge = EncodeBridge(host, self)
        self._task = Background("voice-preview", self)
        self._task.done.connect(self._built)
        self.job_id: str | None = None
        self._voice: Voice | None = None
        self._lora: Path | None = None
        host.model_ready.connect(self._model_ready)
        host.line_finished.connect(self._line_finished)
        host.job_finished.connect(self._job_finished)
        host.job_failed.connect(self._job_failed)

    @property
    def busy(self) -> bool:
        return self._task.running or self.job_id is not None

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
        self._voice, self._lora = voice, lora
        library, fingerprint = self.library, info.codec_fingerprint
        names = {str(library.clip_path(voice, c)): f"{voice.id}/{c.id}" for c in voice.clips}
        clip_paths = {voice.id: [library.clip_path(voice, c) for c in voice.clips]}
        speaks_with = lora if lora is not None else library.lora_path(voice)
        lora_paths = {voice.id: speaks_with} if speaks_with is not None else None
        job_id = self.host.new_job_id("preview")

        def build(task: Background) -> api.SynthesisRequest:
            codes = library.codes(voice, self._bridge.encoder(task, names), fingerprint)
            if task.cancel.is_set():
                raise Cancelled()
            script = parse_script(f"{SPEAKER}: {SENTENCE}")
            return compile_request(script, {SPEAKER: voice}, {voice.id: codes}, job_id,
                                   api.SamplingParams(seed=SEED), clip_paths=clip_paths, lora_paths=lora_paths)

        self._task.start(build)
        self.busy_changed.emit(True)
        self.message.emit(f"Rendering a preview of “{voice.name}”…")
        return None

    def cancel(self) -> None:
        if self._task.running:
            self._task.cancel.set()
            self._bridge.cancel()
        if self.job_id is not None:
            self.host.cancel(self.job_id)

    def _built(self, request: api.SynthesisRequest | None, error: str) -> None:
        if request is None:
            self._voice = None
            self.busy_changed.emit(False)
            if error != "Cancelled.":
                self.message.emit(f"Cannot render the preview: {error}")
            return
        self.job_id = request.job_id
        self.host.generate(request)

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
