"""The lines (or warnings) of a script after edits, without rewriting those the edits only moved.

An edit near the top of a book moves every line below it: their offsets, row numbers and indices change,
their text does not. Making 10,000 new `Line`s for that after every pause in typing costs more than the
parse it saves. So a reparsed script keeps its lines as pieces: runs of an earlier parse's lines, each run
with what the edits since then added before it (`Shift`). A line is made, moved, when it is first read,
and kept; what edits never change (ids, speakers) is read from the earlier parse without making a line.

Pure Python; `Pieces` is a read-only sequence like a tuple, equal to a tuple of the same items.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain
from operator import attrgetter
from typing import Any, Generic, NamedTuple, TypeVar, overload

T = TypeVar("T")

MERGE_FROM = 256
"""Pieces beyond this many: runs of small pieces are made into one."""
SMALL = 512


class Shift(NamedTuple):
    """What edits added before an item: characters (its offsets), rows (its row number), lines (its index)."""

    chars: int = 0
    rows: int = 0
    indices: int = 0

    def __add__(self, other: object) -> Shift:  # type: ignore[override] - a sum of shifts, not a concatenation
        assert isinstance(other, Shift)
        return Shift(self.chars + other.chars, self.rows + other.rows, self.indices + other.indices)

    def __bool__(self) -> bool:
        return bool(self.chars or self.rows or self.indices)


@dataclass(eq=False)
class _Source(Generic[T]):
    """Items as one parse made them; never changed."""

    items: tuple[T, ...]
    columns: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    def column(self, name: str) -> tuple[Any, ...]:
        got = self.columns.get(name)
        if got is None:
            got = self.columns[name] = tuple(map(attrgetter(name), self.items))
        return got


class _Piece(NamedTuple):
    source: _Source
    lo: int
    hi: int
    shift: Shift


class Pieces(Sequence[T]):
    """Items of earlier parses, each moved by its piece's `Shift` when read (module docstring)."""

    __slots__ = ("_pieces", "_starts", "_move", "_made", "_columns")

    def __init__(self, pieces: Sequence[_Piece], move: Callable[[T, Shift], T]) -> None:
        self._pieces = tuple(p for p in pieces if p.hi > p.lo)
        self._starts = (0, *accumulate(p.hi - p.lo for p in self._pieces))
        self._move = move
        self._made: dict[int, T] = {}
        self._columns: dict[str, tuple[Any, ...]] = {}

    @staticmethod
    def splice(items: Sequence[T], first: int, end: int, new: Sequence[T], after: Shift,
               move: Callable[[T, Shift], T]) -> Pieces[T]:
        """`items` with `items[first:end]` replaced by `new`, and `after` added to every item after them."""
        pieces = [*_cut(items, 0, first, Shift()), _Piece(_Source(tuple(new)), 0, len(new), Shift()),
                  *_cut(items, end, len(items), after)]
        if len(pieces) > MERGE_FROM:
            pieces = _merge_small(pieces, move)
        return Pieces(pieces, move)

    def unmoved(self, name: str) -> tuple[Any, ...]:
        """Every item's attribute `name`, one that edits never move (a line's id, its speaker)."""
        got = self._columns.get(name)
        if got is None:
            got = self._columns[name] = tuple(chain.from_iterable(p.source.column(name)[p.lo:p.hi]
                                                                  for p in self._pieces))
        return got

    def moved(self, name: str, by: str) -> tuple[int, ...]:
        """Every item's number `name` moved by the `by` field of its piece's shift (a line's row: its
        `source_line` plus the rows edits added above it), without making the items."""
        key = f"{name}+{by}"
        got = self._columns.get(key)
        if got is None:
            runs = []
            for p in self._pieces:
                run, add = p.source.column(name)[p.lo:p.hi], getattr(p.shift, by)
                runs.append(tuple(v + add for v in run) if add else run)
            got = self._columns[key] = tuple(chain.from_iterable(runs))
        return got

    def __len__(self) -> int:
        return self._starts[-1]

    @overload
    def __getitem__(self, i: int) -> T: ...

    @overload
    def __getitem__(self, i: slice) -> Pieces[T]: ...

    def __getitem__(self, i: int | slice) -> T | Pieces[T]:
        n = len(self)
        if isinstance(i, slice):
            lo, hi, step = i.indices(n)
            if step != 1:
                return tuple(self)[i]  # type: ignore[return-value]
            return Pieces(list(_cut(self, lo, max(lo, hi), Shift())), self._move)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("piece index out of range")
        made = self._made.get(i)
        if made is None:
            k = _find(self._starts, i)
            piece = self._pieces[k]
            item = piece.source.items[piece.lo + i - self._starts[k]]
            made = self._made[i] = self._move(item, piece.shift) if piece.shift else item
        return made

    def __iter__(self) -> Iterator[T]:
        for k, piece in enumerate(self._pieces):
            if not piece.shift:
                yield from piece.source.items[piece.lo:piece.hi]
                continue
            start = self._starts[k]
            for j in range(piece.hi - piece.lo):
                yield self[start + j]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Pieces({list(self)!r})"


def _find(starts: Sequence[int], i: int) -> int:
    """The piece holding item `i`: the last start <= i."""
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= i:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _cut(items: Sequence[T], lo: int, hi: int, add: Shift) -> Iterator[_Piece]:
    """The pieces of `items[lo:hi]`, each with `add` added to its shift."""
    if hi <= lo:
        return
    if not isinstance(items, Pieces):
        yield _Piece(_Source(tuple(items)), lo, hi, add)
        return
    for k, piece in enumerate(items._pieces):
        start, end = items._starts[k], items._starts[k + 1]
        a, b = max(lo, start), min(hi, end)
        if a < b:
            yield _Piece(piece.source, piece.lo + a - start, piece.lo + b - start, piece.shift + add)


def _merge_small(pieces: list[_Piece], move: Callable[[Any, Shift], Any]) -> list[_Piece]:
    """Runs of small pieces made into one piece each (their items moved now), so that the count of pieces
    stays bounded however many edits a session makes."""
    out: list[_Piece] = []
    run: list[_Piece] = []

    def flush() -> None:
        if len(run) == 1:
            out.append(run[0])
        elif run:
            items = tuple(move(it, p.shift) if p.shift else it for p in run for it in p.source.items[p.lo:p.hi])
            out.append(_Piece(_Source(items), 0, len(items), Shift()))
        run.clear()

    for piece in pieces:
        if piece.hi - piece.lo < SMALL:
            run.append(piece)
            if sum(p.hi - p.lo for p in run) >= SMALL:
                flush()
        else:
            flush()
            out.append(piece)
    flush()
    if len(out) > 4 * MERGE_FROM:  # many large pieces: one, made now
        items = tuple(move(it, p.shift) if p.shift else it for p in out for it in p.source.items[p.lo:p.hi])
        out = [_Piece(_Source(items), 0, len(items), Shift())]
    return out
