"""What the export dialog exports: the picked take of each rendered line, with its voice's name, its number in the
script and the chapter it opens; and how the dialog counts them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from s2studio.audio import SAMPLE_RATE
from s2studio.audio.chapters import chapter_titles
from s2studio.audio.export import RenderedLine, Sound, sound_of
from s2studio.state.project import Project
from s2studio.state.script import Script


def rendered_lines(project: Project, script: Script, voice_names: Mapping[str, str] | None = None,
                   only: Sequence[str] | None = None) -> tuple[list[RenderedLine], int]:
    """The picked takes in script order (of the lines in `only`, when given), each with its voice's name, its
    number in the script and the chapter it opens, and how many of those lines have no take."""
    names = voice_names or {}
    wanted = set(only) if only is not None else None
    picked, missing = [], 0
    for number, line in enumerate(script.lines, start=1):
        if wanted is not None and line.line_id not in wanted:
            continue
        take = project.current(line.line_id)
        if take is None:
            missing += 1
        else:
            picked.append((number, line, take))
    chapters = chapter_titles(script, (line.line_id for _, line, _ in picked))
    out = [RenderedLine(line.line_id, line.speaker, line.text, take.sound,  # read through the timeline, in blocks
                        voice=names.get(project.cast.get(line.speaker, ""), ""), number=number,
                        chapter=chapters.get(line.line_id)) for number, line, take in picked]
    return out, missing


def counted(project: Project, script: Script, voice_names: Mapping[str, str] | None = None,
            only: Sequence[str] | None = None) -> tuple[list[RenderedLine], int, Sound]:
    """`rendered_lines` and the audio they hold: what the dialog counts off the window's thread, so that a book's
    10,000 lines are never walked there (the summary, the stems' format and their size note all read the `Sound`)."""
    lines, missing = rendered_lines(project, script, voice_names, only)
    return lines, missing, sound_of(lines)


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'s' * (n != 1)}"


def duration(samples: int) -> str:
    minutes = round(samples / SAMPLE_RATE / 60)
    if minutes < 1:
        return f"{samples / SAMPLE_RATE:.0f} s"
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"
