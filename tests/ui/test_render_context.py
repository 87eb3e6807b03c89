"""Rendering only some lines hands the engine the kept takes of the lines before them, numbered as the
whole script numbers its voices, so a re-rendered line hears what precedes it as in a full render."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from s2studio.state.project import Project, Take
from s2studio.state.script import parse_script
from s2studio.state.voices import VoiceLibrary
from s2studio.ui.control.render import build_request
from ui_helpers import write_wav

FINGERPRINT = "codec-x"


def _setup(tmp_path: Path):
    library = VoiceLibrary(tmp_path / "voices")
    alice = library.create("Alice", [(write_wav(tmp_path / "a.wav", hz=220), "I am Alice.")])
    bob = library.create("Bob", [(write_wav(tmp_path / "b.wav", hz=150), "I am Bob.")])
    for voice in (alice, bob):  # fill the codes cache, as the studio does before a render
        library.codes(voice, lambda path: np.ones((10, 7), dtype=np.int64), FINGERPRINT)
    script = parse_script("Bob: First line.\nAlice: [sigh] Second line.\nBob: Third line.\nAlice: Fourth.\n")
    project = Project(script=script.source, cast={"Alice": alice.id, "Bob": bob.id})
    return library, script, project


def _take(line, frames: int) -> Take:
    codes = np.full((10, frames), frames, dtype=np.int64)
    return Take(f"t-{line.line_id}", line.line_id, line.text, np.zeros(2048 * frames, np.float32), codes, 1, "fp")


def test_a_later_line_gets_the_earlier_takes_as_context(tmp_path: Path) -> None:
    library, script, project = _setup(tmp_path)
    first, second, third, _ = script.lines
    project.add_take(_take(first, 3))
    project.add_take(_take(second, 5))
    request = build_request("j", [third], script, project, library, FINGERPRINT)
    assert [ln.line_id for ln in request.lines] == [third.line_id]
    # Bob speaks first in the script, so Bob is voice 0 and Alice voice 1, also in the context
    assert [(t.speaker, t.text, t.codes.shape[1]) for t in request.context] == [
        (0, "First line.", 3), (1, "[sigh] Second line.", 5)]
    assert request.lines[0].speaker == 0


def test_the_first_line_or_a_line_without_earlier_takes_has_no_context(tmp_path: Path) -> None:
    library, script, project = _setup(tmp_path)
    assert build_request("j", [script.lines[0]], script, project, library, FINGERPRINT).context == ()
    assert build_request("j", [script.lines[2]], script, project, library, FINGERPRINT).context == ()
    project.add_take(_take(script.lines[1], 4))
    full = build_request("j", list(script.lines), script, project, library, FINGERPRINT)
    assert full.context == ()  # a full render starts at the first line: it makes its own context
