"""The staleness rule: what the model is asked makes a take stale, with the reason; how it is computed
(device, precision, speed, quantization) and where it is placed (the gap) never do."""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
import pytest

from s2studio.state.project import GenerationSettings, Take
from s2studio.state.script import parse_script
from s2studio.state.staleness import (
    SAMPLING_FIELDS, Stale, adopt_legacy_take, describe, fingerprint_of, legacy_fingerprint, stale_reasons,
    take_fingerprint, take_settings, upgrade_take, voice_key,
)
from s2studio.state.voice_format import Clip, Voice

LINE = parse_script("Alice: Hello [sigh] there.").lines[0]
PINNED = "3f4a6a2bd5e07c77"
"""`take_fingerprint` of one record: what every project stores (a new formula would have to upgrade them)."""


def voice(transcript: str = "hi", sha: str = "a" * 64) -> Voice:
    return Voice("v1", "Alice voice", "", "", (Clip("c1", "c1.flac", transcript, sha, 3.0, 44100),), "2025")


def take_for(settings: GenerationSettings, v: Voice | None = None) -> Take:
    return Take("t1", LINE.line_id, LINE.text, np.zeros(4, np.float32), np.zeros((10, 1), np.int64), 7,
                speaker=LINE.speaker, voice=voice_key(v or voice()), settings=take_settings(settings))


def test_an_up_to_date_take_has_no_reasons() -> None:
    s = GenerationSettings()
    assert stale_reasons(take_for(s), LINE, voice_key(voice()), s) == ()


def test_each_change_of_what_the_model_is_asked_gives_its_reason() -> None:
    s = GenerationSettings()
    take = take_for(s)
    edited = parse_script("Alice: Hello there.").lines[0]
    moved = parse_script("Bob: Hello [sigh] there.").lines[0]
    assert stale_reasons(take, edited, voice_key(voice()), s) == (Stale.TEXT,)
    assert stale_reasons(take, moved, voice_key(voice()), s) == (Stale.SPEAKER,)
    assert stale_reasons(take, LINE, voice_key(voice(transcript="hello")), s) == (Stale.VOICE,)
    assert stale_reasons(take, LINE, voice_key(voice(sha="b" * 64)), s) == (Stale.VOICE,)
    assert stale_reasons(take, LINE, "", s) == (Stale.VOICE,)
    for name, value in (("temperature", 0.5), ("top_p", 0.5), ("top_k", 5), ("max_frames", 64),
                        ("batching", "upstream")):
        assert stale_reasons(take, LINE, voice_key(voice()), replace(s, **{name: value})) == (Stale.SETTINGS,), name
    assert describe(stale_reasons(take, edited, "", s)) == "stale: text edited, voice changed"


def test_settings_that_cannot_change_what_is_asked_mark_nothing_stale() -> None:
    s = GenerationSettings()
    take = take_for(s)
    for name, value in (("device", "cuda"), ("precision", "bf16"), ("speed", "fast"), ("quantize", "int8"),
                        ("threads", 1), ("max_batch", 4)):  # a stream's codes are its request's alone
        assert stale_reasons(take, LINE, voice_key(voice()), replace(s, **{name: value})) == (), name
    # every field is either part of what is asked or named here as not: a new setting must choose
    assert {f.name for f in fields(GenerationSettings)} == set(SAMPLING_FIELDS) | {
        "seed_mode", "seed", "device", "precision", "speed", "quantize", "threads", "max_batch"}


@pytest.mark.parametrize(("made", "now", "stale"), [
    (("random", 1), ("random", 99), False),   # a random seed's value is never asked for
    (("fixed", 5), ("random", 5), False),     # a take with any seed is a fair sample of "random"
    (("random", 5), ("fixed", 5), False),     # the mode seeds the next takes; a random take has its own seed
    (("random", 5), ("fixed", 6), False),
    (("fixed", 5), ("fixed", 5), False),
    (("fixed", 5), ("fixed", 6), True),       # a take of fixed seed 5, and now seed 6 is asked for
])
def test_the_seed_mode_never_counts_only_a_changed_fixed_seed(made, now, stale) -> None:
    take = take_for(GenerationSettings(seed_mode=made[0], seed=made[1]))
    reasons = stale_reasons(take, LINE, voice_key(voice()), GenerationSettings(seed_mode=now[0], seed=now[1]))
    assert reasons == ((Stale.SETTINGS,) if stale else ())


def test_a_legacy_take_is_adopted_when_its_hash_still_matches() -> None:
    s = GenerationSettings(speed="fast")
    v = voice()
    old = Take("t1", LINE.line_id, LINE.text, np.zeros(4, np.float32), np.zeros((10, 1), np.int64), 7,
               legacy_fingerprint(LINE, v, s))
    assert stale_reasons(old, LINE, voice_key(v), s) == (Stale.SPEAKER, Stale.VOICE, Stale.SETTINGS)
    assert adopt_legacy_take(old, LINE, v, s)
    assert (old.speaker, old.voice, old.settings) == ("Alice", voice_key(v), take_settings(s))
    assert stale_reasons(old, LINE, voice_key(v), s) == ()
    other = Take("t2", LINE.line_id, LINE.text, np.zeros(4, np.float32), np.zeros((10, 1), np.int64), 7,
                 legacy_fingerprint(LINE, v, replace(s, temperature=0.3)))
    assert not adopt_legacy_take(other, LINE, v, s)
    assert stale_reasons(other, LINE, voice_key(v), s) == (Stale.VOICE, Stale.SETTINGS)


def test_a_take_carries_the_one_fingerprint_and_an_older_one_is_upgraded_in_place() -> None:
    s, v = GenerationSettings(), voice()
    made = take_for(s)  # a take written before the fingerprint: its record, fingerprint ""
    assert made.fingerprint == "" and stale_reasons(made, LINE, voice_key(v), s) == ()
    assert upgrade_take(made, LINE, v, s) and not upgrade_take(made, LINE, v, s)
    assert made.fingerprint == fingerprint_of(made) == take_fingerprint(LINE.text, "Alice", voice_key(v), take_settings(s))
    assert take_fingerprint("Hi.", "Alice", "v1:abc", take_settings(s)) == PINNED  # projects store it: never changes
    assert stale_reasons(made, LINE, voice_key(v), s) == ()
    assert stale_reasons(made, LINE, voice_key(v), replace(s, temperature=0.3)) == (Stale.SETTINGS,)
    assert take_fingerprint(LINE.text, "Alice", voice_key(v), {**take_settings(s), "backend": "a server"}) == \
        made.fingerprint  # which engine made it never counts
    # an older studio's hash, of the settings it had (none of the loading settings added since), still adopts
    hashed = Take("t3", LINE.line_id, LINE.text, fingerprint=legacy_fingerprint(LINE, v, replace(s, max_batch=4)))
    assert upgrade_take(hashed, LINE, v, s) and hashed.fingerprint == fingerprint_of(hashed) != ""
    assert stale_reasons(hashed, LINE, voice_key(v), s) == ()
    stranger = Take("t4", LINE.line_id, LINE.text, fingerprint=legacy_fingerprint(LINE, v, replace(s, top_k=3)))
    assert not upgrade_take(stranger, LINE, v, s) and stale_reasons(stranger, LINE, voice_key(v), s)


def _canonical(text, speaker, voice, settings) -> str:
    """The formula `take_fingerprint` is defined by: json.dumps of what was asked, keys sorted."""
    import hashlib
    import json
    asked = {"text": text, "speaker": speaker, "voice": voice,
             "settings": {name: settings.get(name) for name in (*SAMPLING_FIELDS, "seed")}}
    return hashlib.sha256(json.dumps(asked, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


class _Str(str):
    pass


@pytest.mark.parametrize("text, speaker, voice, settings", [
    ("Hello [sigh] there.", "Alice", "v1:abc", {"temperature": 0.7, "top_p": 0.8, "top_k": 30, "max_frames": 1077,
                                               "batching": "line", "seed": None}),
    ('Quotes " and \\ and\nnew lines\t, \x01 \u2028 é — 😀', "Dr. \"Who\"", "", {"temperature": 1, "seed": 2**70}),
    ("", "", "", {}),
    ("x", "y", "z", {"temperature": 1e-7, "top_p": 1.0, "top_k": -3, "batching": "", "max_frames": 0, "seed": 0}),
    ("x", "y", "z", {"temperature": float("nan"), "top_p": float("inf")}),  # not JSON: json.dumps writes it
    ("x", "y", "z", {"temperature": True, "batching": _Str("line")}),  # subclasses: json.dumps writes them
    (_Str("x"), "y", "z", {}),
])
def test_the_fingerprint_is_the_hash_of_the_sorted_json_of_what_was_asked(text, speaker, voice, settings) -> None:
    assert take_fingerprint(text, speaker, voice, settings) == _canonical(text, speaker, voice, settings)
