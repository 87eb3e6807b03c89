"""Speaker colours belong to the project (`Project.give_colors`): given when a speaker first appears, kept while
lines are inserted above, removed and brought back, and the first free place goes to the next new name."""

from __future__ import annotations

from s2studio.state.project import Project


def test_a_speaker_keeps_its_place_and_a_new_one_takes_the_first_free_place() -> None:
    p = Project()
    assert p.give_colors(["Alice", "Bob", "Alice"]) and p.speaker_colors == {"Alice": 0, "Bob": 1}
    assert not p.give_colors(["Bob", "Alice"])  # Bob now speaks first: nobody recoloured
    assert p.give_colors(["Carol", "Alice", "Bob"]) and p.speaker_colors["Carol"] == 2
    assert not p.give_colors(["Alice", "Bob"]) and p.speaker_colors["Carol"] == 2  # gone (an undo): kept
    p.give_colors(["Alice", "Bobby"])  # Bob renamed: the name takes the place Bob left
    assert p.speaker_colors["Bobby"] == 1
    p.give_colors(["Alice", "Bobby", "Carol"])
    assert p.speaker_colors["Carol"] == 2
