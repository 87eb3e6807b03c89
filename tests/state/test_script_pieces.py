"""`Pieces` reads like the list it stands for, however many splices made it, and the count of its pieces
stays bounded."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from s2studio.state import script_pieces
from s2studio.state.script_pieces import Pieces, Shift


@dataclass(frozen=True)
class Item:
    name: str
    at: int


def move(item: Item, by: Shift) -> Item:
    return Item(item.name, item.at + by.chars)


@pytest.mark.parametrize("merge_from", [4, 256])
def test_many_splices_read_like_the_list_they_stand_for(monkeypatch, merge_from: int) -> None:
    monkeypatch.setattr(script_pieces, "MERGE_FROM", merge_from)
    monkeypatch.setattr(script_pieces, "SMALL", 8)
    rng = random.Random(7)
    model = [Item(f"i{k}", k) for k in range(300)]
    pieces: object = tuple(model)
    for step in range(400):
        first = rng.randrange(len(model) + 1)
        end = min(len(model), first + rng.randrange(4))
        new = [Item(f"s{step}.{k}", rng.randrange(1000)) for k in range(rng.randrange(4))]
        by = Shift(rng.randrange(-3, 4))
        model = model[:first] + new + [move(it, by) for it in model[end:]]
        pieces = Pieces.splice(pieces, first, end, new, by, move)
        assert len(pieces) == len(model)
        if step % 50 == 0 or step == 399:
            assert pieces.moved("at", "chars") == tuple(it.at for it in model)  # before any item is made
            assert list(pieces) == model and pieces == tuple(model)
            assert pieces.unmoved("name") == tuple(it.name for it in model)
            assert [pieces[i] for i in range(-1, -len(model), -37)] == model[-1:-len(model):-37]
            assert list(pieces[10:20]) == model[10:20]
    assert len(pieces._pieces) <= 4 * merge_from + 1
