"""Property tests: parsing never raises, serialize -> parse keeps every line and heading."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from s2studio.state.script import parse_script, serialize

_ALPHABET = st.sampled_from(list("ab Z:#[]<>|\n\r\t.!?。：é0") + ["<|speaker:1|>", "Alice: ", "[pause]", "\u2028"])
script_text = st.one_of(st.text(max_size=200), st.lists(_ALPHABET, max_size=60).map("".join))


def _content(s):
    return ([(ln.speaker, ln.text, tuple(t.name for t in ln.tags)) for ln in s.lines],
            [(h.text, h.level) for h in s.headings])


@settings(max_examples=300, deadline=None)
@given(script_text, st.one_of(st.none(), st.lists(st.sampled_from(["Alice", "Narrator", "Speaker 1"]))))
def test_parse_never_raises_and_offsets_hold(text: str, known) -> None:
    s = parse_script(text, known)
    for ln in s.lines:
        assert text[ln.start:ln.end] == ln.text and ln.text.strip() == ln.text and ln.text
        for tag in ln.tags:
            assert text[tag.start] == "[" and text[tag.end - 1] == "]"
    for w in s.warnings:
        assert 0 <= w.start < w.end <= len(text)
    assert len({ln.line_id for ln in s.lines}) == len(s.lines)


@settings(max_examples=300, deadline=None)
@given(script_text)
def test_serialize_round_trip(text: str) -> None:
    s = parse_script(text)
    out = serialize(s)
    again = parse_script(out)
    assert _content(again) == _content(s)
    assert [ln.line_id for ln in again.lines] == [ln.line_id for ln in s.lines]
    assert serialize(again) == out


@settings(max_examples=200, deadline=None)
@given(script_text)
def test_nothing_typed_is_dropped(text: str) -> None:
    """Every non-space character is in a line, a heading, a name prefix or a raw speaker tag."""
    s = parse_script(text)
    covered = [False] * len(text)
    for ln in s.lines:
        covered[ln.start:ln.end] = [True] * (ln.end - ln.start)
    for h in s.headings:
        covered[h.start:h.end] = [True] * (h.end - h.start)
    import re

    from s2studio.state.script import match_name
    pos = 0
    for raw in text.split("\n"):
        m = match_name(raw)
        if m is not None and not raw.lstrip().startswith("#"):
            covered[pos:pos + m.end()] = [True] * m.end()
        for t in re.finditer(r"<\|speaker:\d+\|>", raw):
            covered[pos + t.start():pos + t.end()] = [True] * (t.end() - t.start())
        pos += len(raw) + 1
    missed = [text[i] for i, c in enumerate(covered) if not c and not text[i].isspace()]
    assert missed == []
