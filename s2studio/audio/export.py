"""Export rendered lines: one mixed file, one track per speaker, one clip per line, SRT and WebVTT
(design.md §8, issues 4 and 14).

Lines are laid out by the same `Timeline` the player uses, so exported files and cue times match
what was heard. Normalisation computes one gain on the mix and applies it to every other file too, so
the speaker stems still sum to the mix and a line's clip is the mix's audio of that line.

What people bring into other programs:

- speaker stems (`stems_dir`): one full-length track per speaker, silent where others speak; drop them
  into a DAW at 0:00 and they line up (as many files as speakers, not as lines);
- line clips (`clips_dir`): each line's take alone, trimmed to the take, named
  `NNN_speaker_first-words.wav` (for an editor, a game engine, a dubbing tool).

Subtitles show what is heard: delivery tags such as "[whispering]" are left out unless asked for.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import numpy as np
import soundfile as sf

from s2studio.audio.dsp import Audio, integrated_loudness, peak, resample
from s2studio.audio.timeline import Timeline
from s2studio.audio import SAMPLE_RATE
from s2studio.errors import UserError
from s2studio.state.atomic import OutputSet, write_bytes_atomic, write_error
from s2studio.state.file_names import fit_in_folder, unique_ignoring_case
from s2studio.state.tags import without_tags

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
BITRATES_KBPS: dict[str, tuple[int, ...]] = {"mp3": (64, 96, 128, 160, 192, 256, 320), "opus": (32, 48, 64, 96, 128, 192)}
"""The bitrates offered for the lossy formats with a bitrate (Vorbis is quality-based and keeps libsndfile's)."""
DEFAULT_KBPS = {"mp3": 192, "opus": 96}
"""Transparent speech at a fraction of the WAV's size."""
CLIP_WORDS = 5
"""Words of a line's text in its clip's file name."""


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
    bitrate_kbps: int | None = None
    """MP3 (constant) and Opus (average) bitrate; None: `DEFAULT_KBPS`. Ignored by the other formats."""
    subtitle_tags: bool = False
    """Keep delivery tags ("[whispering]") in the subtitles' text."""

    def __post_init__(self) -> None:
        offered = BITRATES_KBPS.get(self.format)
        if self.bitrate_kbps is not None and offered is not None and self.bitrate_kbps not in offered:
            raise UserError(f"{self.format} bitrate {self.bitrate_kbps} kbps is not offered; choose one of "
                            f"{', '.join(map(str, offered))}")


@dataclass(frozen=True)
class RenderedLine:
    line_id: str
    speaker: str
    text: str
    audio: Audio
    voice: str = ""
    """The name of the voice that speaks it: the artist of its clip and of its speaker's stem."""
    number: int | None = None
    """Its place in the script, 1-based, for its clip's name (None: its place among the lines exported)."""


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


def compression_level(fmt: Format, kbps: int) -> float:
    """libsndfile's 0..1 compression level that gives `kbps` (libsndfile 1.2 maps it linearly: MP3 from
    320 kbps at 0 to 32 kbps at 1, Opus from 256 kbps to 6 kbps per channel)."""
    if fmt == "mp3":
        return (320 - kbps) / 288
    if fmt == "opus":
        return 1 - (kbps - 6) / 250
    raise ValueError(f"{fmt} has no bitrate")


def encode_audio(audio: Audio, fmt: Format, metadata: Metadata | None = None,
                 sample_rate: int = SAMPLE_RATE, bitrate_kbps: int | None = None) -> bytes:
    """Mono `audio` at `sample_rate` as the bytes of a `fmt` file (resampled for Opus), with metadata and,
    for MP3 and Opus, the bitrate (`DEFAULT_KBPS` when None). Encoded in memory: the disk is written by the
    one writer, which reports a full disk as such."""
    sf_format, subtype, _ = FORMATS[fmt]
    data = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)
    rate = sample_rate
    if fmt == "opus" and rate != OPUS_RATE:
        data, rate = np.clip(resample(data, rate, OPUS_RATE), -1.0, 1.0), OPUS_RATE
    options: dict[str, object] = {}
    if fmt in DEFAULT_KBPS:
        options["compression_level"] = compression_level(fmt, bitrate_kbps or DEFAULT_KBPS[fmt])
        if fmt == "mp3":
            options["bitrate_mode"] = "CONSTANT"
    buf = io.BytesIO()
    with sf.SoundFile(buf, "w", samplerate=rate, channels=1, format=sf_format, subtype=subtype, **options) as f:
        if metadata is not None:
            _tag(f, metadata)
        f.write(data)
    return buf.getvalue()


def write_audio(path: Path, audio: Audio, fmt: Format, metadata: Metadata | None = None,
                sample_rate: int = SAMPLE_RATE, bitrate_kbps: int | None = None) -> Path:
    """`encode_audio` to the file `path`, atomically."""
    return write_bytes_atomic(Path(path), encode_audio(audio, fmt, metadata, sample_rate, bitrate_kbps))


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


def _shown(cues: Sequence[Cue], keep_tags: bool) -> list[tuple[Cue, str]]:
    """Each cue with the text it shows; a cue left without words (a line that is only "[laughing]") is
    dropped, since a subtitle with nothing to read is noise."""
    shown = [(c, c.text if keep_tags else without_tags(c.text)) for c in cues]
    return [(c, text) for c, text in shown if text.strip()]


def srt_text(cues: Sequence[Cue], with_speakers: bool = True, keep_tags: bool = False) -> str:
    """SubRip subtitles, numbered from 1; delivery tags left out unless `keep_tags`."""
    blocks = []
    for number, (c, text) in enumerate(_shown(cues, keep_tags), start=1):
        text = f"{c.speaker}: {text}" if with_speakers else text
        blocks.append(f"{number}\n{_srt_time(c.start_s)} --> {_srt_time(c.end_s)}\n{text}\n")
    return "\n".join(blocks)


def vtt_text(cues: Sequence[Cue], with_speakers: bool = True, keep_tags: bool = False) -> str:
    """WebVTT subtitles, each cue named by its line id, the speaker as a voice span."""
    def esc(s: str) -> str:
        return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    out = ["WEBVTT\n"]
    for c, text in _shown(cues, keep_tags):
        text = f"<v {esc(c.speaker)}>{esc(text)}" if with_speakers else esc(text)
        out.append(f"{c.line_id}\n{_srt_time(c.start_s).replace(',', '.')} --> "
                   f"{_srt_time(c.end_s).replace(',', '.')}\n{text}\n")
    return "\n".join(out)


def _file_word(text: str, limit: int) -> str:
    """`text` as a piece of a file name: letters and digits kept, apostrophes dropped ("it's" -> "its"), every
    other run of characters one "-"."""
    text = re.sub(r"['’]", "", text)
    return re.sub(r"[\W_]+", "-", text, flags=re.UNICODE).strip("-")[:limit].strip("-")


def speakers_in_order(lines: Sequence[RenderedLine]) -> list[str]:
    """The speakers of `lines`, each once, in the order they first speak: the stems' order."""
    return list(dict.fromkeys(ln.speaker for ln in lines))


def stem_name(index: int, speaker: str, fmt: Format) -> str:
    """`01_Alice.wav`: the speaker's place in the script (so a DAW lists the tracks in order), then the name."""
    return f"{index + 1:02d}_{_file_word(speaker, 40) or 'speaker'}{FORMATS[fmt][2]}"


def clip_name(number: int, line: RenderedLine, fmt: Format, digits: int = 3) -> str:
    """`001_Alice_did-you-hear-that.wav`: the line's number, its speaker and its first words (tags left out)."""
    words = " ".join(without_tags(line.text).lower().split()[:CLIP_WORDS])
    parts = [f"{number:0{digits}d}", _file_word(line.speaker, 32) or "line", _file_word(words, 48)]
    return "_".join(p for p in parts if p) + FORMATS[fmt][2]


def _clip_names(lines: Sequence[RenderedLine], fmt: Format, folder: Path) -> list[str]:
    numbers = [ln.number if ln.number is not None else i + 1 for i, ln in enumerate(lines)]
    digits = max(3, len(str(max(numbers, default=1))))
    return _fitted(folder, [clip_name(n, ln, fmt, digits) for n, ln in zip(numbers, lines, strict=True)])


def _stem_names(lines: Sequence[RenderedLine], fmt: Format, folder: Path) -> list[str]:
    return _fitted(folder, [stem_name(i, s, fmt) for i, s in enumerate(speakers_in_order(lines))])


def _fitted(folder: Path, names: list[str]) -> list[str]:
    """`names` within Windows' path length inside `folder`, and apart where only case (or nothing) tells them apart
    (two lines given the same number: the second gets a suffix)."""
    return unique_ignoring_case(fit_in_folder(folder, name) for name in names)


def output_paths(lines: Sequence[RenderedLine], fmt: Format, out: Path | None = None,
                 stems_dir: Path | None = None, clips_dir: Path | None = None, srt: Path | None = None,
                 vtt: Path | None = None) -> list[Path]:
    """Every file `export` writes for these outputs, in the order it writes them: what the export dialog
    checks before asking whether to replace files that exist."""
    paths = [out] if out is not None else []
    if stems_dir is not None:
        paths += [stems_dir / name for name in _stem_names(lines, fmt, stems_dir)]
    if clips_dir is not None:
        paths += [clips_dir / name for name in _clip_names(lines, fmt, clips_dir)]
    return paths + [p for p in (srt, vtt) if p is not None]


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
           vtt: Path | None = None, into: OutputSet | None = None) -> ExportResult:
    """Lay out `lines`, normalise, and write whichever outputs are asked for (`out`: the mix; `stems_dir`:
    one track per speaker; `clips_dir`: one clip per line; `srt`, `vtt`: subtitles), all or none of them:
    every file is staged first and renamed only when all are (see `state/atomic.py`). With `into` the
    files are staged there and the caller commits them, together with its own (a render's events log)."""
    if not lines:
        raise UserError("nothing to export: no line has been rendered yet")
    mix, cues, starts = layout(lines, settings.gap_s)
    gain_db = normalization_gain(mix, settings)
    gain = np.float32(10 ** (gain_db / 20))
    mix = mix * gain
    files = into if into is not None else OutputSet()
    folders = [p.parent for p in (out, srt, vtt) if p is not None] + [d for d in (stems_dir, clips_dir) if d is not None]
    made = _make_folders(folders)
    fmt, meta, kbps = settings.format, settings.metadata, settings.bitrate_kbps
    written: list[Path] = []
    try:
        if out is not None:
            written.append(files.add(out, encode_audio(mix, fmt, meta, bitrate_kbps=kbps)))
        if stems_dir is not None:
            for speaker, name in zip(speakers_in_order(lines), _stem_names(lines, fmt, stems_dir), strict=True):
                stem = np.zeros(len(mix), np.float32)
                voices: list[str] = []
                for line, start in zip(lines, starts, strict=True):
                    if line.speaker == speaker:
                        stem[start:start + len(line.audio)] = np.asarray(line.audio, np.float32) * gain
                        voices.append(line.voice)
                tags = replace(meta, voices=tuple(v for v in dict.fromkeys(voices) if v) or meta.voices)
                written.append(files.add(stems_dir / name, encode_audio(stem, fmt, tags, bitrate_kbps=kbps)))
        if clips_dir is not None:
            for line, name in zip(lines, _clip_names(lines, fmt, clips_dir), strict=True):
                tags = replace(meta, title=without_tags(line.text)[:200] or meta.title,
                                voices=(line.voice,) if line.voice else meta.voices)
                written.append(files.add(clips_dir / name, encode_audio(np.asarray(line.audio, np.float32) * gain,
                                                                        fmt, tags, bitrate_kbps=kbps)))
        if srt is not None:
            written.append(files.add_text(srt, srt_text(cues, keep_tags=settings.subtitle_tags)))
        if vtt is not None:
            written.append(files.add_text(vtt, vtt_text(cues, keep_tags=settings.subtitle_tags)))
        if into is None:
            files.commit()
    except BaseException:
        files.discard()
        for folder in reversed(made):
            _remove_if_empty(folder)
        raise
    return ExportResult(mix, tuple(cues), gain_db, tuple(written))
