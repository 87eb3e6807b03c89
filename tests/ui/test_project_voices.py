"""A project saved with its voices opens on an empty data folder with its voices; missing voices are found by
name, and the person is asked when more than one voice could be it."""

from __future__ import annotations

import shutil

from PySide6.QtWidgets import QInputDialog

from s2studio.engine.fake import FakeEngine
from s2studio.state.project_files import read_project
from s2studio.state.voices import VoiceLibrary
from ui_helpers import cast_two_voices, close_studio, on_modal, open_studio, project_shown, write_wav


def rendered_studio(qtbot, tmp_path, monkeypatch, data: str = "data"):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / data))
    w = open_studio(qtbot, lambda: FakeEngine(frame_latency_s=0.001), begin_session=False)
    cast_two_voices(w, tmp_path)
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: len(w.document.project.lines) == 2 and not w.session.busy, timeout=15000)
    return w


def second_machine(qtbot, tmp_path, monkeypatch, data: str):
    """The studio on another data folder (another computer)."""
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / data))
    return open_studio(qtbot, lambda: FakeEngine(frame_latency_s=0.001), begin_session=False)


def test_a_project_saved_with_voices_opens_on_an_empty_data_folder(qtbot, tmp_path, monkeypatch):
    w = rendered_studio(qtbot, tmp_path, monkeypatch)
    cast = dict(w.document.project.cast)
    path = tmp_path / "scene.s2proj"
    w.projects.save_as(path)
    w.actions_by_name["save_with_voices"].trigger()  # checked: saved now with the voices packed in
    assert w.actions_by_name["save_with_voices"].isChecked()
    saved = read_project(path)
    assert saved.project.with_voices and sorted(saved.packed_voices) == sorted(set(cast.values()))
    assert saved.project.voice_names == {cast["Alice"]: "A", cast["Bob"]: "B"}
    close_studio(w)
    shutil.rmtree(tmp_path / "data")  # nothing of this computer's travels but the project
    (tmp_path / "a.wav").unlink()
    (tmp_path / "b.wav").unlink()

    w2 = second_machine(qtbot, tmp_path, monkeypatch, "other")
    assert w2.library.list() == []
    w2.projects.open(path)
    project_shown(qtbot, w2)
    assert sorted(v.name for v in w2.library.list()) == ["A", "B"]
    for voice in w2.library.list():  # the clips were unpacked into this library
        clip = w2.library.clip_path(voice, voice.clips[0])
        assert clip.is_file() and tmp_path / "other" / "voices" in clip.parents
    assert w2.document.project.cast == cast  # the ids were free here: kept
    assert w2.document.stale_lines() == []  # every take still answers its line
    assert w2.cast_panel.combos["Alice"].currentData() == cast["Alice"]
    assert w2.actions_by_name["save_with_voices"].isChecked()
    close_studio(w2)


def test_missing_voices_are_found_by_name_or_by_their_clips(qtbot, tmp_path, monkeypatch):
    w = rendered_studio(qtbot, tmp_path, monkeypatch)
    path = tmp_path / "scene.s2proj"
    w.projects.save_as(path)  # without voices: only their names travel
    old = dict(w.document.project.cast)
    close_studio(w)

    w2 = second_machine(qtbot, tmp_path, monkeypatch, "other")
    lib = VoiceLibrary(tmp_path / "other" / "voices")
    renamed = lib.create("Alice's voice", [(tmp_path / "a.wav", "hello there")])  # the same clip, named otherwise
    assert renamed.id != old["Alice"] and renamed.clips[0].sha256 == VoiceLibrary(
        tmp_path / "data" / "voices").get(old["Alice"]).clips[0].sha256
    other_b = lib.create("B", [(write_wav(tmp_path / "b2.wav", hz=500), "another B")])
    w2.voices.refresh()
    w2.voice_commands.reread()
    w2.projects.open(path)
    project_shown(qtbot, w2)
    assert w2.document.project.cast == {"Alice": renamed.id, "Bob": other_b.id}
    alice, bob = w2.document.script.lines
    assert w2.document.state(alice).kind == "fresh"  # the same clips: its take still answers the line
    assert w2.document.state(bob).kind == "stale"  # another voice of that name: "voice changed"
    assert "used the library's voice “B” for “B”" in w2.statusBar().currentMessage()
    assert w2.store.unsaved_work  # the cast changed to this library's ids
    close_studio(w2)


def test_the_person_is_asked_when_a_packed_voice_and_a_library_voice_share_a_name(qtbot, tmp_path, monkeypatch):
    w = rendered_studio(qtbot, tmp_path, monkeypatch)
    path = tmp_path / "scene.s2proj"
    w.projects.save_as(path)
    w.projects.save_with_voices(True)
    cast = dict(w.document.project.cast)
    close_studio(w)

    w2 = second_machine(qtbot, tmp_path, monkeypatch, "other")
    lib = w2.library
    mine = lib.create("A", [(write_wav(tmp_path / "a2.wav", hz=610), "my own A")])
    w2.voices.refresh()
    w2.voice_commands.reread()
    asked: list[list[str]] = []

    def choose(d: QInputDialog) -> None:
        items = [d.comboBoxItems()[i] for i in range(len(d.comboBoxItems()))]
        asked.append(items)
        d.setTextValue(items[0])  # the project's own copy
        d.accept()

    on_modal(qtbot, QInputDialog, choose)
    w2.projects.open(path)
    project_shown(qtbot, w2)
    assert len(asked) == 1 and asked[0][0].startswith("The project's own copy of “A”")
    assert asked[0][1] == "The library's voice “A” (1 clip)" and asked[0][2].startswith("No voice")
    names = sorted(v.name for v in lib.list())
    assert names == ["A", "A (2)", "B"]  # the copy was added beside the library's own A
    assert w2.document.project.cast["Alice"] == cast["Alice"] != mine.id and w2.document.project.cast["Bob"] == cast["Bob"]
    assert w2.document.stale_lines() == []
    close_studio(w2)
