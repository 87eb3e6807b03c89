"""What a speech request becomes on the engine thread, and its audio on the way out.

A route checks everything it can on the event loop (text, limits, voices, reference clips) and describes the
job as a `Speech`; `speech_work` turns that into engine calls on the engine thread: encode what the codes
cache and the voice library do not hold yet, compile the `SynthesisRequest`, generate. `AudioOut` turns the
job's events into the bytes of the response, with the studio's silence between lines in line mode (upstream
batching joins its batches without a gap, as upstream's server does).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from s2studio.audio.stream_encode import StreamEncoder
from s2studio.engine.api import (
    SAMPLE_RATE, AudioChunk, Batching, Engine, Event, LineSpec, LineStarted, Reference, SamplingParams, Step,
    SynthesisRequest,
)
from s2studio.engine.plan import compile_request, engine_encoder
from s2studio.engine.scheduler import synthesis
from s2studio.serve.references import CodesCache, InlineReference
from s2studio.serve.runner import Work
from s2studio.state.script import Script
from s2studio.state.voices import Voice, VoiceLibrary
from s2studio.units import LINE_GAP_S


@dataclass(frozen=True)
class Speech:
    lines: tuple[LineSpec, ...]
    sampling: SamplingParams
    batching: Batching = "line"
    chunk_length: int = 200
    inline: tuple[InlineReference, ...] = ()
    voices: tuple[Voice, ...] = ()
    """Library voices, voice i speaking as speaker i (its clips all get index i)."""
    script: Script | None = None
    cast: Mapping[str, Voice] = field(default_factory=dict)
    """With `script`: the speakers' voices; the script is compiled as the studio compiles it."""


def speech_work(speech: Speech, library: VoiceLibrary, cache: CodesCache, fingerprint: str) -> Work:
    def work(engine: Engine, job_id: str, cancel: threading.Event) -> Iterator[Step]:
        encoder = engine_encoder(engine, cancel)
        if speech.script is not None:
            codes = {v.id: library.codes(v, encoder, fingerprint) for v in speech.cast.values()}
            request = compile_request(speech.script, speech.cast, codes, job_id, speech.sampling, "line",
                                      lora_paths=library.lora_paths(speech.cast.values()))
        else:
            refs = list(cache.references(engine, list(speech.inline), fingerprint, cancel))
            for index, voice in enumerate(speech.voices):
                for clip, c in zip(voice.clips, library.codes(voice, encoder, fingerprint), strict=True):
                    refs.append(Reference(index, clip.transcript, c))
            loras = library.lora_paths(speech.voices)  # voice i speaks as speaker i, with its LoRA if it has one
            lines = tuple(replace(ln, lora=loras.get(speech.voices[ln.speaker].id))
                          if 0 <= ln.speaker < len(speech.voices) else ln for ln in speech.lines)
            request = SynthesisRequest(job_id, lines, tuple(refs), speech.sampling, speech.batching,
                                       speech.chunk_length)
        yield from synthesis(engine, request, cancel)

    return work


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
