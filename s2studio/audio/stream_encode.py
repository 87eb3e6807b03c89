"""Audio as it is generated, encoded piece by piece into bytes for an HTTP response (issue 13).

`StreamEncoder.push(samples)` returns the bytes that can be sent now, `finish()` the rest. Formats:

- `pcm`: 16-bit little-endian mono samples, nothing else;
- `wav`: a 44-byte header, then the same samples. A streamed header cannot know the length: it says
  0xFFFFFFFF, "to the end of the stream", which libsndfile, ffmpeg and browsers read to the end (fish-speech's
  server writes 0 there, which libsndfile and Python's `wave` read as an empty file); `streaming=False` keeps
  everything until `finish` and writes the exact length;
- `mp3`, `flac`, `ogg`: libsndfile's own encoders writing into memory. What they write is sent as they write
  it; the header fields they rewrite when the file closes (MP3's Xing frame, FLAC's sample count) stay as first
  written, which is how any streamed file of these formats looks. A streamed MP3 is constant bit rate, so that
  readers that size a file without its Xing frame (libsndfile among them) find its length;
- `opus`: made at `finish` (its 48 kHz resampling works on the whole signal, and Ogg pages come late anyway).

Samples become PCM16 exactly as `soundfile.write` makes them (`audio.io.pcm16`), so a streamed WAV holds the
same samples as the file `s2studio synth --out x.wav` writes.
"""

from __future__ import annotations

import struct
from typing import Literal

import numpy as np
import soundfile as sf

from s2studio.audio import SAMPLE_RATE
from s2studio.audio.export import FORMATS, encode_audio
from s2studio.audio.io import pcm16

StreamFormat = Literal["pcm", "wav", "mp3", "flac", "ogg", "opus"]

CONTENT_TYPES: dict[str, str] = {
    "pcm": "audio/pcm", "wav": "audio/wav", "mp3": "audio/mpeg", "flac": "audio/flac", "ogg": "audio/ogg",
    "opus": "audio/ogg",
}


def wav_header(data_bytes: int | None, sample_rate: int = SAMPLE_RATE) -> bytes:
    """The canonical 44-byte PCM16 mono header; `data_bytes=None` marks a stream of unknown length."""
    data, riff = (0xFFFFFFFF, 0xFFFFFFFF) if data_bytes is None else (data_bytes, 36 + data_bytes)
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVE" + b"fmt "
            + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16) + b"data" + struct.pack("<I", data))


class _Sink:
    """A seekable in-memory file for libsndfile that hands out the bytes written past what was sent."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.position = 0
        self.sent = 0

    def write(self, data: bytes) -> int:
        data = bytes(data)
        self.buffer[self.position:self.position + len(data)] = data
        self.position += len(data)
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.position, 2: len(self.buffer)}[whence]
        self.position = base + offset
        return self.position

    def tell(self) -> int:
        return self.position

    def read(self, size: int = -1) -> bytes:
        end = len(self.buffer) if size < 0 else self.position + size
        data = bytes(self.buffer[self.position:end])
        self.position += len(data)
        return data

    def take(self) -> bytes:
        data = bytes(self.buffer[self.sent:])
        self.sent = len(self.buffer)
        return data


class StreamEncoder:
    def __init__(self, fmt: StreamFormat, streaming: bool = True, sample_rate: int = SAMPLE_RATE) -> None:
        if fmt not in CONTENT_TYPES:
            raise ValueError(f"unknown format {fmt!r}")
        self.fmt, self.streaming, self.rate = fmt, streaming, sample_rate
        self.samples = 0
        self._kept: list[np.ndarray] = []
        self._started = False
        self._file: sf.SoundFile | None = None
        self._sink: _Sink | None = None
        if streaming and fmt in ("mp3", "flac", "ogg"):
            sf_format, subtype, _ = FORMATS[fmt]
            self._sink = _Sink()
            # a streamed MP3 keeps its first (placeholder) frame, so readers estimate its length from the size:
            # exact only at a constant bit rate (about 160 kbit/s at this level)
            extra = {"compression_level": 0.5, "bitrate_mode": "CONSTANT"} if fmt == "mp3" else {}
            self._file = sf.SoundFile(self._sink, "w", samplerate=sample_rate, channels=1, format=sf_format,
                                      subtype=subtype, **extra)

    @property
    def content_type(self) -> str:
        return CONTENT_TYPES[self.fmt]

    def push(self, samples: np.ndarray) -> bytes:
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        self.samples += len(samples)
        if not self.streaming or self.fmt == "opus":
            self._kept.append(samples)
            return b""
        if self._file is not None and self._sink is not None:
            self._file.write(np.clip(samples, -1.0, 1.0))
            return self._sink.take()
        head = b""
        if self.fmt == "wav" and not self._started:
            head = wav_header(None, self.rate)
        self._started = True
        return head + pcm16(samples).astype("<i2").tobytes()

    def finish(self) -> bytes:
        if self._file is not None and self._sink is not None:
            self._file.close()
            return self._sink.take()
        if self.streaming and self.fmt in ("pcm", "wav"):
            return b"" if self._started or self.fmt == "pcm" else wav_header(None, self.rate)
        audio = np.concatenate(self._kept) if self._kept else np.zeros(0, np.float32)
        self._kept = []
        if self.fmt == "pcm":
            return pcm16(audio).astype("<i2").tobytes()
        if self.fmt == "wav":
            data = pcm16(audio).astype("<i2").tobytes()
            return wav_header(len(data), self.rate) + data
        return encode_audio(audio, self.fmt, sample_rate=self.rate)  # type: ignore[arg-type]
