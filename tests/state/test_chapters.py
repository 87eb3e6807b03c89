"""A script's chapters: each heading down to the next of its level or higher, the lines before the first
heading as an opening, found by bisection."""

from __future__ import annotations

from s2studio.state.chapters import OPENING, chapter_at, chapter_lines, chapters
from s2studio.state.script import parse_script

TEXT = """Alice: Before any heading.
# One
Alice: In one.
## One, a scene
Bob: In the scene.
# Two
Bob: In two.
### Deep
Alice: In deep.
## Two, a scene
Alice: In two's scene.
"""


def test_each_chapter_runs_to_the_next_heading_of_its_level_or_higher() -> None:
    script = parse_script(TEXT)
    found = chapters(script)
    assert [(c.title, c.level, c.row, c.end_row) for c in found] == [
        (OPENING, 0, 1, 2), ("One", 1, 2, 6), ("One, a scene", 2, 4, 6), ("Two", 1, 6, 13), ("Deep", 3, 8, 10),
        ("Two, a scene", 2, 10, 13)]
    assert [[ln.text for ln in chapter_lines(script, c)] for c in found] == [
        ["Before any heading."], ["In one.", "In the scene."], ["In the scene."],
        ["In two.", "In deep.", "In two's scene."], ["In deep."], ["In two's scene."]]
    assert [chapter_at(found, row) for row in (1, 3, 5, 7, 9, 11)] == [0, 1, 2, 3, 4, 5]
    alone = chapters(parse_script("# Only a heading\n"))
    assert [(c.title, c.row, c.end_row) for c in alone] == [("Only a heading", 1, 3)]
    assert chapters(parse_script("")) == []
