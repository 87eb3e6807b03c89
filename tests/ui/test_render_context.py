"""Rendering only some lines hands the engine the kept takes of the lines before them, numbered as the
whole script numbers its voices, so a re-rendered line hears what precedes it as in a full render."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from s2studio.engine.render import render_for_script
from s2studio.errors import UserError
from s2studio.state.project import Project, Take
from s2studio.state.script import parse_script
from s2studio.state.voices import VoiceLibrary
from s2studio.ui.control.render import gather, plan_render
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
    return Take(f"t-{line.line_id}", line.line_id, line.text, np.zeros(2048 * frames, np.float32), codes, 1,
                speaker=line.speaker)


class _Capture:
    """An engine that keeps the request its job generates (and must not encode: the codes are cached)."""

    def __init__(self) -> None:
        self.requests: list = []

    def encode(self, request, cancel):
        pytest.fail("encoded")

    def generate(self, request, cancel):
        self.requests.append(request)
        return iter(())


def _request(library: VoiceLibrary, script, project: Project, lines):
    """What RenderFlow builds (the inputs gathered on the GUI thread, the render compiled) and what its job hands the
    engine on the engine thread, with the references from the cached codes."""
    voices = {v.id: v for v in library.list()}
    plan = plan_render(gather("j", lines, script, project, voices), library, FINGERPRINT, batches=False)
    render = plan.compile(plan.pieces[0])
    engine = _Capture()
    assert list(render.work(engine, "j", threading.Event())) == []
    (request,) = engine.requests
    speakers = dict.fromkeys(ln.speaker for ln in script.lines)  # numbered in order of their first line
    assert [(r.speaker, r.transcript, r.codes.shape) for r in request.references] == [
        (i, f"I am {name}.", (10, 7)) for i, name in enumerate(speakers)]
    return request


def test_a_later_line_gets_the_earlier_takes_as_context(tmp_path: Path) -> None:
    library, script, project = _setup(tmp_path)
    first, second, third, _ = script.lines
    project.add_take(_take(first, 3))
    project.add_take(_take(second, 5))
    request = _request(library, script, project, [third])
    assert [ln.line_id for ln in request.lines] == [third.line_id]
    # Bob speaks first in the script, so Bob is voice 0 and Alice voice 1, also in the context
    assert [(t.speaker, t.text, t.codes.shape[1]) for t in request.context] == [
        (0, "First line.", 3), (1, "[sigh] Second line.", 5)]
    assert request.lines[0].speaker == 0


def test_every_earlier_take_goes_to_the_engine_which_picks_the_window(tmp_path: Path) -> None:
    """Not only the newest few: the window moves in hops counted from the first line, so a line rendered alone
    hears what it heard in a full render only if the engine sees every line before it."""
    library, _, project = _setup(tmp_path)
    script = parse_script("".join(f"{'Bob' if i % 2 else 'Alice'}: Line {i}.\n" for i in range(12)))
    project.script = script.source
    for i, line in enumerate(script.lines[:11]):
        project.add_take(_take(line, 2 + i))
    request = _request(library, script, project, [script.lines[11]])
    assert [(t.text, t.codes.shape[1]) for t in request.context] == [(f"Line {i}.", 2 + i) for i in range(11)]


def test_the_first_line_or_a_line_without_earlier_takes_has_no_context(tmp_path: Path) -> None:
    library, script, project = _setup(tmp_path)
    assert _request(library, script, project, [script.lines[0]]).context == ()
    assert _request(library, script, project, [script.lines[2]]).context == ()
    project.add_take(_take(script.lines[1], 4))
    full = _request(library, script, project, list(script.lines))
    assert full.context == ()  # a full render starts at the first line: it makes its own context


def test_the_cast_is_checked_once_and_lines_without_a_voice_are_left_out(tmp_path: Path) -> None:
    library, _, project = _setup(tmp_path)
    script = parse_script("Carol: Hi.\nBob: Yes.\nDave: No.\nEve: Maybe.\n")
    voices = {v.id: v for v in library.list()}
    inputs = gather("j", list(script.lines), script, project, voices)
    assert [ln.speaker for ln in inputs.lines] == ["Bob"]
    assert [ln.speaker for ln in inputs.left_out] == ["Carol", "Dave", "Eve"]
    unvoiced = [ln for ln in script.lines if ln.speaker != "Bob"]
    with pytest.raises(UserError) as exc:
        gather("j", unvoiced, script, project, voices)
    assert str(exc.value) == "3 speakers have no voice: Carol, Dave, Eve. Pick one for each in the cast."
    with pytest.raises(UserError, match="^No voice for Carol: pick one in the cast above the script.$"):
        gather("j", [script.lines[0]], script, project, voices)


@pytest.mark.parametrize(("takes", "batches"), [(1, True), (3, True), (1, False), (2, False)])
def test_the_jobs_compiled_one_at_a_time_are_the_jobs_of_the_whole_render(tmp_path: Path, takes: int,
                                                                          batches: bool) -> None:
    """The studio compiles each job of a render when it hands it over (`RenderPlan`): the same jobs, job ids,
    seeds and speaker numbers as the whole render compiled at once and split (what `synth` runs)."""
    library, _, project = _setup(tmp_path)
    script = parse_script("Carol: Unvoiced.\n# One\nAlice: A.\nBob: B.\n# Two\nBob: C.\nAlice: [sigh] D.\nBob: E.\n")
    project.script = script.source
    project.settings = replace(project.settings, seed_mode="fixed", seed=7)
    voices = {v.id: v for v in library.list()}
    inputs = gather("j", list(script.lines), script, project, voices)
    plan = plan_render(inputs, library, FINGERPRINT, takes, batches)
    whole = render_for_script(script, inputs.cast, library, FINGERPRINT, "j", project.settings.sampling,
                              line_ids=[ln.line_id for ln in inputs.lines]).pieces(takes, batches)
    assert tuple(plan.compile(piece) for piece in plan.pieces) == whole
    assert len(whole) == (1 if takes == 1 and not batches else 2 * takes)  # scenes x takes
