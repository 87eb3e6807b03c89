"""A capture of the document since an earlier one reads the lines changed since, not every line of a book, and
holds what a capture from scratch holds after any sequence of changes."""

from __future__ import annotations

import numpy as np

from s2studio.state.project import Project, Take
from s2studio.state.project_journal import capture
from project_changes import RandomChanges


def take(take_id: str, line_id: str) -> Take:
    return Take(take_id, line_id, f"text of {take_id}", np.zeros(100, np.float32))


def book(lines: int) -> Project:
    p = Project(script="", line_ids=[f"l{i}" for i in range(lines)])
    for i in range(lines):
        p.add_take(take(f"t{i}", f"l{i}"))
    return p


def test_a_capture_since_an_earlier_one_reads_only_the_lines_changed_since():
    p = book(1000)
    before = capture(p)
    behind = take("behind", "l5")
    p.lines["l5"].takes.append(behind)  # not through the project: a capture that reads every line sees it
    p.add_take(take("new7", "l7"))
    p.pick("l9", 0)
    p.delete_take("l11", "t11")  # its only take: the line goes
    p.add_take(take("new2000", "l2000"))  # a line that had none
    now = capture(p, since=before)
    assert now.lines["l5"] == before.lines["l5"] and behind in capture(p).lines["l5"][1]
    assert now.lines["l7"] == (1, (before.lines["l7"][1][0], p.lines["l7"].takes[1]))
    assert "l11" not in now.lines and now.lines["l2000"][1][0].take_id == "new2000"
    assert len(now.lines) == 1000 and now.edits_seen == p.edits.count == 1004
    assert capture(p, since=now).lines == now.lines  # nothing changed since: the same lines
    assert p.edits.since(now.edits_seen) == [] and p.edits.since(before.edits_seen) == ["l2000", "l11", "l9", "l7"]


def test_a_capture_since_an_earlier_one_holds_what_a_capture_from_scratch_holds():
    p = book(50)
    changes = RandomChanges(3, 60, take)
    state = capture(p)
    for round_ in range(40):
        changes.round(p, 6, round_)
        state = capture(p, "/x/book.s2proj", since=state)
        whole = capture(p, "/x/book.s2proj")
        assert state.lines == whole.lines and state == whole, f"round {round_}"


def test_a_capture_since_another_projects_or_a_keyed_one_reads_every_line():
    p, other = book(20), book(20)
    of_other = capture(other)
    assert capture(p, since=of_other).lines == capture(p).lines  # the other's lines are not taken
    keyed = capture(p).keyed()
    p.lines["l3"].takes.append(take("behind", "l3"))
    assert capture(p, since=keyed).lines["l3"][1][-1].take_id == "behind"
