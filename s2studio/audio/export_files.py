"""What an export writes: the rendered lines it is given, where chapters start among them, every file's name,
and about how large the audio files will be (for the free-space check and the stems' default format)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from s2studio.audio import SAMPLE_RATE
from s2studio.audio.dsp import Audio
from s2studio.audio.export_writer import DEFAULT_KBPS, FORMATS
from s2studio.state.file_names import fit_in_folder, unique_ignoring_case
from s2studio.state.tags import without_tags

Format = Literal["wav", "flac", "ogg", "opus", "mp3"]

CLIP_WORDS = 5
"""Words of a line's text in its clip's file name."""
FLAC_BYTES_PER_SAMPLE = 2.25
"""24-bit FLAC of speech: the codec's output has noisy low bits, so about three quarters of the raw 3 bytes.
Silence costs next to nothing (`SILENCE_BYTES_PER_SAMPLE`)."""
SILENCE_BYTES_PER_SAMPLE = 0.01
VORBIS_BYTES_PER_SECOND = 20_000
"""libsndfile's default Vorbis quality on speech, rounded up."""
HUGE_STEMS = 2_000_000_000
"""Stems larger than this in all (WAV: 20 speakers of 40 minutes) are offered as FLAC instead."""


@dataclass(frozen=True)
class RenderedLine:
    line_id: str
    speaker: str
    text: str
    audio: Audio
    """The take's audio, as the timeline takes it; the export reads it only through the timeline."""
    voice: str = ""
    """The name of the voice that speaks it: the artist of its clip and of its speaker's stem."""
    number: int | None = None
    """Its place in the script, 1-based, for its clip's name (None: its place among the lines exported)."""
    chapter: str | None = None
    """The title of the chapter this line opens (`chapters.chapter_titles`), None for every other line."""


def spoken(line: RenderedLine) -> bool:
    return line.audio is not None and len(line.audio) > 0  # what the timeline gives room


def chapter_marks(lines: Sequence[RenderedLine]) -> list[tuple[str, int]]:
    """(title, index among the spoken lines) of each chapter; a chapter opened by a line without audio starts
    at the next line that has some."""
    marks: list[tuple[str, int]] = []
    waiting: list[str] = []
    heard = 0
    for line in lines:
        if line.chapter is not None:
            waiting.append(line.chapter)
        if spoken(line):
            if waiting:
                marks.append((" — ".join(waiting), heard))
                waiting = []
            heard += 1
    return marks


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
    parts_ = [f"{number:0{digits}d}", _file_word(line.speaker, 32) or "line", _file_word(words, 48)]
    return "_".join(p for p in parts_ if p) + FORMATS[fmt][2]


def _fitted(folder: Path, names: list[str]) -> list[str]:
    """`names` within Windows' path length inside `folder`, and apart where only case (or nothing) tells them apart
    (two lines given the same number: the second gets a suffix)."""
    return unique_ignoring_case(fit_in_folder(folder, name) for name in names)


def clip_names(lines: Sequence[RenderedLine], fmt: Format, folder: Path) -> list[str]:
    numbers = [ln.number if ln.number is not None else i + 1 for i, ln in enumerate(lines)]
    digits = max(3, len(str(max(numbers, default=1))))
    return _fitted(folder, [clip_name(n, ln, fmt, digits) for n, ln in zip(numbers, lines, strict=True)])


def stem_names(lines: Sequence[RenderedLine], fmt: Format, folder: Path) -> list[str]:
    return _fitted(folder, [stem_name(i, s, fmt) for i, s in enumerate(speakers_in_order(lines))])


def chapter_file_names(titles: Sequence[str], fmt: Format, folder: Path) -> list[str]:
    """`01_Chapter-one.wav`: the part's place in the book, then its title."""
    digits = max(2, len(str(len(titles))))
    return _fitted(folder, [f"{i:0{digits}d}_{_file_word(t, 48) or 'chapter'}{FORMATS[fmt][2]}"
                            for i, t in enumerate(titles, start=1)])


def _part_titles(lines: Sequence[RenderedLine], opening: str) -> list[str]:
    marks = chapter_marks(lines)
    if not any(spoken(ln) for ln in lines):
        return []
    return ([opening] if not marks or marks[0][1] > 0 else []) + [t for t, _ in marks]


def output_paths(lines: Sequence[RenderedLine], fmt: Format, out: Path | None = None,
                 stems_dir: Path | None = None, clips_dir: Path | None = None, srt: Path | None = None,
                 vtt: Path | None = None, cue: Path | None = None, chapters_dir: Path | None = None,
                 stems_format: Format | None = None, opening: str = "Opening") -> list[Path]:
    """Every file `export` writes for these outputs, in the order it writes them: what the export dialog
    checks before asking whether to replace files that exist (`opening`: the title of the part before the
    first heading, `metadata.title` or "Opening")."""
    paths = [out] if out is not None else []
    if stems_dir is not None:
        paths += [stems_dir / name for name in stem_names(lines, stems_format or fmt, stems_dir)]
    if chapters_dir is not None:
        paths += [chapters_dir / name for name in chapter_file_names(_part_titles(lines, opening), fmt, chapters_dir)]
    if clips_dir is not None:
        paths += [clips_dir / name for name in clip_names(lines, fmt, clips_dir)]
    return paths + [p for p in (srt, vtt, cue) if p is not None]


# ----------------------------------------------------------------------------- sizes


def estimated_bytes(fmt: Format, samples: int, sound: int, bitrate_kbps: int | None = None) -> int:
    """About how large a `fmt` file of `samples` samples (`sound` of them not silent) will be."""
    seconds = samples / SAMPLE_RATE
    if fmt == "wav":
        return 2 * samples + 4096
    if fmt == "flac":
        return int(FLAC_BYTES_PER_SAMPLE * sound + SILENCE_BYTES_PER_SAMPLE * samples) + 8192
    if fmt == "ogg":
        return int(VORBIS_BYTES_PER_SECOND * sound / SAMPLE_RATE + SILENCE_BYTES_PER_SAMPLE * samples) + 8192
    return int((bitrate_kbps or DEFAULT_KBPS[fmt]) * 125 * seconds) + 8192


@dataclass(frozen=True)
class Sound:
    """How much audio a set of lines holds, summed in one pass over them: what the stems' sizes are estimated from
    whatever the format, the bitrate or the gap (which a person changes in the dialog without the lines changing)."""

    spoken: int
    """Lines with audio (the timeline's gaps fall between them)."""
    samples: int
    """Their audio, gaps left out."""
    by_speaker: dict[str, int]
    """Each speaker's share of `samples` (0 for a speaker whose lines are all silent)."""

    def mix_samples(self, gap_s: float) -> int:
        """The mix's length (and so every stem's), with `gap_s` between lines."""
        return self.samples + max(0, self.spoken - 1) * round(gap_s * SAMPLE_RATE)


def sound_of(lines: Sequence[RenderedLine]) -> Sound:
    """The `Sound` of `lines`: the export dialog sums it once, off the window's thread, for every estimate."""
    by_speaker: dict[str, int] = {}
    spoken_count = 0
    for line in lines:
        n = len(line.audio) if line.audio is not None else 0
        spoken_count += n > 0
        by_speaker[line.speaker] = by_speaker.get(line.speaker, 0) + n
    return Sound(spoken_count, sum(by_speaker.values()), by_speaker)


def stems_bytes(sound: Sound, fmt: Format, gap_s: float, bitrate_kbps: int | None = None) -> int:
    """About how large the speaker stems of lines holding `sound` will be in `fmt` (each as long as the mix)."""
    samples = sound.mix_samples(gap_s)
    return sum(estimated_bytes(fmt, samples, s, bitrate_kbps) for s in sound.by_speaker.values())


def stems_format_for(sound: Sound, fmt: Format, gap_s: float, bitrate_kbps: int | None = None) -> Format:
    """The stems' default format: FLAC when stems in the mix's format would be huge (`HUGE_STEMS`), else the mix's."""
    return "flac" if fmt != "flac" and stems_bytes(sound, fmt, gap_s, bitrate_kbps) > HUGE_STEMS else fmt
