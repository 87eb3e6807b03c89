"""One render, as the scheduler runs it: voice codes → compile → generate (design.md §6).

The studio's render and its voice preview, `synth` and the server all describe what to speak as a `Render` and
submit its `work` to the scheduler (engine/scheduler.py). What needs no codes is compiled where the render is
asked for (`plan.compile_lines`), so a mistake (a speaker without a voice, only tags) is said at once and the
pieces that run side by side (`Render.pieces`: scenes, takes) are known before anything runs. What needs the
codec runs in the job, on the engine thread: each voice's clips' codes come from the voice library's cache or
are encoded by the engine (then cached), the references go into the request, and it generates as a stream of
the batch. Torch-free.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from s2studio.engine.api import LineSpec, Reference, Step, SynthesisRequest
from s2studio.engine.plan import (
    Piece, compile_lines, engine_encoder, piece_request, plan_pieces, voice_references,
)
from s2studio.engine.scheduler import synthesis
from s2studio.errors import UserError
from s2studio.settings import Sampling
from s2studio.state.script import Script
from s2studio.state.voices import Voice, VoiceLibrary

InlineReferences = Callable[[Any, threading.Event], Sequence[Reference]]
"""(engine, cancel) -> references made on the engine thread, before the voices' (the server's inline clips)."""


@dataclass(frozen=True)
class Render:
    """What to speak and with which voices; `work` is its job on the scheduler."""

    request: SynthesisRequest
    """Compiled without the voices' references (the job puts them in); its job id is the job's."""
    voices: tuple[Voice, ...]
    """Voice i speaks as speaker i: its clips become the references of index i, after the inline ones."""
    library: VoiceLibrary | None = field(compare=False)
    """Where the voices' clips and cached codes are (None: no voices, only inline references)."""
    fingerprint: str
    """The loaded codec's: codes cached under another codec are encoded again."""
    inline: InlineReferences | None = field(default=None, compare=False)

    @property
    def job_id(self) -> str:
        return self.request.job_id

    def pieces(self, takes: int = 1, batches: bool = True) -> tuple[Render, ...]:
        """The jobs a batching engine runs side by side (`plan.plan_pieces`: its scenes, and `takes` of its
        lines); one take whole when the engine does not batch (`batches` off)."""
        request = self.request
        pieces = plan_pieces(request.job_id, [ln.line_id for ln in request.lines], request.scene_starts,
                             request.sampling.batching, takes, batches)
        return tuple(self.piece(piece, request.lines[piece.start:piece.end]) for piece in pieces)

    def piece(self, piece: Piece, lines: tuple[LineSpec, ...]) -> Render:
        """`piece` of this render, with its lines (compiled now, or sliced from the request's)."""
        return replace(self, request=piece_request(self.request, piece, lines))

    def work(self, engine: Any, job_id: str, cancel: threading.Event) -> Iterator[Step]:
        """The scheduler's `Work`: the references (encoding what no cache holds), then the stream."""
        inline = tuple(self.inline(engine, cancel)) if self.inline is not None else ()
        voices: tuple[Reference, ...] = ()
        if self.voices:
            if self.library is None:
                raise ValueError("a render with voices needs their library")
            paths = {v.id: [self.library.clip_path(v, c) for c in v.clips] for v in self.voices}
            ids = {path: f"{v.id}/{c.id}" for v in self.voices for c, path in zip(v.clips, paths[v.id], strict=True)}
            codes = voice_codes(self.library, self.voices, engine_encoder(engine, cancel, ids), self.fingerprint)
            voices = voice_references(self.voices, codes, paths)
        references = (*self.request.references, *inline, *voices)
        yield from synthesis(engine, replace(self.request, job_id=job_id, references=references), cancel)


def voice_codes(library: VoiceLibrary, voices: Sequence[Voice], encoder: Callable[[Path], np.ndarray],
                fingerprint: str) -> dict[str, list[np.ndarray]]:
    """Voice id -> each clip's codes (`VoiceLibrary.codes`); a clip that cannot be read is one clear line."""
    out: dict[str, list[np.ndarray]] = {}
    for voice in voices:
        if voice.id in out:
            continue
        try:
            out[voice.id] = library.codes(voice, encoder, fingerprint)
        except OSError as exc:
            raise UserError(f"voice {voice.name!r}: cannot read its clips ({exc.strerror or exc}); "
                            "re-add the voice") from None
    return out


def render_for_script(script: Script, cast: Mapping[str, Voice], library: VoiceLibrary, fingerprint: str,
                  job_id: str, sampling: Sampling | None = None,
                  chunk_length: int = 200, line_ids: Sequence[str] | None = None,
                  lora_paths: Mapping[str, Path] | None = None) -> Render:
    """The render of `script` (or of `line_ids` of it) as the studio compiles it (`plan.compile_lines`); each voice
    speaks with its LoRA (`lora_paths`: voice id -> LoRA, default the library's). UserError for what a person
    fixes in the script or the cast."""
    if lora_paths is None:
        lora_paths = library.lora_paths(cast.values())
    request, voices = compile_lines(script, cast, job_id, sampling, chunk_length, line_ids, lora_paths)
    return Render(request, voices, library, fingerprint)
