"""The take history of a line: every take kept, one picked, delete and restore keep the pick on the
same take."""

from __future__ import annotations

import numpy as np
import pytest

from s2studio.state.project import Project, Take, now_iso


def take(take_id: str, line_id: str = "l1") -> Take:
    return Take(take_id, line_id, "Hi.", np.zeros(44100, np.float32), np.zeros((10, 1), np.int64), 1,
                created=now_iso())


def test_new_takes_are_picked_unless_asked_not_to() -> None:
    p = Project()
    p.add_take(take("a"))
    p.add_take(take("b"))
    assert p.current("l1").take_id == "b"
    p.add_take(take("c"), pick=False)
    assert p.current("l1").take_id == "b" and [t.take_id for t in p.takes_of("l1")] == ["a", "b", "c"]
    assert p.current("l1").seconds == 1.0
    assert p.takes_of("nope") == [] and p.current("nope") is None
    with pytest.raises(IndexError):
        p.pick("l1", 3)


def test_delete_keeps_the_pick_on_its_take_and_restore_puts_it_back() -> None:
    p = Project()
    for t in "abc":
        p.add_take(take(t))
    p.pick("l1", 2)
    at = p.delete_take("l1", "a")
    assert at == 0 and p.current("l1").take_id == "c"
    p.restore_take(take("a"), at, picked=False)
    assert [t.take_id for t in p.takes_of("l1")] == ["a", "b", "c"] and p.current("l1").take_id == "c"
    p.pick("l1", 1)
    gone = p.takes_of("l1")[1]
    at = p.delete_take("l1", "b")  # the picked take: the one before it is heard
    assert p.current("l1").take_id == "a"
    p.restore_take(gone, at, picked=True)
    assert p.current("l1").take_id == "b"
    for t in "abc":
        p.delete_take("l1", t)
    assert "l1" not in p.lines


def test_created_is_iso_8601_with_an_offset() -> None:
    from datetime import datetime

    stamp = now_iso()
    assert datetime.fromisoformat(stamp).utcoffset() is not None
