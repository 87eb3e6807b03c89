"""Before a render: every voice in the cast needs its clips' codes for the loaded codec. Missing
codes are encoded on the engine thread (an `EncodeRequest`), cached in the voice library, and only
then is the synthesis request built and started. The GUI never waits: each step is a signal."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
from PySide6.QtCore import QObject, Signal

from s2studio.engine import api
from s2studio.engine.plan import compile_request
from s2studio.errors import UserError
from s2studio.state.project import Project
from s2studio.state.script import Line, Script
from s2studio.state.voice_archive import VOICE_FILE
from s2studio.state.voices import Voice, VoiceLibrary
from s2studio.ui.session import RenderSession
from s2studio.worker import EngineHost

logger = logging.getLogger(__name__)


class _Missing(Exception):
    pass


def _no_encoder(path: Path) -> np.ndarray:
    raise _Missing(str(path))


def build_request(job_id: str, lines: Sequence[Line], script: Script, project: Project, library: VoiceLibrary,
                  fingerprint: str) -> api.SynthesisRequest:
    """The engine request for `lines` via `engine.plan.compile_request` (the same compiler as the CLI)."""
    missing = [s for s in dict.fromkeys(ln.speaker for ln in lines) if not project.cast.get(s)]
    if missing:
        raise UserError(f"No voice for {', '.join(missing)}: pick one in the cast bar above the script.")
    cast: dict[str, Voice] = {}
    codes: dict[str, list[np.ndarray]] = {}
    for speaker in script.speakers:
        vid = project.cast.get(speaker, "")
        if not vid:
            continue
        voice = library.get(vid)
        cast[speaker] = voice
        if voice.id not in codes:
            try:
                codes[voice.id] = library.codes(voice, _no_encoder, fingerprint)
            except _Missing:
                raise UserError(f"Voice “{voice.name}” is not encoded yet; render again.") from None
    s = project.settings
    sampling = api.SamplingParams(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                                  max_new_tokens=s.max_frames, seed=s.seed if s.seed_mode == "fixed" else None)
    request = compile_request(script, cast, codes, job_id, sampling, batching=s.batching,
                              line_ids=[ln.line_id for ln in lines],
                              clip_paths={v.id: [library.clip_path(v, c) for c in v.clips] for v in cast.values()})
    return replace(request, context=_context_before(lines, script, project, cast, codes))


CONTEXT_LINES = 6
"""Earlier takes handed to the engine when only some lines are rendered (it keeps those that fit)."""


def _context_before(lines: Sequence[Line], script: Script, project: Project, cast: dict[str, Voice],
                    codes: dict[str, list[np.ndarray]]) -> tuple[api.ContextTurn, ...]:
    """The kept takes of the lines just before the first line rendered, oldest first, so that re-rendering
    one line conditions it on what precedes it, as a full render in line mode does."""
    first = min(ln.index for ln in lines)
    earlier = [ln for ln in script.lines if ln.index < first and ln.speaker in cast and project.current(ln.line_id)]
    if not earlier:
        return ()
    # speaker indices exactly as the compiler numbers voices for the whole script
    try:
        specs = compile_request(script, cast, codes, "context", line_ids=[ln.line_id for ln in earlier]).lines
    except UserError:  # e.g. only tag lines before: nothing worth conditioning on
        return ()
    turns = []
    for ln, spec in zip(earlier, specs, strict=True):
        take = project.current(ln.line_id)
        turns.append(api.ContextTurn(spec.speaker, take.text, take.codes))
    return tuple(turns[-CONTEXT_LINES:])


class RenderFlow(QObject):
    failed = Signal(str)
    encoding = Signal(bool)
    """True while reference clips are being encoded."""

    def __init__(self, host: EngineHost, library: VoiceLibrary, session: RenderSession,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.host, self.library, self.session = host, library, session
        self.codec_fingerprint = ""
        self._encode_job: str | None = None
        self._encoded: dict[str, np.ndarray] = {}
        self._clip_paths: dict[str, Path] = {}
        self._voices: list[Voice] = []
        self._lines: list[Line] = []
        host.clip_encoded.connect(self._on_clip)
        host.job_finished.connect(self._on_finished)
        host.job_failed.connect(self._on_failed)
        self._voice_keys: dict[str, tuple[int, str]] = {}
        session.builder = self._build
        session.voice_key = self._voice_key

    @property
    def busy(self) -> bool:
        return self._encode_job is not None or self.session.busy

    def _build(self, job_id: str, lines: Sequence[Line]) -> api.SynthesisRequest:
        assert self.session.script is not None
        return build_request(job_id, lines, self.session.script, self.session.project, self.library,
                             self.codec_fingerprint)

    def _voice_key(self, voice_id: str) -> str:
        """The voice id and its clips' checksums, so that adding, removing or changing a clip makes the
        voice's lines stale. Cached per voice.json mtime: staleness is asked for every line on each edit."""
        try:
            mtime = (self.library.folder(voice_id) / VOICE_FILE).stat().st_mtime_ns
            cached = self._voice_keys.get(voice_id)
            if cached is not None and cached[0] == mtime:
                return cached[1]
            voice = self.library.get(voice_id)
        except (UserError, OSError):
            return voice_id
        key = voice_id + ":" + ",".join(c.sha256[:12] for c in voice.clips)
        self._voice_keys[voice_id] = (mtime, key)
        return key

    def render(self, lines: Sequence[Line]) -> None:
        """Encode what is missing, then render `lines`. UserError for problems the user can fix."""
        if self.busy or not lines:
            return
        unvoiced = [s for s in dict.fromkeys(ln.speaker for ln in lines) if not self.session.project.cast.get(s)]
        if unvoiced:
            raise UserError(f"No voice for {', '.join(unvoiced)}: pick one in the cast bar above the script.")
        self._lines = list(lines)
        self._voices, missing = [], []
        for vid in dict.fromkeys(self.session.project.cast.get(ln.speaker, "") for ln in lines):
            if not vid:
                continue
            try:
                voice = self.library.get(vid)
            except UserError:
                raise UserError("A voice in the cast no longer exists; pick another in the cast bar.") from None
            self._voices.append(voice)
            # only clips without cached codes go to the engine (a clip added to a voice: just that one)
            missing += [(voice, c) for c in self.library.uncached_clips(voice, self.codec_fingerprint)]
        if not missing:
            self.session.render(self._lines)
            return
        self._clip_paths = {f"{v.id}/{c.id}": self.library.clip_path(v, c) for v, c in missing}
        self._encoded = {}
        self._encode_job = self.host.new_job_id("encode")
        self.host.encode(api.EncodeRequest(self._encode_job, tuple(api.ClipToEncode(cid, path)
                                                                     for cid, path in self._clip_paths.items())))
        self.encoding.emit(True)

    def cancel(self) -> None:
        if self._encode_job is not None:
            self.host.cancel(self._encode_job)
        self.session.cancel()

    def _on_clip(self, event: api.ClipEncoded) -> None:
        if event.job_id == self._encode_job:
            self._encoded[str(self._clip_paths[event.clip_id])] = event.codes

    def _on_finished(self, event: api.JobFinished) -> None:
        if event.job_id != self._encode_job:
            return
        self._encode_job = None
        self.encoding.emit(False)
        if event.cancelled:
            return
        try:
            for voice in self._voices:
                self.library.codes(voice, lambda p: self._encoded[str(p)], self.codec_fingerprint)
            self.session.render(self._lines)
        except (UserError, KeyError) as exc:
            self.failed.emit(str(exc) if isinstance(exc, UserError) else "The engine did not encode every clip.")

    def _on_failed(self, event: api.JobFailed) -> None:
        if event.job_id == self._encode_job:
            self._encode_job = None
            self.encoding.emit(False)
            self.failed.emit(event.error)
