"""The open project as the window sees it: the script parsed with ids carried across edits, the cast,
the takes, and each line's state (design.md §6). QtCore only.

Every change of the project goes through here, so one signal tells the timeline, the editor's gutter,
the takes panel and the autosave what changed:

- `script_changed(order_changed)`: an edit was parsed (ids carried by `state.line_ids`); `change` says
  which lines it touched (None: any line may have changed), so views update only those;
- `takes_changed(line_id)`: a take was added, picked, deleted or restored;
- `replaced`: another project was opened (or a new one started);
- `modified(soon)`: something the project file holds changed (autosave, "unsaved changes").

A parse that would hold the window's thread (a book pasted, the warnings of a whole book after the cast
changed) runs on a thread of its own (`set_text_soon`, `reparse`); its result is applied only if nothing
changed the document meanwhile, else it is dropped (a later parse covers the later state).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

from s2studio.state.line_ids import LineIds, first_ids
from s2studio.state.project import GenerationSettings, Project, Take
from s2studio.state.script import Line, Script, parse_script
from s2studio.state.script_edits import Change, Edit, ScriptParser, common_ends
from s2studio.state.staleness import Stale, stale_reasons, take_settings, upgrade_takes, voice_key
from s2studio.state.voices import Voice
from s2studio.ui.control.background import Background
from s2studio.ui.control.line_state import LineState, line_state, stale_among
from s2studio.ui.control.parse_ahead import ParsedAhead, known_speakers, project_ids

OFF_THREAD_ROWS = 1000
"""Rows a parse may have to read before it leaves the window's thread (a row takes 20-30 µs to parse)."""


class Document(QObject):
    script_changed = Signal(bool)
    """An edit was parsed; True when the lines' order or membership changed (not only their text)."""
    takes_changed = Signal(str)
    replaced = Signal()
    modified = Signal(bool)
    """Something the project file holds changed. True for what arrives at the render's pace, saved at most once an
    interval while it keeps coming (`projects.RENDER_AUTOSAVE_S`): a new take (audio that took minutes to make), a
    take's check result (one a second for minutes after a book's render). False for edits that come in bursts
    (typing)."""
    cast_changed = Signal()
    settings_changed = Signal()
    """The project's generation settings changed (`set_settings`)."""

    def __init__(self, project: Project, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.project = project
        self._voices: dict[str, Voice] = {}
        self._voice_keys: dict[str, str] = {}
        self.script: Script = parse_script("")
        self.change: Change | None = None
        """The lines the last `script_changed` touched; None when it may have touched any."""
        self._parser = ScriptParser()
        self._ids = LineIds()
        self._revision = 0
        """Counts the changes of the script, the cast and the voices: an off-thread parse started at another
        revision is out of date when it ends."""
        self._parsing = Background("parse script", self)
        self._parsing.done.connect(self._parsed_off_thread)
        self.parses_off_thread = 0
        """How many parses went to a thread (what tests and benchmarks read)."""
        self._parsing_for: tuple[int, str] = (-1, "")
        """The revision and the text of the last parse sent to a thread."""
        self._text_ahead: str | None = None
        """The editor's text sent to a thread and not applied yet (`project.script` is the text parsed last)."""
        self._adopt(project)

    # -- the project ---------------------------------------------------------------------------

    def replace(self, project: Project, ahead: ParsedAhead | None = None) -> None:
        """Another project: its script with its saved ids (or content ids, for an old file); `ahead`: its
        script parsed off the GUI thread (`parse_ahead`: a book's takes a second to parse)."""
        self._adopt(project, ahead)
        self.replaced.emit()

    def voice_ids(self) -> frozenset[str]:
        """The library's voices as the parser's warnings depend on them (`parse_ahead`)."""
        return frozenset(self._voices)

    def _adopt(self, project: Project, ahead: ParsedAhead | None = None) -> None:
        self._revision += 1
        self._text_ahead = None
        self.project = project
        warnings_stale = False
        usable = ahead if ahead is not None and ahead.text is project.script else None
        if usable is not None:
            # the lines and their ids do not depend on the cast: only the warnings may (voices remapped)
            self._parser, script = usable.parser, usable.script
            warnings_stale = usable.known != known_speakers(project, self.voice_ids())
            if warnings_stale:  # not shown meanwhile: a book's stale warnings (every speaker's) take long to show
                script = script.without_warnings()
        else:
            script = first_ids(self._parser.parse(project.script, self._known()), project.line_ids)
        upgraded = usable is not None and usable.upgraded
        self._ids = usable.ids if usable is not None and usable.ids is not None else project_ids(project, script)
        self.script, self.change = script, None
        project.line_ids = list(script.line_ids)
        project.give_colors(script.speakers)
        if not upgraded:
            self._upgrade_takes()
        if warnings_stale:
            self._parse_off_thread(project.script, self.script)

    def _upgrade_takes(self) -> None:
        upgrade_takes(self.project, self.script.lines, self._voices)

    def voices(self) -> dict[str, Voice]:
        """The library's voices by id, as the staleness rule reads them (`set_voices`)."""
        return dict(self._voices)

    # -- edits ---------------------------------------------------------------------------------

    def set_text_soon(self, text: str) -> None:
        """The editor's text after a pause in typing: parsed now when the edit is small (`set_text`), else on a
        thread (a book pasted), `script_changed` coming when it is applied."""
        if self._parser.rows_to_parse(text, self._known()) < OFF_THREAD_ROWS:
            self.set_text(text)
        else:
            self._revision += 1
            self._text_ahead = text
            self._parse_off_thread(text, self.script)

    def finish_parsing(self) -> None:
        """The text still parsing on a thread parsed here and now (before a save or the window closing: what
        is written is the editor's text)."""
        if self._text_ahead is not None:
            self.set_text(self._text_ahead)

    def set_text(self, text: str) -> None:
        """The editor's text after an edit: parse what it touched and carry the ids of the lines before."""
        self._revision += 1
        self._text_ahead = None
        before = self.script
        parsed, edit = self._parser.reparse(before, text, self._known())
        self.script = self._ids.carry(before, parsed, edit)
        if self.assign_by_name():  # a new speaker with a voice of its name: no warning for it
            parsed, _ = self._parser.reparse(self.script, text, self._known())
            self.script = self._ids.carry(self.script, parsed)
            edit = Edit.everything(before, self.script)
        self.change = Change.between(before, self.script, edit)
        self.project.line_ids = list(self.script.line_ids)
        colored = self.project.give_colors(self.script.speakers)
        changed = text != self.project.script or colored
        self.project.script = text
        if changed:
            self.modified.emit(False)
        self.script_changed.emit(self.script.line_ids != before.line_ids)

    def reparse(self) -> None:
        """The same text, parsed again for new warnings (the cast or the voices changed); a book's on a thread."""
        self._revision += 1
        if self._text_ahead is not None or len(self.script.lines) >= OFF_THREAD_ROWS:  # a paste's parse is redone
            self._parse_off_thread(self.project.script if self._text_ahead is None else self._text_ahead, self.script)
            return
        self.script = self._ids.carry(self.script, self._parser.parse(self.project.script, self._known()))
        self.change = None
        self.script_changed.emit(False)

    def _parse_off_thread(self, text: str, before: Script) -> None:
        """Parse `text` (and carry `before`'s ids) on a thread: what `set_text` does, speakers cast by name
        included; `_parsed_off_thread` applies it if the document is still at this revision."""
        self.parses_off_thread += 1
        revision, known, ids = self._revision, self._known(), self._ids.copy()
        by_name = self._voices_by_name()
        cast = dict(self.project.cast)

        def parse(_task: Background) -> OffThreadParse:
            parser = ScriptParser()
            parsed = parser.parse(text, known)
            named = {s: by_name[s.strip().casefold()] for s in parsed.speakers
                     if s not in cast and s.strip().casefold() in by_name}
            if named:  # as `assign_by_name` will cast them: parsed with their voices known
                parsed = parser.parse(text, (known or frozenset()) | frozenset(named))
            script = ids.carry(before, parsed)
            p, s = common_ends(list(before.lines), list(script.lines))  # the lines the views must show anew
            change = Change.between(before, script, Edit(p, len(before.lines) - s, len(script.lines) - s))
            script.line_rows, script.line_speakers  # noqa: B018 - the views' first reads of a book, made here
            return OffThreadParse(revision, text, parser, ids, script, named, before, change)

        self._parsing_for = (revision, text)
        self._parsing.start(parse)

    def _parsed_off_thread(self, result: object, error: str) -> None:
        if error and self._parsing_for[0] == self._revision:
            self.set_text(self._parsing_for[1])  # the parser never raises; should it, the script still follows
        if not isinstance(result, OffThreadParse) or result.revision != self._revision:
            return  # the document changed meanwhile: the parse after that change counts
        before, self._text_ahead = self.script, None
        self._parser, self._ids, self.script = result.parser, result.ids, result.script
        for speaker, voice_id in result.named.items():
            self.project.cast.setdefault(speaker, voice_id)
        colored = self.project.give_colors(self.script.speakers)  # before the cast is shown: shown once, colored
        if result.named:
            self.cast_changed.emit()
        same_start = result.before is before  # else (never while the revision holds) every line is shown anew
        self.change = result.change if same_start else Change.between(before, self.script, Edit.everything(before,
                                                                                                          self.script))
        self.project.line_ids = list(self.script.line_ids)
        if result.text != self.project.script or colored or result.named:
            self.project.script = result.text
            self.modified.emit(False)
        self.script_changed.emit(self.script.line_ids != before.line_ids)

    def set_voices(self, voices: Iterable[Voice]) -> None:
        """The voice library's voices (after any change to it): their keys for the staleness rule, and
        speakers without a voice get the voice of the same name."""
        self._voices = {v.id: v for v in voices}
        self._voice_keys = {v.id: voice_key(v) for v in self._voices.values()}
        self._upgrade_takes()
        self.assign_by_name()
        self.reparse()

    def assign_by_name(self) -> list[str]:
        """Give each speaker never cast a voice whose name is the speaker's (case and spaces aside);
        returns the speakers assigned. A speaker the person set to "no voice" stays without."""
        by_name = self._voices_by_name()
        assigned = []
        for speaker in self.script.speakers:
            vid = by_name.get(speaker.strip().casefold())
            if speaker not in self.project.cast and vid:
                self.project.cast[speaker] = vid
                assigned.append(speaker)
        if assigned:
            self.project.give_colors(self.script.speakers)  # the cast shown once, in the speakers' colours
            self.modified.emit(False)
            self.cast_changed.emit()
        return assigned

    def _voices_by_name(self) -> dict[str, str]:
        """Voice ids by their name, case and spaces aside (the first of a name)."""
        by_name: dict[str, str] = {}
        for v in self._voices.values():
            by_name.setdefault(v.name.strip().casefold(), v.id)
        return by_name

    def set_cast(self, speaker: str, voice_id: str) -> None:
        if self.project.cast.get(speaker) == voice_id:
            return
        self.project.cast[speaker] = voice_id
        self.modified.emit(False)
        self.cast_changed.emit()
        self.reparse()

    def set_settings(self, settings: GenerationSettings) -> None:
        if settings != self.project.settings:
            self.project.settings = settings
            self.modified.emit(False)
            self.settings_changed.emit()

    def set_gap(self, gap_s: float) -> None:
        self.project.gap_s = gap_s
        self.modified.emit(False)

    # -- takes ---------------------------------------------------------------------------------

    def add_take(self, take: Take) -> None:
        self._ids.remember([take.line_id])
        self.project.add_take(take)
        self.takes_changed.emit(take.line_id)
        self.modified.emit(True)

    def set_check(self, take: Take, check: TakeCheck) -> None:
        """What the checks found in `take` (`control.take_checks`), kept with it in the project."""
        take.check = check
        self.project.touch(take)
        self.takes_changed.emit(take.line_id)
        self.modified.emit(True)  # saved at the autosave's pace while results keep coming

    def pick(self, line_id: str, index: int) -> None:
        entry = self.project.lines.get(line_id)
        if entry is None or entry.picked == index:
            return
        self.project.pick(line_id, index)
        self.takes_changed.emit(line_id)
        self.modified.emit(True)

    def delete_take(self, line_id: str, take_id: str) -> tuple[Take, int, bool]:
        """Remove a take; returns what `restore_take` needs to put it back."""
        entry = self.project.lines[line_id]
        take = next(t for t in entry.takes if t.take_id == take_id)
        picked = entry.current is take
        index = self.project.delete_take(line_id, take_id)
        self.takes_changed.emit(line_id)
        self.modified.emit(True)
        return take, index, picked

    def restore_take(self, take: Take, index: int, picked: bool) -> None:
        self.project.restore_take(take, index, picked)
        self.takes_changed.emit(take.line_id)
        self.modified.emit(True)

    # -- queries -------------------------------------------------------------------------------

    def voice_of(self, speaker: str) -> Voice | None:
        return self._voices.get(self.project.cast.get(speaker, ""))

    def voice_key_of(self, speaker: str) -> str:
        """`staleness.voice_key` of the speaker's voice ("" without one)."""
        return self._voice_keys.get(self.project.cast.get(speaker, ""), "")

    def unvoiced(self, lines: Sequence[Line] | None = None) -> list[str]:
        """Speakers (of `lines`, else of the script) without a voice that exists, in order."""
        speakers = dict.fromkeys(ln.speaker for ln in lines) if lines is not None else self.script.speakers
        return [s for s in speakers if self.voice_of(s) is None]

    def reasons(self, line: Line, take: Take | None = None) -> tuple[Stale, ...]:
        """Why `take` (the picked one by default) is stale for `line` now; () when it is up to date."""
        take = take or self.project.current(line.line_id)
        if take is None:
            return ()
        return stale_reasons(take, line, self.voice_key_of(line.speaker), self.project.settings)

    def state(self, line: Line) -> LineState:
        return line_state(self.project.lines.get(line.line_id), line.text, line.speaker,
                          self.voice_key_of(line.speaker), take_settings(self.project.settings))

    def stale_ids(self, line_ids: Iterable[str]) -> set[str]:
        """The lines among `line_ids` whose picked take is stale (`state`'s rule, many lines in one loop)."""
        return stale_among(self.project, self.script, line_ids, self.voice_key_of)

    def failed_lines(self) -> list[Line]:
        """Lines whose picked take failed a check: what Render ▸ Render Failing Lines Again renders."""
        out = []
        for line in self.script.lines:
            take = self.project.current(line.line_id)
            if take is not None and take.check is not None and take.check.verdict == "failed":
                out.append(line)
        return out

    def stale_lines(self) -> list[Line]:
        """Lines whose picked take is missing or stale: what Render ▸ Render Stale Lines renders."""
        return [ln for ln in self.script.lines if self.state(ln).kind != "fresh"]

    def _known(self) -> frozenset[str] | None:
        """Speaker names the parser does not warn about: those with a voice (the Narrator too: a narrated line
        without one is underlined, as the cast's warning names it). With no voices yet every name would be
        "unknown", so nothing is warned until there is a voice to pick."""
        return known_speakers(self.project, self._voices)


@dataclass(frozen=True)
class OffThreadParse:
    """A parse made on a thread (`Document._parse_off_thread`), with what applying it needs."""

    revision: int
    text: str
    parser: ScriptParser
    ids: LineIds
    script: Script
    named: dict[str, str]
    """Speakers the parse found that `assign_by_name` casts: speaker -> voice id."""
    before: Script
    """The script the parse started from (the document's while its revision is unchanged)."""
    change: Change
    """The lines that differ from `before` (none when only warnings changed)."""
