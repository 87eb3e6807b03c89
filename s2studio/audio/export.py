"""Export rendered lines: one mixed file, one track per speaker, one clip per line, one file per chapter, SRT,
WebVTT and a CUE sheet (design.md §8).

Lines are laid out by the same `Timeline` the player uses, so exported files and cue times match what was
heard. Normalisation computes one gain on the mix and applies it to every other file too, so the speaker
stems still sum to the mix and a line's clip is the mix's audio of that line.

What people bring into other programs:

- speaker stems (`stems_dir`): one full-length track per speaker, silent where others speak; drop them
  into a DAW at 0:00 and they line up (as many files as speakers, not as lines). They may have a format
  of their own: FLAC keeps the long silences of twenty stems small where WAV spends the same bytes on them;
- line clips (`clips_dir`): each line's take alone, trimmed to the take, named
  `NNN_speaker_first-words.wav` (for an editor, a game engine, a dubbing tool);
- chapters: the script's headings as markers in the mix (`audio/chapters.py`), a CUE sheet (`cue`), and
  optionally one file per chapter (`chapters_dir`).

A book is long (5–12 hours): the audio is streamed to disk in blocks (`audio/export_writer.py`), in
memory that does not grow with its length; normalisation measures the mix in a first pass; free disk
space is checked before anything is written (`audio/disk_space.py`); a WAV too large for WAV's 32-bit
sizes is written as RF64.
"""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Literal

import numpy as np
import soundfile as sf

from s2studio.audio import SAMPLE_RATE
from s2studio.audio.chapters import Part, cue_sheet, parts
from s2studio.audio.disk_space import check_free_space
from s2studio.audio.dsp import Audio, resample
from s2studio.audio.export_files import (
    Format, RenderedLine, chapter_file_names, chapter_marks, clip_names, estimated_bytes, output_paths, speakers_in_order,
    Sound, sound_of, spoken, stem_names, stems_bytes, stems_format_for,
)
from s2studio.audio.export_writer import (
    DEFAULT_KBPS, FORMATS, OPUS_RATE, AudioSink, compression_level, encoder_options, measure, speaker_layout, tag,
    write_timeline, write_track,
)
from s2studio.audio.subtitles import Cue, srt_text, vtt_text
from s2studio.audio.timeline import Layout, Timeline
from s2studio.errors import UserError, printable
from s2studio.state.atomic import OutputSet, write_bytes_atomic
from s2studio.state.disk import write_error
from s2studio.units import LINE_GAP_S
from s2studio.state.tags import without_tags

log = logging.getLogger(__name__)

__all__ = ["BITRATES_KBPS", "DEFAULT_KBPS", "FORMATS", "OPUS_RATE", "Cue", "ExportResult", "ExportSettings", "Format",
           "Metadata", "RenderedLine", "Sound", "compression_level", "encode_audio", "export", "format_for",
           "output_paths", "sound_of", "srt_text", "stems_bytes", "stems_format_for", "vtt_text", "write_audio"]

Normalize = Literal["none", "peak", "loudness"]
Progress = Callable[[float, str], None]

MAX_GAIN_DB = 30.0
BITRATES_KBPS: dict[str, tuple[int, ...]] = {"mp3": (64, 96, 128, 160, 192, 256, 320), "opus": (32, 48, 64, 96, 128, 192)}
"""The bitrates offered for the lossy formats with a bitrate (Vorbis is quality-based and keeps libsndfile's)."""


@dataclass(frozen=True)
class Metadata:
    title: str = ""
    model: str = "Fish Audio S2 Pro"
    voices: tuple[str, ...] = ()
    software: str = "S2 Studio"
    comment: str = "AI-generated speech"

    def fields(self) -> dict[str, str]:
        return {"title": self.title, "artist": ", ".join(self.voices),
                "software": f"{self.software} ({self.model})" if self.model else self.software,
                "comment": f"{self.comment}; model: {self.model}" if self.model else self.comment}


@dataclass(frozen=True)
class ExportSettings:
    format: Format = "wav"
    gap_s: float = LINE_GAP_S
    normalize: Normalize = "none"
    peak_dbfs: float = -1.0
    """Target peak for "peak", and the ceiling after a "loudness" gain."""
    loudness_lufs: float = -16.0
    metadata: Metadata = field(default_factory=Metadata)
    bitrate_kbps: int | None = None
    """MP3 (constant) and Opus (average) bitrate; None: `DEFAULT_KBPS`. Ignored by the other formats."""
    subtitle_tags: bool = False
    """Keep delivery tags ("[whispering]") in the subtitles' text."""
    stems_format: Format | None = None
    """The speaker stems' format; None: `format`."""
    chapter_markers: bool = True
    """The headings as markers inside the mix (cue points, ID3 chapters, chapter comments)."""

    def __post_init__(self) -> None:
        offered = BITRATES_KBPS.get(self.format)
        if self.bitrate_kbps is not None and offered is not None and self.bitrate_kbps not in offered:
            raise UserError(f"{self.format} bitrate {self.bitrate_kbps} kbps is not offered; choose one of "
                            f"{', '.join(map(str, offered))}")

    @property
    def stems(self) -> Format:
        return self.stems_format or self.format


@dataclass(frozen=True)
class ExportResult:
    samples: int
    """The mix's length at `SAMPLE_RATE`."""
    cues: tuple[Cue, ...]
    gain_db: float
    files: tuple[Path, ...]
    parts: tuple[Part, ...]
    """The chapters (and the opening before the first heading), in samples of the mix."""


@dataclass(frozen=True)
class Plan:
    """Where everything lands: the timeline's layout, a cue per spoken line and the chapters."""

    layout: Layout
    cues: tuple[Cue, ...]
    parts: tuple[Part, ...]
    speakers: tuple[str, ...]


def format_for(path: Path) -> Format:
    """The export format a file name asks for."""
    suffix = path.suffix.lower()
    for name, (_, _, ext) in FORMATS.items():
        if suffix == ext:
            return name  # type: ignore[return-value]
    if suffix == ".oga":
        return "ogg"
    raise UserError(f"cannot tell the format of {path.name}; end it in .wav, .flac, .ogg, .opus or .mp3")


def plan(lines: Sequence[RenderedLine], settings: ExportSettings) -> Plan:
    ids = [ln.line_id for ln in lines]
    if len(set(ids)) != len(ids):
        raise ValueError("line ids must be unique")
    timeline = Timeline(gap_s=settings.gap_s, sample_rate=SAMPLE_RATE)
    timeline.set_lines(ids, {ln.line_id: ln.audio for ln in lines})
    layout = timeline.layout
    heard = [ln for ln in lines if ln.line_id in layout.index]
    bounds = [layout.bounds(ln.line_id) for ln in heard]
    cues = tuple(Cue(i + 1, ln.line_id, ln.speaker, ln.text, start / SAMPLE_RATE, end / SAMPLE_RATE)
                 for i, (ln, (start, end)) in enumerate(zip(heard, bounds, strict=True)))
    chapters = parts(chapter_marks(lines), [b[0] for b in bounds], [b[1] for b in bounds],
                     settings.metadata.title or "Opening")
    return Plan(layout, cues, tuple(chapters), tuple(speakers_in_order(lines)))


def normalization_gain(peak: float, loudness: float, settings: ExportSettings) -> float:
    """Gain in dB that the settings ask for, given the mix's peak and integrated loudness (0 for silence)."""
    if settings.normalize == "none" or peak == 0.0:
        return 0.0
    peak_db = 20 * np.log10(peak)
    if settings.normalize == "peak":
        gain = settings.peak_dbfs - peak_db
    else:
        if not np.isfinite(loudness):
            return 0.0
        gain = min(settings.loudness_lufs - loudness, settings.peak_dbfs - peak_db)
    return float(min(gain, MAX_GAIN_DB))


# ----------------------------------------------------------------------------- small files in memory


def encode_audio(audio: Audio, fmt: Format, metadata: Metadata | None = None,
                 sample_rate: int = SAMPLE_RATE, bitrate_kbps: int | None = None) -> bytes:
    """Mono `audio` at `sample_rate` as the bytes of a `fmt` file (resampled for Opus), with metadata and,
    for MP3 and Opus, the bitrate (`DEFAULT_KBPS` when None). For short audio held in memory anyway (a
    server's reply, one synthesised sentence); the export streams its files to disk instead."""
    sf_format, subtype, _ = FORMATS[fmt]
    data = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)
    rate = sample_rate
    if fmt == "opus" and rate != OPUS_RATE:
        data, rate = np.clip(resample(data, rate, OPUS_RATE), -1.0, 1.0), OPUS_RATE
    buf = io.BytesIO()
    with sf.SoundFile(buf, "w", samplerate=rate, channels=1, format=sf_format, subtype=subtype,
                      **encoder_options(fmt, bitrate_kbps)) as f:
        if metadata is not None:
            tag(f, metadata.fields())
        f.write(data)
    return buf.getvalue()


def write_audio(path: Path, audio: Audio, fmt: Format, metadata: Metadata | None = None,
                sample_rate: int = SAMPLE_RATE, bitrate_kbps: int | None = None) -> Path:
    """`encode_audio` to the file `path`, atomically."""
    return write_bytes_atomic(Path(path), encode_audio(audio, fmt, metadata, sample_rate, bitrate_kbps))


def _needs(p: Plan, lines: Sequence[RenderedLine], settings: ExportSettings, out: Path | None,
           stems_dir: Path | None, clips_dir: Path | None, chapters_dir: Path | None,
           texts: Sequence[Path]) -> dict[Path, int]:
    fmt, kbps, total = settings.format, settings.bitrate_kbps, p.layout.end
    sound = sum(t.length for t in p.layout.tracks)
    needs: dict[Path, int] = {}

    def add(folder: Path, size: int) -> None:
        needs[folder] = needs.get(folder, 0) + size

    if out is not None:
        add(out.parent, estimated_bytes(fmt, total, sound, kbps))
    if stems_dir is not None:
        add(stems_dir, stems_bytes(sound_of(lines), settings.stems, settings.gap_s, kbps))
    if chapters_dir is not None:
        add(chapters_dir, sum(estimated_bytes(fmt, q.end - q.start, q.end - q.start, kbps) for q in p.parts))
    if clips_dir is not None:
        add(clips_dir, sum(estimated_bytes(fmt, t.length, t.length, kbps) for t in p.layout.tracks))
    for path in texts:
        add(path.parent, 200 * len(lines) + 4096)
    return needs


# ----------------------------------------------------------------------------- writing


class _Steps:
    """Progress over the export's passes, each weighted by the audio it reads; quiet between per-mille steps."""

    def __init__(self, report: Progress | None, weights: Sequence[float]) -> None:
        self.report, self.total, self.done, self.shown = report, sum(weights) or 1.0, 0.0, -1.0
        self.weight, self.text = 0.0, ""

    def begin(self, weight: float, text: str) -> Callable[[float], None]:
        self.done += self.weight
        self.weight, self.text = weight, text
        return self.at

    def at(self, fraction: float) -> None:
        value = (self.done + self.weight * fraction) / self.total
        if self.report is not None and (value - self.shown >= 0.001 or value >= 1.0):
            self.shown = value
            self.report(min(value, 1.0), self.text)


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
           stems_dir: Path | None = None, clips_dir: Path | None = None, srt: Path | None = None,
           vtt: Path | None = None, cue: Path | None = None, chapters_dir: Path | None = None,
           into: OutputSet | None = None, progress: Progress | None = None,
           cancel: threading.Event | None = None) -> ExportResult:
    """Lay out `lines`, normalise, and write whichever outputs are asked for (`out`: the mix; `stems_dir`:
    one track per speaker; `clips_dir`: one clip per line; `chapters_dir`: one file per chapter; `srt`,
    `vtt`: subtitles; `cue`: a CUE sheet of the mix's chapters), all or none of them: every file is staged
    first and renamed only when all are (see `state/atomic.py`). With `into` the files are staged there and
    the caller commits them, together with its own (a render's events log). `progress(fraction, what)` is
    called as it goes; setting `cancel` stops it (`Cancelled`), leaving nothing."""
    if not lines:
        raise UserError("nothing to export: no line has been rendered yet")
    if cue is not None and out is None:
        raise UserError("a CUE sheet describes the mix: write the mix too")
    p = plan(lines, settings)
    texts = [t for t in (srt, vtt, cue) if t is not None]
    hint = "" if stems_dir is None or settings.stems == "flac" else ", or write the stems as FLAC"
    check_free_space(_needs(p, lines, settings, out, stems_dir, clips_dir, chapters_dir, texts), hint)
    files = into if into is not None else OutputSet()
    made = _make_folders([t.parent for t in (out, *texts) if t is not None]
                         + [d for d in (stems_dir, clips_dir, chapters_dir) if d is not None])
    try:
        written, gain_db = _write(p, lines, settings, files, out, stems_dir, clips_dir, chapters_dir, progress, cancel)
        if srt is not None:
            written.append(files.add_text(srt, srt_text(p.cues, keep_tags=settings.subtitle_tags)))
        if vtt is not None:
            written.append(files.add_text(vtt, vtt_text(p.cues, keep_tags=settings.subtitle_tags)))
        if cue is not None and out is not None:
            meta = settings.metadata
            written.append(files.add_text(cue, cue_sheet(out.name, settings.format, p.parts, SAMPLE_RATE, meta.title,
                                                         ", ".join(meta.voices))))
        if into is None:
            files.commit()
            log.info("exported %d file%s: %s", len(written), "s" * (len(written) != 1),
                     ", ".join(str(f) for f in written[:6]) + (" …" if len(written) > 6 else ""))
    except MemoryError:
        files.discard()
        _remove_all(made)
        raise UserError("Not enough memory to export; close other programs and try again. Nothing was written.") \
            from None
    except OSError as exc:  # reading a take's audio (writing is the one writer's `WriteError`)
        files.discard()
        _remove_all(made)
        where = f" ({printable(exc.filename)})" if exc.filename else ""
        raise UserError(f"Export stopped: cannot read a take's audio{where}: {printable(exc.strerror or exc)}. "
                        "Nothing was written.") from None
    except BaseException:
        files.discard()
        _remove_all(made)
        raise
    return ExportResult(p.layout.end, p.cues, gain_db, tuple(written), p.parts)


def _remove_all(made: Sequence[Path]) -> None:
    for folder in reversed(made):
        _remove_if_empty(folder)


def _write(p: Plan, lines: Sequence[RenderedLine], settings: ExportSettings, files: OutputSet, out: Path | None,
           stems_dir: Path | None, clips_dir: Path | None, chapters_dir: Path | None,
           progress: Progress | None, cancel: threading.Event | None) -> tuple[list[Path], float]:
    """The audio files, staged in `files`: their paths and the gain in dB."""
    fmt, meta, kbps, layout = settings.format, settings.metadata, settings.bitrate_kbps, p.layout
    timeline = out is not None or chapters_dir is not None or stems_dir is not None
    steps = _Steps(progress, [1.0 if settings.normalize != "none" else 0.0,
                              (1 + len(p.speakers) * (stems_dir is not None)) if timeline else 0.0,
                              1.0 if clips_dir is not None else 0.0])
    gain_db = 0.0
    if settings.normalize != "none":
        top, loudness = measure(layout, settings.normalize == "loudness",
                                steps.begin(1.0, "Measuring the loudness…"), cancel)
        gain_db = normalization_gain(top, loudness, settings)
    gain = np.float32(10 ** (gain_db / 20))
    written: list[Path] = []
    sinks: list[AudioSink] = []

    def sink(path: Path, kind: Format, tags: Metadata, frames: int) -> AudioSink:
        made = AudioSink(files, path, kind, tags.fields(), frames, kbps if kind == fmt else None)
        sinks.append(made)
        written.append(path)
        return made

    try:
        if timeline:
            mix = sink(out, fmt, meta, layout.end) if out is not None else None
            stems = []
            names = stem_names(lines, settings.stems, stems_dir) if stems_dir is not None else []
            for speaker, name in zip(p.speakers if stems_dir is not None else (), names, strict=True):
                own = [ln for ln in lines if ln.speaker == speaker]
                voices = tuple(v for v in dict.fromkeys(ln.voice for ln in own) if v) or meta.voices
                stems.append((speaker_layout(layout, {ln.line_id for ln in own}),
                              sink(stems_dir / name, settings.stems,
                                   replace(meta, voices=voices), layout.end)))
            chapters = []
            if chapters_dir is not None:
                names = chapter_file_names([q.title for q in p.parts], fmt, chapters_dir)
                chapters = [(q.start, q.end, partial(sink, chapters_dir / name, fmt, replace(meta, title=q.title),
                                                     q.end - q.start))
                            for q, name in zip(p.parts, names, strict=True)]
            write_timeline(layout, gain, mix, chapters, stems,
                           steps.begin(1 + len(stems), "Writing the audio…"), cancel)
            if mix is not None:
                marks = [q for q in p.parts if q.heading] if settings.chapter_markers else []
                ends = [q.start for q in marks[1:]] + [layout.end] if marks else []
                mix.close([(q.start / SAMPLE_RATE, e / SAMPLE_RATE, q.title) for q, e in zip(marks, ends, strict=True)])
            for _, stem in stems:
                stem.close()
        if clips_dir is not None:
            at = steps.begin(1.0, "Writing the line clips…")
            for k, (line, name) in enumerate(zip(lines, clip_names(lines, fmt, clips_dir), strict=True)):
                tags = replace(meta, title=without_tags(line.text)[:200] or meta.title,
                               voices=(line.voice,) if line.voice else meta.voices)
                clip = sink(clips_dir / name, fmt, tags, len(line.audio) if spoken(line) else 0)
                write_track(layout, line.line_id, gain, clip, cancel)
                clip.close()
                at((k + 1) / len(lines))
    except BaseException:
        for s in sinks:
            s.abandon()
        raise
    return written, gain_db
