"""Script parsing: speakers, positions, warnings, line ids, serialization."""

from __future__ import annotations

from pathlib import Path

import pytest

from s2studio.errors import UserError
from s2studio.state.script import (
    MAX_SCRIPT_BYTES, NARRATOR, make_line_id, parse_script, read_script, serialize,
)
from s2studio.state.tags import complete, find_tags, load_palette, palette_tags

SRC = (
    "# Chapter one\n"
    "Alice: Did you hear that? [whispering] Someone is at the door.\n"
    "Bob: [laughing] It's only the cat.\n"
    "And it purrs.\n"
)


def test_names_headings_continuation_and_positions() -> None:
    s = parse_script(SRC)
    assert [(ln.speaker, ln.text, ln.source_line) for ln in s.lines] == [
        ("Alice", "Did you hear that? [whispering] Someone is at the door.", 2),
        ("Bob", "[laughing] It's only the cat.", 3),
        ("Bob", "And it purrs.", 4),
    ]
    assert s.speakers == ("Alice", "Bob")
    assert [(h.text, h.level, h.start, h.end) for h in s.headings] == [("Chapter one", 1, 0, 13)]
    for ln in s.lines:
        assert SRC[ln.start:ln.end] == ln.text
    tag = s.lines[0].tags[0]
    assert (tag.name, SRC[tag.start:tag.end]) == ("whispering", "[whispering]")
    assert [ln.index for ln in s.lines] == [0, 1, 2]
    assert s.warnings == ()
    assert s.source == SRC


def test_text_before_any_name_goes_to_the_narrator() -> None:
    s = parse_script("Once upon a time.\nAlice: Hi.")
    assert [(ln.speaker, ln.text) for ln in s.lines] == [(NARRATOR, "Once upon a time."), ("Alice", "Hi.")]


def test_name_alone_sets_speaker_of_following_lines() -> None:
    s = parse_script("Bob:\nFirst paragraph.\n\nSecond paragraph.")
    assert [(ln.speaker, ln.text) for ln in s.lines] == [("Bob", "First paragraph."), ("Bob", "Second paragraph.")]


def test_raw_speaker_tags_split_lines_and_keep_text_before_the_first() -> None:
    src = "Lead in <|speaker:0|>Hi.<|speaker:1|> [excited] Hello!"
    s = parse_script(src)
    assert [(ln.speaker, ln.text) for ln in s.lines] == [
        (NARRATOR, "Lead in"), ("Speaker 0", "Hi."), ("Speaker 1", "[excited] Hello!")]
    assert [src[ln.start:ln.end] for ln in s.lines] == ["Lead in", "Hi.", "[excited] Hello!"]
    assert {ln.source_line for ln in s.lines} == {1}


def test_not_names() -> None:
    s = parse_script("At 10:30 we left.\nThe rule was simple: run.\nSee http://x.org now.\n10: ten")
    assert {ln.speaker for ln in s.lines} == {NARRATOR}
    assert len(s.lines) == 4


def test_full_width_colon_names_a_speaker() -> None:
    s = parse_script("アリス：こんにちは")
    assert [(ln.speaker, ln.text) for ln in s.lines] == [("アリス", "こんにちは")]


def test_warnings_with_positions() -> None:
    src = "Alice: a [b c\nCarol: x ] y\nAlice: [a][b][c][d] Four. [e] fine.\n[sigh]\nAlice: [] hi <|im_end|>"
    s = parse_script(src, known_speakers=["Alice"])
    got = [(w.kind, src[w.start:w.end]) for w in s.warnings]
    assert got == [
        ("unbalanced_bracket", "["),
        ("unknown_speaker", "Carol"),
        ("unbalanced_bracket", "]"),
        ("too_many_tags", "[a][b][c][d]"),
        ("only_tags", "[sigh]"),
        ("empty_tag", "[]"),
        ("special_token", "<|im_end|>"),
    ]
    assert s.warnings[0].start == 9
    # the tag-only line is still a line: nothing typed is dropped
    assert [ln.text for ln in s.lines][3] == "[sigh]"


def test_an_unknown_narrator_is_warned_on_each_narrated_line_as_any_unknown_speaker_is() -> None:
    s = parse_script("one\nAlice: hi\ntwo\n", known_speakers=["Alice"])
    assert [w.kind for w in s.warnings] == ["unknown_speaker"]  # "two" is Alice's: the speaker carries
    s = parse_script("one\ntwo\n", known_speakers=["Alice"])
    assert [w.kind for w in s.warnings] == ["unknown_speaker"] * 2
    assert [w.start for w in s.warnings] == [0, 4] and "Narrator" in s.warnings[1].message


def test_line_ids_are_stable_across_unrelated_edits() -> None:
    a = parse_script("Alice: Hi.\nBob: Yo.\nAlice: Hi.")
    b = parse_script("# new heading\nBob: Inserted.\n\nAlice: Hi.\nBob: Yo.\nAlice: Hi.")
    ids_a = [ln.line_id for ln in a.lines]
    assert ids_a[0] == make_line_id("Alice", "Hi.", 0) and ids_a[2] == make_line_id("Alice", "Hi.", 1)
    assert ids_a[2].endswith("-1") and len(set(ids_a)) == 3
    assert [ln.line_id for ln in b.lines][1:] == ids_a
    c = parse_script("Alice: Hi!\nBob: Yo.")
    assert c.lines[0].line_id != ids_a[0] and c.lines[1].line_id == ids_a[1]


def test_serialize_is_canonical() -> None:
    s = parse_script("intro\n# H\nBob:\n  text one \n<|speaker:2|># not a heading\nBob: Carl: hi")
    out = serialize(s)
    assert out == "intro\n# H\nBob: text one\nSpeaker 2: # not a heading\nBob: Carl: hi\n"
    again = parse_script(out)
    assert [(ln.speaker, ln.text) for ln in again.lines] == [(ln.speaker, ln.text) for ln in s.lines]
    assert serialize(parse_script("")) == ""


def test_crlf_is_not_part_of_the_text() -> None:
    s = parse_script("Alice: Hi.\r\nBob: Yo.\r\n")
    assert [(ln.speaker, ln.text) for ln in s.lines] == [("Alice", "Hi."), ("Bob", "Yo.")]


def test_find_tags_offsets() -> None:
    tags, problems = find_tags("a [x] [ y ]", base=10)
    assert [(t.name, t.start, t.end) for t in tags] == [("x", 12, 15), ("y", 16, 21)]
    assert problems == []
    tags, problems = find_tags("] a [b [c] [] d [", base=100)
    assert [(t.name, t.start, t.end) for t in tags] == [("c", 107, 110)]
    assert [p[:3] for p in problems] == [(100, 101, "unbalanced_bracket"), (104, 105, "unbalanced_bracket"),
                                         (111, 113, "empty_tag"), (116, 117, "unbalanced_bracket")]
    assert find_tags("no brackets at all", 5) == ((), [])


def test_too_many_tags_counts_per_sentence() -> None:
    spread = parse_script("Alice: [a] One [b]. Two [c] [d].\n")
    assert [w.kind for w in spread.warnings] == []
    packed = parse_script("Alice: One [a] [b]. Two [c] [d] [e] [f].\n")
    assert [(w.kind, packed.source[w.start:w.end]) for w in packed.warnings] == [("too_many_tags", "[c] [d] [e] [f]")]


def test_read_script_refuses_big_and_binary(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_bytes(b"a" * (MAX_SCRIPT_BYTES + 1))
    with pytest.raises(UserError, match="MB"):
        read_script(big)
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"\xff\xfe\x00abc")
    with pytest.raises(UserError, match="not UTF-8"):
        read_script(binary)
    with pytest.raises(UserError, match="cannot read"):
        read_script(tmp_path / "missing.txt")
    ok = tmp_path / "ok.txt"
    ok.write_bytes("\ufeffAlice: Hi.".encode())
    assert read_script(ok) == "Alice: Hi."


def test_palette() -> None:
    cats = load_palette()
    assert [c.name for c in cats] == ["Emotion", "Delivery", "Non-verbal", "Pause", "Volume"]
    tags = palette_tags()
    assert "pause" in tags and "whispering" in tags and len(tags) == len(set(tags))
    assert complete("wh")[:2] == ["whisper", "whispering"]
    assert "short pause" in complete("pause")


def test_an_unknown_speaker_close_to_a_cast_name_is_asked_about() -> None:
    s = parse_script("Bob: Hi.\nBbo: Hello.\nCarol: Hey.\nSpeaker 2: x\n", known_speakers=["Bob", "Speaker 1"])
    assert [w.message for w in s.warnings] == [
        "'Bbo' is not in the cast: did you mean Bob?",
        "'Carol' is not in the cast: give it a voice or fix the name",
        "'Speaker 2' is not in the cast: give it a voice or fix the name",  # numbers are never typos
    ]


def test_ids_can_be_replaced_and_lines_found_by_id() -> None:
    s = parse_script("A: one.\nA: [sigh]\n")
    t = s.with_ids(["x", "y"])
    assert t.line_ids == ("x", "y") and t.line("y").text == "[sigh]" and s.line("x") is None
    assert [ln.has_words for ln in t.lines] == [True, False]
    with pytest.raises(ValueError, match="unique"):
        s.with_ids(["x", "x"])
