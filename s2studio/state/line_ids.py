"""Line identity: ids that survive edits, so takes belong to a line and not to a text (design.md §6).

A script's first ids are the parser's content ids (`script.make_line_id`): a new script, and a project
saved before ids were stored, start with them. From then on `LineIds.carry` maps the lines before an
edit to the lines after it with a line diff (difflib's `SequenceMatcher` over (speaker, text)):

- lines the diff finds equal keep their ids;
- in a replaced block, old and new lines are paired by text similarity in order (an edited line, a
  split line's larger half, a joined line's larger part), a one-line block always pairs: those keep
  their ids, whatever changed in them;
- an old line left unpaired is retired; a new line left unpaired takes back the id of a retired line
  (or of takes no script line owns) with the same speaker and text, so Undo of a delete, or a moved
  line, finds its takes again; otherwise it gets an id this project never used (not even by takes of
  deleted lines).

Pure Python, no Qt: the window calls it after every (debounced) edit.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable, Sequence

from s2studio.state.script import Line, Script, make_line_id

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

    def remember(self, ids: Iterable[str]) -> None:
        """Ids now in use elsewhere (new takes, the first ids of a script)."""
        self._used.update(ids)

    def carry(self, before: Script, after: Script) -> Script:
        """`after` (a fresh parse) with the ids of `before`'s lines carried over (module docstring)."""
        old, new = before.lines, after.lines
        self._used.update(before.line_ids)
        ids: list[str | None] = [None] * len(new)
        paired_old: set[int] = set()
        matcher = difflib.SequenceMatcher(None, [ln.key for ln in old], [ln.key for ln in new], autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                for k in range(i2 - i1):
                    ids[j1 + k] = old[i1 + k].line_id
                    paired_old.add(i1 + k)
            elif tag == "replace":
                for i, j in _align(old[i1:i2], new[j1:j2]):
                    ids[j1 + j] = old[i1 + i].line_id
                    paired_old.add(i1 + i)
        for i, line in enumerate(old):
            if i not in paired_old:
                self._retired.setdefault(line.key, []).append(line.line_id)
        taken = {i for i in ids if i is not None}
        for j, line in enumerate(new):
            if ids[j] is None:
                ids[j] = self._recall(line.key, taken) or self._fresh(line, taken)
                taken.add(ids[j])
        self._used.update(taken)
        return after.with_ids([i for i in ids if i is not None])

    def _recall(self, key: Key, taken: set[str]) -> str | None:
        for pool in (self._retired, self._orphans):
            candidates = pool.get(key, [])
            while candidates:
                line_id = candidates.pop()
                if line_id not in taken:
                    return line_id
        return None

    def _fresh(self, line: Line, taken: set[str]) -> str:
        """The content id when this project never used it, else the next free occurrence of it."""
        occurrence = 0
        while True:
            line_id = make_line_id(line.speaker, line.text, occurrence)
            if line_id not in self._used and line_id not in taken:
                return line_id
            occurrence += 1
