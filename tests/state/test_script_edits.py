"""Reparsing only what an edit touched gives exactly what a whole parse and a whole id carry give: the
same lines, offsets, headings, warnings and speakers, and the same ids, edit after edit."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from s2studio.state.line_ids import LineIds
from s2studio.state.script import Script, parse_script
from s2studio.state.script_edits import Change, Edit, ScriptParser

PIECES = ["Alice: ", "Bob: ", "Carol：", "# Chapter ", "## ", "[pause]", "[sigh", "]", "<|speaker:1|>", "<|x|>",
          "Hello there.", "one two", " ", "\n", "\n", "\n", "\r\n", ":", "？", "a", "Z", "é", "0", "\t"]
ROWS = ["hi\n", "Alice: hi\n", "hi\nhi\n", "Bob: hi\n"]
"""Whole rows, often the same: repeated lines are where a diff's choices show."""
text = st.lists(st.sampled_from(PIECES + ROWS), max_size=40).map("".join)
KNOWN = st.sampled_from([None, ("Alice", "Narrator"), ("Alice", "Bob", "Narrator", "Speaker 1"), ("Alice",)])


@st.composite
def edits(draw):  # (where, how many characters go, what comes), `where` as a fraction of the text
    return draw(st.lists(st.tuples(st.floats(0, 1), st.integers(0, 12), text), min_size=1, max_size=8))


def apply(source: str, where: float, gone: int, came: str) -> str:
    at = int(where * len(source))
    return source[:at] + came + source[at + gone:]


def without_ids(script: Script) -> Script:
    return replace(script, lines=tuple(replace(ln, line_id="") for ln in script.lines))


@settings(max_examples=400, deadline=None)
@given(text, edits(), st.lists(KNOWN, min_size=8, max_size=8))
def test_a_reparse_equals_a_whole_parse_and_carry(first: str, steps, knowns) -> None:
    whole_ids, part_ids = LineIds(), LineIds()
    whole = parse_script(first, knowns[0])
    parser = ScriptParser()
    part = parser.parse(first, knowns[0])
    assert part == whole
    whole_ids.remember(whole.line_ids)
    part_ids.remember(part.line_ids)
    source = first
    for (where, gone, came), known in zip(steps, knowns[1:], strict=False):
        source = apply(source, where, gone, came)
        parsed, edit = parser.reparse(part, source, known)
        assert parsed.line_rows == tuple(ln.source_line for ln in parse_script(source, known).lines)
        assert without_ids(parsed) == without_ids(parse_script(source, known))
        before, part = part, part_ids.carry(part, parsed, edit)
        whole = whole_ids.carry(whole, parse_script(source, known))
        assert part == whole
        change = Change.between(before, part, edit)  # what views refresh: every line that changed
        for line in part.lines:
            if line.line_id not in change.touched:
                old = before.line(line.line_id)
                assert old is not None and old.key == line.key
        assert set(change.gone) == set(before.line_ids) - set(part.line_ids)


def test_an_edit_touches_its_rows_and_the_speakers_it_carries_to() -> None:
    rows = [f"Line {i} of the narrator." for i in range(100)]
    rows[50] = "Bob: the middle."
    parser = ScriptParser()
    before = parser.parse("\n".join(rows), None)
    rows[10] = "Line ten, edited."
    after, edit = parser.reparse(before, "\n".join(rows), None)
    assert edit == Edit(10, 11, 11)
    assert after.lines[:10] == before.lines[:10] and all(a is b for a, b in zip(after.lines[:10], before.lines))
    rows[10] = "Alice: line ten."  # every line down to Bob's now is Alice's
    again, edit = parser.reparse(after, "\n".join(rows), None)
    assert edit == Edit(10, 51, 51)  # down to Bob's line, which starts with another speaker than before
    assert {ln.speaker for ln in again.lines[10:50]} == {"Alice"} and again.lines[50].speaker == "Bob"
    assert again == replace(parse_script("\n".join(rows)), lines=again.lines)


def test_a_space_typed_in_a_book_makes_and_compares_only_its_own_line(monkeypatch) -> None:
    """A space at a line's end leaves every key as it was: carrying ids must not walk the lines below it."""
    from s2studio.state import line_ids, script_edits

    rows = [f"Alice: line {i} of the book." for i in range(2000)]
    parser, ids = ScriptParser(), LineIds()
    script = parser.parse("\n".join(rows), None)
    ids.remember(script.line_ids)
    rows[1000] += " "
    parsed, edit = parser.reparse(script, "\n".join(rows), None)
    made: list[int] = []

    def counted(line, by):  # noqa: ANN001, ANN202
        made.append(line.index)
        return script_edits.move_line(line, by)

    monkeypatch.setattr(line_ids, "move_line", counted)
    monkeypatch.setattr(script_edits, "move_line", counted)
    moved_before = len(parsed.lines._made)  # type: ignore[attr-defined]
    carried = ids.carry(script, parsed, edit)
    assert carried.line_ids == script.line_ids
    assert len(made) + len(parsed.lines._made) - moved_before <= 4  # type: ignore[attr-defined]
