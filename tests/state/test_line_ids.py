"""Line ids survive edits: a line diff carries them through edits, inserts, deletes, moves, splits and
joins; deleted lines give their ids back to an identical line; fresh ids are never reused."""

from __future__ import annotations

from s2studio.state.line_ids import LineIds, first_ids
from s2studio.state.script import Script, make_line_id, parse_script

SRC = "Alice: One.\nBob: Two.\nAlice: Three.\nBob: Four.\n"


def carried(ids: LineIds, before: Script, text: str) -> Script:
    return ids.carry(before, parse_script(text))


def test_first_ids_are_content_ids_or_the_saved_ones() -> None:
    s = parse_script(SRC)
    assert s.line_ids[0] == make_line_id("Alice", "One.", 0)
    assert first_ids(s, None) is s
    assert first_ids(s, ["w", "x", "y", "z"]).line_ids == ("w", "x", "y", "z")
    assert first_ids(s, ["w", "x"]) is s  # ids that do not fit the script: the content ids
    assert first_ids(s, ["w", "w", "y", "z"]) is s


def test_an_edited_line_keeps_its_id_and_the_others_keep_theirs() -> None:
    ids = LineIds()
    s0 = parse_script(SRC)
    s1 = carried(ids, s0, SRC.replace("Three.", "Three, edited."))
    assert s1.line_ids == s0.line_ids
    s2 = carried(ids, s1, s1.source.replace("Bob: Two.", "Carol: Two."))  # a new speaker, same line
    assert s2.line_ids == s0.line_ids


def test_inserting_above_and_deleting_keep_every_other_id() -> None:
    ids = LineIds()
    s0 = parse_script(SRC)
    s1 = carried(ids, s0, "Carol: New first line.\n" + SRC)
    assert s1.line_ids[1:] == s0.line_ids
    assert s1.line_ids[0] not in s0.line_ids
    s2 = carried(ids, s1, "Carol: New first line.\nAlice: One.\nAlice: Three.\nBob: Four.\n")
    assert s2.line_ids == (s1.line_ids[0], s0.line_ids[0], s0.line_ids[2], s0.line_ids[3])


def test_undo_of_a_delete_and_a_moved_line_find_their_ids_again() -> None:
    ids = LineIds()
    s0 = parse_script(SRC)
    s1 = carried(ids, s0, "Alice: One.\nAlice: Three.\nBob: Four.\n")
    s2 = carried(ids, s1, SRC)  # Undo
    assert s2.line_ids == s0.line_ids
    moved = carried(ids, s2, "Alice: One.\nAlice: Three.\nBob: Four.\nBob: Two.\n")
    assert moved.line_ids == (s0.line_ids[0], s0.line_ids[2], s0.line_ids[3], s0.line_ids[1])


def test_splitting_and_joining_keep_the_ids_with_their_text() -> None:
    ids = LineIds()
    s0 = parse_script("Alice: Hello there. How are you today, my friend?\nBob: Fine.\n")
    split = carried(ids, s0, "Alice: Hello there.\nHow are you today, my friend?\nBob: Fine.\n")
    # the longer half keeps the line (and its takes); the other half is a new line
    assert split.line_ids[1] == s0.line_ids[0] and split.line_ids[2] == s0.line_ids[1]
    assert split.line_ids[0] not in s0.line_ids
    joined = carried(ids, split, s0.source)  # joined again: the same ids as before the split
    assert joined.line_ids == s0.line_ids
    halves = parse_script("Alice: Good morning to you.\nGood evening to you.\n")
    both = carried(ids, halves, "Alice: Good morning to you. Good evening to you.\n")
    assert both.line_ids == (halves.line_ids[0],)  # a tie: the first part keeps its id


def test_fresh_ids_are_never_ids_the_project_used() -> None:
    taken = make_line_id("Alice", "Five.", 0)
    ids = LineIds(known=[taken])  # a take of a deleted line holds this id
    s0 = parse_script(SRC)
    s1 = carried(ids, s0, SRC + "Alice: Five.\n")
    assert s1.line_ids[4] == make_line_id("Alice", "Five.", 1)
    s2 = carried(ids, s1, SRC)
    s3 = carried(ids, s2, SRC + "Alice: Five, again.\n")  # edited before it came back: a fresh id
    assert s3.line_ids[4] not in {taken, s1.line_ids[4]}


def test_takes_no_line_owns_give_their_id_to_an_identical_new_line() -> None:
    ids = LineIds(known=["old-id"], orphans={("Bob", "Gone."): ["old-id"]})
    s0 = parse_script(SRC)
    s1 = carried(ids, s0, SRC + "Bob: Gone.\n")
    assert s1.line_ids[4] == "old-id"
    s2 = carried(ids, s1, s1.source + "Bob: Gone.\n")  # a second copy: the id is in use, so a fresh one
    assert s2.line_ids[4] == "old-id" and s2.line_ids[5] != "old-id"


def test_identical_lines_and_a_whole_rewrite() -> None:
    ids = LineIds()
    s0 = parse_script("A: x.\nA: x.\nA: x.\n")
    assert len(set(s0.line_ids)) == 3
    s1 = carried(ids, s0, "A: x.\nA: x.\n")
    assert set(s1.line_ids) < set(s0.line_ids)
    s2 = carried(ids, s1, "B: Completely different.\nB: Words here.\n")  # as many lines: edits in place
    assert s2.line_ids == s1.line_ids
    big = "\n".join(f"A: line {i}." for i in range(200))
    s3 = carried(ids, parse_script(big), big.replace("line 7.", "line seven."))
    assert s3.line_ids == parse_script(big).line_ids
