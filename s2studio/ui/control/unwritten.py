"""The finished takes whose audio is still in memory because their files are not written yet, and the hold on
the engine when there are too many (design.md §2, §6). QtCore only.

A take lives in its files once they are written; until then its samples are in memory. An engine faster than the
writer (an instant one, or a fast GPU beside a slow disk) would otherwise leave the takes of a whole book waiting
in memory: past `MAX_UNWRITTEN` of them the store says it is `behind`, the engine's events are held (the engine
waits for room for them), and the render goes on at the writer's pace until the writer has caught up."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from s2studio.state.project import Take

MAX_UNWRITTEN = 128
"""Takes in memory waiting for their files before the engine waits (two of the writer's batches; tens of MB)."""


class UnwrittenTakes(QObject):
    behind = Signal(bool)
    """True when `MAX_UNWRITTEN` takes wait for their files while the writer is at work, False when it caught up
    (or stopped: a failed write leaves its takes in memory, and a render must not wait for a writer that is not
    writing)."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._takes: dict[str, Take] = {}
        self.is_behind = False

    def __len__(self) -> int:
        return len(self._takes)

    def add(self, takes: list[Take], writing: bool) -> None:
        """New takes (their write is queued: `writing`)."""
        self._takes.update((t.take_id, t) for t in takes)
        self._tell(writing)

    def written(self, writing: bool) -> None:
        """A job of the writer ended (`writing`: another is queued or running): forget the takes that are in
        their files now, or deleted."""
        self._takes = {k: t for k, t in self._takes.items() if t.files is None and not t.held}
        self._tell(writing)

    def clear(self) -> None:
        """Another project is open: its takes are not waited for."""
        self._takes = {}
        self._tell(False)

    def _tell(self, writing: bool) -> None:
        behind = writing and len(self._takes) >= MAX_UNWRITTEN
        if behind != self.is_behind:
            self.is_behind = behind
            self.behind.emit(behind)
