"""A project's script parsed before the window shows it: on the thread that reads the project, so that opening a
book does not parse its 10,000 lines on the window's thread (`Document.replace` adopts the result). QtCore-free.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from s2studio.state.line_ids import Key, LineIds, first_ids
from s2studio.state.project import Project
from s2studio.state.script import Script
from s2studio.state.script_edits import ScriptParser


@dataclass(frozen=True)
class ParsedAhead:
    """A project's script parsed where the GUI thread does not wait for it (`parse_ahead`)."""

    text: str
    known: frozenset[str] | None
    parser: ScriptParser
    script: Script
    ids: LineIds | None = None
    """The ids the project holds, for the edits to come (`project_ids`): made here too, a loop over a book's
    lines."""
    upgraded: bool = False
    """The project's takes were upgraded for `script` with the cast and voices as they are now
    (`upgrade_takes`, on the thread that read it)."""


def parse_ahead(project: Project, voice_ids: Collection[str]) -> ParsedAhead:
    """What `Document.replace` would parse for `project` (thread-safe: touches nothing but its arguments)."""
    known = known_speakers(project, voice_ids)
    parser = ScriptParser()
    script = first_ids(parser.parse(project.script, known), project.line_ids)
    script.line_ids, script.line_speakers, script.line_texts, script.line_rows  # noqa: B018 - a book's columns, read
    # by the window as it shows it (its states, its chapters, its checks), made here
    return ParsedAhead(project.script, known, parser, script, project_ids(project, script))


def project_ids(project: Project, script: Script) -> LineIds:
    """The line ids `project` holds once `script` (its script parsed) is shown: its lines' and those of its takes
    that no line owns (orphans, which a line typed again with their speaker and text takes back)."""
    owned = set(script.line_ids)
    orphans: dict[Key, list[str]] = {}
    for line_id, entry in project.lines.items():
        if line_id not in owned:
            for key in dict.fromkeys((t.speaker, t.text) for t in entry.takes if t.speaker):
                orphans.setdefault(key, []).append(line_id)
    return LineIds(known=list(project.lines) + list(owned), orphans=orphans)


def known_speakers(project: Project, voice_ids: Collection[str]) -> frozenset[str] | None:
    """Speakers whose voice the library has (None without any voice: then no name is warned about): the names
    the parser does not warn about."""
    if not voice_ids:
        return None
    return frozenset(s for s, v in project.cast.items() if v in voice_ids)
