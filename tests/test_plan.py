"""Script + cast -> SynthesisRequest: speaker indices, references, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from s2studio.engine.api import LineSpec, Reference
from s2studio.engine.plan import compile_request, line_fingerprint
from s2studio.errors import UserError
from s2studio.settings import Sampling
from s2studio.state.script import parse_script
from s2studio.state.voices import Clip, Voice


def voice(vid: str, name: str, clips: int = 1) -> Voice:
    return Voice(vid, name, "", "", tuple(Clip(f"c{i}", f"clip{i}.flac", f"{name} says {i}.", "0" * 64, 4.0, 44100)
                                          for i in range(1, clips + 1)), "2026-01-01T00:00:00+00:00")


ALICE, BOB = voice("v000000000001", "Alice", clips=2), voice("v000000000002", "Bob")
CODES = {
    ALICE.id: [np.full((10, 3), 1, np.int64), np.full((10, 2), 2, np.int64)],
    BOB.id: [np.full((10, 4), 3, np.int32)],
}
SCRIPT = parse_script("# Scene\nBob: [laughing] Hi.\nAlice: Hello.\nNarrator: Later.\nBob: Bye.")


def test_compile_orders_speakers_by_first_line_and_shares_indices_per_voice() -> None:
    cast = {"Alice": ALICE, "Bob": BOB, "Narrator": ALICE}
    req = compile_request(SCRIPT, cast, CODES, "job-1", Sampling(seed_mode="fixed", seed=3, batching="upstream"),
                          chunk_length=300)
    assert req.job_id == "job-1" and req.sampling.batching == "upstream" and req.chunk_length == 300
    assert req.sampling.fixed_seed == 3
    assert [(ln.speaker, ln.text) for ln in req.lines] == [(0, "[laughing] Hi."), (1, "Hello."), (1, "Later."), (0, "Bye.")]
    assert [ln.line_id for ln in req.lines] == [ln.line_id for ln in SCRIPT.lines]
    assert [(r.speaker, r.transcript, r.codes.shape, r.codes.dtype) for r in req.references] == [
        (0, "Bob says 1.", (10, 4), np.int64),
        (1, "Alice says 1.", (10, 3), np.int64), (1, "Alice says 2.", (10, 2), np.int64)]


def test_subset_of_lines() -> None:
    cast = {"Alice": ALICE, "Bob": BOB, "Narrator": ALICE}
    wanted = [SCRIPT.lines[3].line_id, SCRIPT.lines[1].line_id]
    req = compile_request(SCRIPT, cast, CODES, "j", line_ids=wanted)
    assert [(ln.line_id, ln.speaker) for ln in req.lines] == [(SCRIPT.lines[1].line_id, 1), (SCRIPT.lines[3].line_id, 0)]
    assert [r.speaker for r in req.references] == [0, 1, 1]  # indices of the whole script


def test_refusals() -> None:
    with pytest.raises(UserError, match="no voice for speaker 'Narrator'; cast it"):
        compile_request(SCRIPT, {"Alice": ALICE, "Bob": BOB}, CODES, "j")
    with pytest.raises(UserError, match="speakers 'Bob', 'Alice', 'Narrator'"):
        compile_request(SCRIPT, {}, CODES, "j")
    with pytest.raises(UserError, match="nothing to speak"):
        compile_request(parse_script("# only a heading\n\n"), {}, CODES, "j")
    with pytest.raises(UserError, match="only tags"):
        compile_request(parse_script("Bob: [sigh]\n[pause] [laughing]"), {"Bob": BOB}, CODES, "j")
    bad = {BOB.id: [np.zeros((8, 4), np.int64)]}
    with pytest.raises(UserError, match="shape"):
        compile_request(parse_script("Bob: Hi."), {"Bob": BOB}, bad, "j")


def test_fingerprint_tracks_what_decides_a_take() -> None:
    line = LineSpec("l", 0, "Hi.")
    refs = (Reference(0, "ref", np.zeros((10, 2), np.int64)),)
    base = line_fingerprint(line, refs, Sampling(seed_mode="fixed", seed=1))
    assert base == line_fingerprint(LineSpec("other-id", 0, "Hi."), refs, Sampling(seed_mode="fixed", seed=1))
    assert len({base,
                line_fingerprint(LineSpec("l", 0, "Hi!"), refs, Sampling(seed_mode="fixed", seed=1)),
                line_fingerprint(LineSpec("l", 1, "Hi."), refs, Sampling(seed_mode="fixed", seed=1)),
                line_fingerprint(line, refs, Sampling(seed_mode="fixed", seed=2)),
                line_fingerprint(line, refs, Sampling(seed_mode="fixed", seed=1, temperature=0.7)),
                line_fingerprint(line, (Reference(0, "ref", np.ones((10, 2), np.int64)),),
                                 Sampling(seed_mode="fixed", seed=1)),
                line_fingerprint(line, refs, Sampling(seed_mode="fixed", seed=1), extra="model-b"),
                line_fingerprint(line, refs, Sampling(seed_mode="fixed", seed=1), ignore_eos=True)}) == 8
    # the one take fingerprint (state.staleness.take_fingerprint) as the engine fills it in: pinned, because a
    # change of formula would have to upgrade what projects store (the engine's value itself is only logged and sent)
    assert base == "80cfc4471d90ca83"


def test_subset_needs_voices_only_for_its_lines() -> None:
    req = compile_request(SCRIPT, {"Bob": BOB}, CODES, "j", line_ids=[SCRIPT.lines[0].line_id])
    assert [(ln.speaker, ln.text) for ln in req.lines] == [(0, "[laughing] Hi.")]
    assert [r.transcript for r in req.references] == ["Bob says 1."]


def test_engine_encoder_feeds_the_voice_library(tmp_path) -> None:
    import soundfile as sf

    from s2studio.engine.fake import FakeEngine
    from s2studio.engine.plan import engine_encoder
    from s2studio.state.voices import VoiceLibrary

    clip = tmp_path / "a.wav"
    sf.write(str(clip), (0.2 * np.sin(np.arange(44100 * 3) * 0.05)).astype(np.float32), 44100)
    lib = VoiceLibrary(tmp_path / "voices")
    v = lib.create("Alice", [(clip, "Hello.")])
    engine = FakeEngine()
    codes = lib.codes(v, engine_encoder(engine), engine.info.codec_fingerprint)
    assert codes[0].shape == (10, 65) and engine.calls == ["encode"]
    np.testing.assert_array_equal(codes[0], engine.encode_path(lib.clip_path(v, v.clips[0])))
    lib.codes(v, engine_encoder(engine), engine.info.codec_fingerprint)
    assert engine.calls == ["encode"]
    with pytest.raises(UserError, match="fake failure"):
        engine_encoder(FakeEngine(fail_on_encode=True))(clip)


def test_split_request_by_scene_and_take() -> None:
    """A heading starts a scene: one request per scene and take, seeds as in the whole request, the context turns
    with the first scene only; upstream batching is split by take only; one piece keeps the request."""
    from dataclasses import replace

    from s2studio.engine.api import ContextTurn, SynthesisRequest
    from s2studio.engine.plan import split_request

    ids = ["l1", "l2", "l3", "l4"]  # headings before l2 and l4
    turn = ContextTurn(0, "before.", np.zeros((10, 2), np.int64))
    request = SynthesisRequest("r", tuple(LineSpec(i, 0, "x") for i in ids), (), Sampling(seed_mode="fixed", seed=5),
                               context=(turn,), scene_starts=frozenset({ids[1], ids[3]}))
    pieces = split_request(request, takes=2)
    assert [p.job_id for p in pieces] == ["r.1.1", "r.1.2", "r.1.3", "r.2.1", "r.2.2", "r.2.3"]
    assert [[ln.line_id for ln in p.lines] for p in pieces[:3]] == [ids[:1], ids[1:3], ids[3:]]
    assert [p.sampling.seed for p in pieces] == [5, 6, 8, 9, 10, 12]
    assert [p.context for p in pieces] == [(turn,), (), (), (turn,), (), ()]
    assert [p.sampling.fixed_seed for p in split_request(replace(request, sampling=Sampling()))] == [None] * 3
    upstream = replace(request, sampling=replace(request.sampling, batching="upstream"))
    assert split_request(upstream) == [upstream]
    assert len(split_request(upstream, takes=3)) == 3
    with pytest.raises(UserError, match="^takes must be between 1 and 8, got 0$"):
        split_request(request, takes=0)


def test_a_scene_begins_at_the_first_line_after_each_heading() -> None:
    from s2studio.engine.plan import scene_starts
    from s2studio.state.script import parse_script

    script = parse_script("A: zero.\n# One\n\nA: one. B: [sigh] two.\n# Two\n# Three\nB: three.\nA: four.\n# End\n")
    ids = script.line_ids
    assert [ln.text for ln in script.lines] == ["zero.", "one. B: [sigh] two.", "three.", "four."]
    assert scene_starts(script) == {ids[1], ids[2]}
