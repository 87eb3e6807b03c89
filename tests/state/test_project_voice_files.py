"""The project file's voices: names and the packing flag read back, packed voices only as plain files named by
voice id, a bad voice id refused naming the field, and the plan for voices a library lacks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from s2studio.errors import UserError
from s2studio.state.project import Project
from s2studio.state.project_files import read_project, save_project
from s2studio.state.project_voices import missing_voices, pack, plan
from s2studio.state.voice_file import peek_voice
from s2studio.state.voices import VoiceLibrary


def wav(path: Path, hz: float) -> Path:
    t = np.arange(44100) / 44100
    sf.write(path, (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32), 44100, subtype="PCM_16")
    return path


def test_names_the_flag_and_packed_voices_round_trip(tmp_path: Path) -> None:
    lib = VoiceLibrary(tmp_path / "lib")
    a = lib.create("Ann", [(wav(tmp_path / "a.wav", 220), "hello")])
    project = Project(script="Alice: Hi.", cast={"Alice": a.id}, voice_names={a.id: "Ann"}, with_voices=True)
    path = save_project(project, tmp_path / "p.s2proj", voices=pack(project, lib))
    opened = read_project(path)
    assert opened.project.voice_names == {a.id: "Ann"} and opened.project.with_voices
    assert list(opened.packed_voices) == [a.id]
    assert peek_voice(opened.packed_voices[a.id]).name == "Ann"
    voices = path / "voices"
    (voices / "notes.txt").write_text("x")
    os.symlink(opened.packed_voices[a.id], voices / "v000000000000.s2voice")  # a link is never followed
    (voices / "v111111111111.s2voice").mkdir()
    assert list(read_project(path).packed_voices) == [a.id]
    doc = json.loads((path / "project.json").read_text())
    doc["voice_names"] = {"../etc": "x"}
    (path / "project.json").write_text(json.dumps(doc))
    with pytest.raises(UserError, match=r"voice_names.*a voice id"):
        read_project(path)


def test_the_plan_for_voices_the_library_lacks(tmp_path: Path) -> None:
    home = VoiceLibrary(tmp_path / "home")
    a = home.create("Ann", [(wav(tmp_path / "a.wav", 220), "hello")])
    b = home.create("Ben", [(wav(tmp_path / "b.wav", 330), "hi")])
    c = home.create("Cy", [(wav(tmp_path / "c.wav", 440), "hey")])
    project = Project(cast={"A": a.id, "B": b.id, "C": c.id, "D": "v0123456789ab"},
                      voice_names={a.id: "Ann", b.id: "Ben", c.id: "Cy", "v0123456789ab": "Dee"})
    packed = {vid: tmp_path / f"{vid}.s2voice" for vid in (a.id, c.id)}
    for vid, p in packed.items():
        p.write_bytes(home.archive(vid))
    away = VoiceLibrary(tmp_path / "away")
    ben = away.create("ben", [(wav(tmp_path / "b2.wav", 500), "other")])  # same name, other clips
    cy = away.create("Cy", [(wav(tmp_path / "c2.wav", 600), "other")])  # same name as a packed one
    p = plan(missing_voices(project, away, packed))
    assert p.imports == {a.id: packed[a.id]}  # packed, no voice of its name here
    assert p.use == {b.id: ben.id}  # not packed, one voice of its name
    assert [m.voice_id for m in p.ask] == [c.id] and p.ask[0].candidates == (cy,)
    assert [m.name for m in p.unresolved] == ["Dee"]
    assert p.notes == ["imported the voice “Ann” from the project", "used the library's voice “ben” for “Ben”",
                       "the voice “Dee” is not in the library: choose a voice for its speakers"]
