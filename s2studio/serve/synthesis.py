"""What a speech request becomes on the engine thread, and its audio on the way out.

A route checks everything it can on the event loop (text, limits, voices, reference clips) and describes the
job as a `Speech`; `speech_work` makes it the render job every caller submits (`engine.render.Render`: on the
engine thread it encodes what the codes cache and the voice library do not hold yet, then generates). `AudioOut` turns the
job's events into the bytes of the response, with the studio's silence between lines in line mode (upstream
batching joins its batches without a gap, as upstream's server does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from s2studio.audio.stream_encode import StreamEncoder
from s2studio.engine.api import (
    SAMPLE_RATE, AudioChunk, Batching, Event, LineSpec, LineStarted, SynthesisRequest,
)
from s2studio.engine.render import Render, render_for_script
from s2studio.serve.references import CodesCache, InlineReference
from s2studio.serve.runner import Work
from s2studio.settings import Sampling
from s2studio.state.script import Script
from s2studio.state.voices import Voice, VoiceLibrary
from s2studio.units import LINE_GAP_S


@dataclass(frozen=True)
class Speech:
    lines: tuple[LineSpec, ...]
    sampling: Sampling
    """With its batching (`sampling.batching`)."""
    chunk_length: int = 200
    inline: tuple[InlineReference, ...] = ()
    voices: tuple[Voice, ...] = ()
    """Library voices, voice i speaking as speaker i (its clips all get index i)."""
    script: Script | None = None
    cast: Mapping[str, Voice] = field(default_factory=dict)
    """With `script`: the speakers' voices; the script is compiled as the studio compiles it."""


def speech_work(speech: Speech, library: VoiceLibrary, cache: CodesCache, fingerprint: str) -> Work:
    """The request's render (`engine.render.Render`): a script compiled as the studio compiles it, or lines whose
    speaker i is voice i (with its LoRA), after the inline references (encoded once, `CodesCache`)."""
    if speech.script is not None:
        return render_for_script(speech.script, speech.cast, library, fingerprint, "", speech.sampling).work
    loras = library.lora_paths(speech.voices)
    lines = tuple(replace(ln, lora=loras.get(speech.voices[ln.speaker].id))
                  if 0 <= ln.speaker < len(speech.voices) else ln for ln in speech.lines)
    inline = list(speech.inline)
    request = SynthesisRequest("", lines, (), speech.sampling, speech.chunk_length)
    return Render(request, speech.voices, library, fingerprint,
                  lambda engine, cancel: cache.references(engine, inline, fingerprint, cancel)).work


class AudioOut:
    """A job's audio events -> response bytes in one format, with gaps between lines in line mode."""

    def __init__(self, encoder: StreamEncoder, batching: Batching) -> None:
        self.encoder = encoder
        self._gap = np.zeros(int(LINE_GAP_S * SAMPLE_RATE) if batching == "line" else 0, np.float32)
        self._lines = 0

    def feed(self, event: Event) -> bytes:
        if isinstance(event, LineStarted):
            self._lines += 1
            if self._lines > 1 and len(self._gap):
                return self.encoder.push(self._gap)
        elif isinstance(event, AudioChunk):
            return self.encoder.push(event.samples)
        return b""

    def finish(self) -> bytes:
        return self.encoder.finish()
