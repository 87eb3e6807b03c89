"""Export rendered lines: one mixed file, per-line stems, SRT and WebVTT (design.md §8, issue 4).

Lines are laid out by the same `Timeline` the player uses, so exported files and cue times match
what was heard. Normalisation computes one gain on the mix and applies it to every stem too, so the
stems still sum to the mix. Stems are full-length (silence outside their line): drop them into
any editor at 0:00 and they line up.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import soundfile as sf

from s2studio.audio.dsp import Audio, integrated_loudness, peak, resample
from s2studio.audio.timeline import Timeline
from s2studio.audio import SAMPLE_RATE
from s2studio.errors import UserError
from s2studio.state.atomic import OutputSet, write_bytes_atomic, write_error

Format = Literal["wav", "flac", "ogg", "opus", "mp3"]
Normalize = Literal["none", "peak", "loudness"]

FORMATS: dict[str, tuple[str, str, str]] = {
    # name: (soundfile format, subtype, file suffix)
    "wav": ("WAV", "PCM_16", ".wav"),
    "flac": ("FLAC", "PCM_24", ".flac"),
    "ogg": ("OGG", "VORBIS", ".ogg"),
    "opus": ("OGG", "OPUS", ".opus"),
    "mp3": ("MP3", "MPEG_LAYER_III", ".mp3"),
}
OPUS_RATE = 48000
"""Opus only runs at 8/12/16/24/48 kHz; we resample 44.1 kHz to 48 kHz for it."""
MAX_GAIN_DB = 30.0


@dataclass(frozen=True)
class Metadata:
    title: str = ""
    model: str = "Fish Audio S2 Pro"
    voices: tuple[str, ...] = ()
    software: str = "S2 Studio"
    comment: str = "AI-generated speech"


@dataclass(frozen=True)
class ExportSettings:
    format: Format = "wav"
    gap_s: float = 0.4
    normalize: Normalize = "none"
    peak_dbfs: float = -1.0
    """Target peak for "peak", and the ceiling after a "loudness" gain."""
    loudness_lufs: float = -16.0
    metadata: Metadata = field(default_factory=Metadata)


@dataclass(frozen=True)
class RenderedLine:
    line_id: str
    speaker: str
    text: str
    audio: Audio


@dataclass(frozen=True)
class Cue:
    index: int
    """1-based, as SRT numbers them."""
    line_id: str
    speaker: str
    text: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class ExportResult:
    mix: Audio
    """At `SAMPLE_RATE`, after the gain."""
    cues: tuple[Cue, ...]
    gain_db: float
    files: tuple[Path, ...]


def format_for(path: Path) -> Format:
    """The export format a file name asks for."""
    suffix = path.suffix.lower()
    for name, (_, _, ext) in FORMATS.items():
        if suffix == ext:
            return name  # type: ignore[return-value]
    if suffix == ".oga":
        return "ogg"
    raise UserError(f"cannot tell the format of {path.name}; end it in .wav, .flac, .ogg, .opus or .mp3")


def layout(lines: Sequence[RenderedLine], gap_s: float) -> tuple[Audio, list[Cue], list[int]]:
    """The mix, one cue per line with spoken audio, and each line's start sample."""
    ids = [ln.line_id for ln in lines]
    if len(set(ids)) != len(ids):
        raise ValueError("line ids must be unique")
    timeline = Timeline(gap_s=gap_s, sample_rate=SAMPLE_RATE)
    timeline.set_lines(ids, {ln.line_id: ln.audio for ln in lines})
    layout = timeline.layout
    spoken = [ln for ln in lines if ln.line_id in layout.index]
    cues = [Cue(i + 1, ln.line_id, ln.speaker, ln.text, start / SAMPLE_RATE, end / SAMPLE_RATE)
            for i, (ln, (start, end)) in enumerate((ln, layout.bounds(ln.line_id)) for ln in spoken)]
    starts = []
    for ln in lines:  # a line without audio starts where the next line does (it takes no room)
        bounds = layout.bounds(ln.line_id)
        starts.append(bounds[0] if bounds else None)
    following = layout.end
    for i in range(len(starts) - 1, -1, -1):
        following = starts[i] = starts[i] if starts[i] is not None else following
    return layout.mix(), cues, starts


def normalization_gain(mix: Audio, settings: ExportSettings) -> float:
    """Gain in dB that the settings ask for (0 for silence or "none")."""
    p = peak(mix)
    if settings.normalize == "none" or p == 0.0:
        return 0.0
    peak_db = 20 * np.log10(p)
    if settings.normalize == "peak":
        gain = settings.peak_dbfs - peak_db
    else:
        loudness = integrated_loudness(mix, SAMPLE_RATE)
        if not np.isfinite(loudness):
            return 0.0
        gain = min(settings.loudness_lufs - loudness, settings.peak_dbfs - peak_db)
    return float(min(gain, MAX_GAIN_DB))


def encode_audio(audio: Audio, fmt: Format, metadata: Metadata | None = None,
                 sample_rate: int = SAMPLE_RATE) -> bytes:
    """Mono `audio` at `sample_rate` as the bytes of a `fmt` file (resampled for Opus), with metadata.
    Encoded in memory: the disk is written by the one writer, which reports a full disk as such."""
    sf_format, subtype, _ = FORMATS[fmt]
    data = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)
    rate = sample_rate
    if fmt == "opus" and rate != OPUS_RATE:
        data, rate = np.clip(resample(data, rate, OPUS_RATE), -1.0, 1.0), OPUS_RATE
    buf = io.BytesIO()
    with sf.SoundFile(buf, "w", samplerate=rate, channels=1, format=sf_format, subtype=subtype) as f:
        if metadata is not None:
            _tag(f, metadata)
        f.write(data)
    return buf.getvalue()


def write_audio(path: Path, audio: Audio, fmt: Format, metadata: Metadata | None = None,
                sample_rate: int = SAMPLE_RATE) -> Path:
    """`encode_audio` to the file `path`, atomically."""
    return write_bytes_atomic(Path(path), encode_audio(audio, fmt, metadata, sample_rate))


def _tag(f: sf.SoundFile, meta: Metadata) -> None:
    """Set what the container can carry; libsndfile refuses some fields on some formats."""
    fields = {
        "title": meta.title,
        "artist": ", ".join(meta.voices),
        "software": f"{meta.software} ({meta.model})" if meta.model else meta.software,
        "comment": f"{meta.comment}; model: {meta.model}" if meta.model else meta.comment,
    }
    for name, value in fields.items():
        if value:
            try:
                setattr(f, name, value)
            except (RuntimeError, sf.LibsndfileError):
                pass


def _srt_time(seconds: float) -> str:
    ms = round(seconds * 1000)
    return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d},{ms % 1000:03d}"


def srt_text(cues: Sequence[Cue], with_speakers: bool = True) -> str:
    blocks = []
    for c in cues:
        text = f"{c.speaker}: {c.text}" if with_speakers else c.text
        blocks.append(f"{c.index}\n{_srt_time(c.start_s)} --> {_srt_time(c.end_s)}\n{text}\n")
    return "\n".join(blocks)


def vtt_text(cues: Sequence[Cue], with_speakers: bool = True) -> str:
    def esc(s: str) -> str:
        return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    out = ["WEBVTT\n"]
    for c in cues:
        text = f"<v {esc(c.speaker)}>{esc(c.text)}" if with_speakers else esc(c.text)
        out.append(f"{c.line_id}\n{_srt_time(c.start_s).replace(',', '.')} --> "
                   f"{_srt_time(c.end_s).replace(',', '.')}\n{text}\n")
    return "\n".join(out)


def stem_name(index: int, line: RenderedLine, fmt: Format) -> str:
    speaker = "".join(ch if ch.isalnum() else "_" for ch in line.speaker)[:32] or "line"
    return f"{index + 1:04d}_{speaker}{FORMATS[fmt][2]}"


def _make_folders(paths: Sequence[Path]) -> list[Path]:
    """Create the missing folders of `paths` (outermost first); returns those created."""
    made: list[Path] = []
    for folder in dict.fromkeys(paths):
        missing = [p for p in (folder, *folder.parents) if not p.exists()][::-1]
        for p in missing:
            try:
                p.mkdir()
            except FileExistsError:
                continue
            except OSError as exc:
                for q in reversed(made):
                    _remove_if_empty(q)
                raise write_error(exc, p) from None
            made.append(p)
    return made


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


def export(lines: Sequence[RenderedLine], settings: ExportSettings, out: Path | None = None,
           stems_dir: Path | None = None, srt: Path | None = None, vtt: Path | None = None,
           into: OutputSet | None = None) -> ExportResult:
    """Lay out `lines`, normalise, and write whichever outputs are asked for, all or none of them: every
    file is staged first and renamed only when all are (see `state/atomic.py`). With `into` the files
    are staged there and the caller commits them, together with its own (a render's events log)."""
    if not lines:
        raise UserError("nothing to export: no line has been rendered yet")
    mix, cues, starts = layout(lines, settings.gap_s)
    gain_db = normalization_gain(mix, settings)
    gain = np.float32(10 ** (gain_db / 20))
    mix = mix * gain
    files = into if into is not None else OutputSet()
    folders = [p.parent for p in (out, srt, vtt) if p is not None] + ([stems_dir] if stems_dir is not None else [])
    made = _make_folders(folders)
    written: list[Path] = []
    try:
        if out is not None:
            written.append(files.add(out, encode_audio(mix, settings.format, settings.metadata)))
        if stems_dir is not None:
            for i, (line, start) in enumerate(zip(lines, starts, strict=True)):
                stem = np.zeros(len(mix), np.float32)
                stem[start:start + len(line.audio)] = np.asarray(line.audio, np.float32) * gain
                written.append(files.add(stems_dir / stem_name(i, line, settings.format),
                                         encode_audio(stem, settings.format, settings.metadata)))
        if srt is not None:
            written.append(files.add_text(srt, srt_text(cues)))
        if vtt is not None:
            written.append(files.add_text(vtt, vtt_text(cues)))
        if into is None:
            files.commit()
    except BaseException:
        files.discard()
        for folder in reversed(made):
            _remove_if_empty(folder)
        raise
    return ExportResult(mix, tuple(cues), gain_db, tuple(written))
