"""Line identity: ids that survive edits, so takes belong to a line and not to a text (design.md §6).

A script's first ids are the parser's content ids (`script.make_line_id`): a new script, and a project
saved before ids were stored, start with them. From then on `LineIds.carry` maps the lines before an
edit to the lines after it:

- the lines equal (speaker and text) at the start and at the end keep their ids;
- between those, a line diff (difflib's `SequenceMatcher` over (speaker, text)) pairs them: lines it
  finds equal keep their ids;
- in a replaced block, old and new lines are paired by text similarity in order (an edited line, a
  split line's larger half, a joined line's larger part), a one-line block always pairs: those keep
  their ids, whatever changed in them;
- an old line left unpaired is retired; a new line left unpaired takes back the id of a retired line
  (or of takes no script line owns) with the same speaker and text, so Undo of a delete, or a moved
  line, finds its takes again; otherwise it gets an id this project never used (not even by takes of
  deleted lines).

Pure Python, no Qt: the window calls it after every (debounced) edit, over the lines the edit touched
(`script_edits.Edit`), so that the cost follows the edit and not the length of the script.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from s2studio.state.script import Line, Script, make_line_id
from s2studio.state.script_edits import Edit, move_line
from s2studio.state.script_pieces import Pieces, Shift

logger = logging.getLogger(__name__)

Key = tuple[str, str]
"""(speaker, text) of a line."""

PAIR_SIMILARITY = 0.5
"""Below this text similarity two lines of a replaced block are different lines, not one edited line."""
MAX_ALIGNED_BLOCK = 60
"""Replaced blocks larger than this (a paste over a whole chapter) pair line by line instead of by
similarity, which costs the product of the two sizes."""


def first_ids(script: Script, saved: Sequence[str] | None) -> Script:
    """The script as a project opens it: its saved ids when they fit (one per line, unique), else the
    content ids the parser gave (a project from before ids were saved, or a file edited by hand)."""
    if saved is None or list(saved) == list(script.line_ids):
        return script
    if len(saved) == len(script.lines) and len(set(saved)) == len(saved) and all(isinstance(i, str) and i
                                                                                   for i in saved):
        return script.with_ids(saved)
    logger.warning("project line ids do not fit its script (%d ids, %d lines): using content ids",
                   len(saved), len(script.lines))
    return script


def similarity(a: Line, b: Line) -> float:
    """How alike two lines read (0..1); a change of speaker alone keeps them alike."""
    return difflib.SequenceMatcher(None, a.text, b.text, autojunk=False).ratio()


def _align(old: Sequence[Line], new: Sequence[Line]) -> list[tuple[int, int]]:
    """Pairs (i, j) of a replaced block, increasing in both, maximising the summed similarity of pairs
    at least PAIR_SIMILARITY alike; on ties the earlier lines pair (a split's first half keeps the id)."""
    n, m = len(old), len(new)
    if n == 1 and m == 1:
        return [(0, 0)]
    if n * m > MAX_ALIGNED_BLOCK * MAX_ALIGNED_BLOCK:
        return [(i, i) for i in range(min(n, m))]
    sim = [[similarity(a, b) for b in new] for a in old]
    # best[i][j]: best score pairing old[i:] with new[j:]; filled from the end so ties prefer early pairs
    best = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            pair = sim[i][j] + best[i + 1][j + 1] if sim[i][j] >= PAIR_SIMILARITY else -1.0
            best[i][j] = max(pair, best[i + 1][j], best[i][j + 1])
    pairs: list[tuple[int, int]] = []
    i = j = 0
    while i < n and j < m:
        if sim[i][j] >= PAIR_SIMILARITY and best[i][j] == sim[i][j] + best[i + 1][j + 1]:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif best[i][j] == best[i + 1][j]:
            i += 1
        else:
            j += 1
    if not pairs and n == m:  # as many lines rewritten as there were: edits in place
        pairs = [(k, k) for k in range(n)]
    return pairs


class LineIds:
    """Carries line ids across the edits of one project's script.

    `known` are the ids the project already holds (its takes' lines, orphans included), which a fresh
    id must avoid and which `orphans` can give back. Retired ids are remembered for the session."""

    def __init__(self, known: Iterable[str] = (), orphans: dict[Key, list[str]] | None = None) -> None:
        self._used: set[str] = set(known)
        self._retired: dict[Key, list[str]] = {}
        """(speaker, text) -> ids of lines deleted with that content, most recent last."""
        self._orphans: dict[Key, list[str]] = {k: list(v) for k, v in (orphans or {}).items()}
        """(speaker, text) -> ids whose takes no script line owned when the project was opened."""

    def copy(self) -> LineIds:
        """A copy that carries on its own (an off-thread parse carries ids into one while the window goes on)."""
        other = LineIds(self._used, self._orphans)
        other._retired = {k: list(v) for k, v in self._retired.items()}
        return other

    def remember(self, ids: Iterable[str]) -> None:
        """Ids now in use elsewhere (new takes, the first ids of a script)."""
        self._used.update(ids)

    def carry(self, before: Script, after: Script, edit: Edit | None = None) -> Script:
        """`after` (a parse of the edited text) with the ids of `before`'s lines carried over (module
        docstring). `edit` (from `ScriptParser.reparse`) says which lines can have changed: the others
        carry their ids already, so the work is proportional to the edit."""
        old, new = before.lines, after.lines
        if edit is None:
            edit = Edit.everything(before, after)
        n = min(len(old), len(new))
        prefix = edit.first
        # Lines after an edit that kept their count are the same lines: a prefix reaching the edit's end
        # would run on over all of them (a space typed in a book: 5,000 lines made and compared for nothing).
        within = edit.old_end if len(old) == len(new) else n
        while prefix < within and old[prefix].key == new[prefix].key:
            prefix += 1
        suffix = min(len(old) - edit.old_end, n - prefix)
        while suffix < n - prefix and old[-1 - suffix].key == new[-1 - suffix].key:
            suffix += 1
        old_end, new_end, moved = len(old) - suffix, len(new) - suffix, len(new) - len(old)
        stop = max(edit.new_end, new_end)
        self._used.update(ln.line_id for ln in old[edit.first:max(edit.old_end, old_end)])
        ids: dict[int, str] = {j: old[j].line_id for j in range(edit.first, prefix)}
        ids.update((j, old[j - moved].line_id) for j in range(new_end, stop))
        paired_old: set[int] = set()
        matcher = difflib.SequenceMatcher(None, [ln.key for ln in old[prefix:old_end]],
                                          [ln.key for ln in new[prefix:new_end]], autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                pairs = [(k, k) for k in range(i2 - i1)]
            elif tag == "replace":
                pairs = _align(old[prefix + i1:prefix + i2], new[prefix + j1:prefix + j2])
            else:
                continue
            for i, j in pairs:
                ids[prefix + j1 + j] = old[prefix + i1 + i].line_id
                paired_old.add(prefix + i1 + i)
        for i in range(prefix, old_end):
            if i not in paired_old:
                self._retired.setdefault(old[i].key, []).append(old[i].line_id)
        taken = set(ids.values())

        def in_use(line_id: str) -> bool:
            """Held by a line of the new script: one placed already, or one of `before` outside the middle."""
            if line_id in taken:
                return True
            line = before.line(line_id)
            return line is not None and not prefix <= line.index < old_end

        def used(line_id: str) -> bool:
            return line_id in self._used or in_use(line_id) or before.line(line_id) is not None

        for j in range(prefix, new_end):
            if j not in ids:
                line = new[j]
                ids[j] = self._recall(line.key, in_use) or self._fresh(line, used)
                taken.add(ids[j])
        self._used.update(taken)
        window = new[edit.first:stop]
        if all(ln.line_id == ids[j] for j, ln in enumerate(window, start=edit.first)):
            return after
        changed = [ln if ln.line_id == ids[j] else replace(ln, line_id=ids[j])
                   for j, ln in enumerate(window, start=edit.first)]
        return replace(after, lines=Pieces.splice(new, edit.first, stop, changed, Shift(), move_line))

    def _recall(self, key: Key, in_use: Callable[[str], bool]) -> str | None:
        for pool in (self._retired, self._orphans):
            candidates = pool.get(key, [])
            while candidates:
                line_id = candidates.pop()
                if not in_use(line_id):
                    return line_id
        return None

    def _fresh(self, line: Line, used: Callable[[str], bool]) -> str:
        """The content id when this project never used it, else the next free occurrence of it."""
        occurrence = 0
        while True:
            line_id = make_line_id(line.speaker, line.text, occurrence)
            if not used(line_id):
                return line_id
            occurrence += 1
