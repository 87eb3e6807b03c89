"""Names made from what a person typed are valid on Windows and macOS too: the rules themselves, then every writer
that makes a file or folder name from user text (export stems and line clips, the voice library, a voice's export,
training's speaker folders, a project's takes), run with hostile names and checked file by file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from hypothesis import given, settings
from hypothesis import strategies as st

from s2studio.state.file_names import (MAX_COMPONENT, MAX_PATH, fit_in_folder, name_problem, portable_name,
                                       unique_ignoring_case)

HOSTILE = ["CON", "nul", "Com1", "lpt9.backup", "aux ", "a<b>:c|d?*", 'say "hi"/\\', "trailing.", "trailing ",
           "...", "", "\x01bell", "Zoë", "Alice", "alice", "ALICE", "x" * 300, "é" * 200]


@pytest.mark.parametrize("name, problem", [
    ("CON", "device name"), ("con.wav", "device name"), ("COM1.txt", "device name"), ("LPT9", "device name"),
    ("nul.tar.gz", "device name"), ("CONIN$", "device name"), ("a<b", "character"), ("x:y.wav", "character"),
    ('q"', "character"), ("tab\there", "character"), ("trail.", "dot or a space"), ("trail ", "dot or a space"),
    ("a" * 256, "longer than 255"), ("é" * 200, "longer than 255"), ("", "empty"), ("..", "empty"),
])
def test_names_windows_refuses_or_reads_otherwise_are_named(name, problem):
    assert problem in name_problem(name)


@pytest.mark.parametrize("name", ["CONSOLE", "com10", "Alice.wav", "001_Bob_hi-there.flac", "Zoë", "a" * 255,
                                  ".hidden", "nul-and-void"])
def test_ordinary_names_pass(name):
    assert name_problem(name) is None


@pytest.mark.parametrize("text, suffix, want", [
    ("CON", ".s2voice", "CON_.s2voice"), ("nul.txt", "", "nul_.txt"), ('Bob: "the" narrator?', ".wav",
                                                                       "Bob- -the- narrator-.wav"),
    ("trailing. . ", "", "trailing"), ("...", ".wav", "untitled.wav"), ("  Zoë  ", "", "Zoë"),
])
def test_portable_name(text, suffix, want):
    assert portable_name(text, suffix) == want


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_any_text_becomes_a_valid_name_that_keeps_its_extension(text):
    name = portable_name(text, ".wav")
    assert name_problem(name) is None, (text, name)
    assert name.endswith(".wav") and len(name) <= MAX_COMPONENT


def test_a_name_is_shortened_to_keep_its_path_under_the_limit(tmp_path):
    deep = Path("C:/Users/someone/" + "d" * 180)
    name = fit_in_folder(deep, "001_Alice_" + "w" * 120 + ".flac")
    assert len(str(deep / name)) <= MAX_PATH and name.startswith("001_Alice_") and name.endswith(".flac")
    assert fit_in_folder(tmp_path, "001_a.wav") == "001_a.wav"  # fits: unchanged


def test_names_told_apart_only_by_case_are_told_apart():
    assert unique_ignoring_case(["a.wav", "A.wav", "a.wav", "b"]) == ["a.wav", "A-2.wav", "a-3.wav", "b"]


# ----------------------------------------------------------------------------- every writer, hostile names


def every_name(root: Path) -> list[Path]:
    return [Path(folder) / n for folder, dirs, files in os.walk(root) for n in [*dirs, *files]]


def assert_portable(root: Path) -> None:
    """Every file and folder under `root`: a valid name, a path within Windows' limit where `root` leaves room, and
    no two names in one folder equal but for case."""
    paths = every_name(root)
    assert paths, "the writer wrote nothing"
    by_folder: dict[Path, list[str]] = {}
    for path in paths:
        assert name_problem(path.name) is None, path
        assert len(str(path)) <= max(MAX_PATH, len(str(root)) + 40), path
        by_folder.setdefault(path.parent, []).append(path.name.casefold())
    for folder, names in by_folder.items():
        assert len(names) == len(set(names)), (folder, sorted(names))


def tone(seconds: float = 0.3, freq: float = 220.0) -> np.ndarray:
    t = np.arange(int(seconds * 44100)) / 44100
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def test_export_stems_and_line_clips(tmp_path):
    from s2studio.audio.export import ExportSettings, RenderedLine, export

    root = tmp_path / ("deep" * 30)  # a folder that leaves little room below Windows' path limit
    lines = [RenderedLine(f"l{i}", speaker, f"{speaker} says {'many words ' * 20}", tone(), number=1 + i % 3)
             for i, speaker in enumerate(HOSTILE)]
    result = export(lines, ExportSettings(format="wav"), stems_dir=root / "stems", clips_dir=root / "clips")
    assert len(result.files) == len(dict.fromkeys(HOSTILE)) + len(HOSTILE)
    assert_portable(root)


def test_voice_library_folders_and_files(tmp_path):
    from s2studio.errors import UserError
    from s2studio.state.voices import VoiceLibrary

    clip = tmp_path / "clip.wav"
    sf.write(str(clip), tone(3.0), 44100)
    library = VoiceLibrary(tmp_path / "voices")
    made = []
    for name in HOSTILE:
        try:
            made.append(library.create(name, [(clip, "Hello there.")]))
        except UserError:  # an empty name; "alice" after "Alice": refused, names are unique ignoring case
            continue
    assert {v.name for v in made} >= {"CON", "a<b>:c|d?*", "Alice"} and "alice" not in {v.name for v in made}
    assert_portable(tmp_path / "voices")  # folders are named by lower-case ids, never by the name


def test_a_voice_is_offered_for_export_under_a_valid_name(qtbot, tmp_path, monkeypatch):
    from s2studio.state.voices import VoiceLibrary
    from s2studio.ui.control.clips import ClipJobs
    from s2studio.ui.control.voices import VoiceCommands
    from s2studio.ui.voices import voices_panel

    clip = tmp_path / "clip.wav"
    sf.write(str(clip), tone(3.0), 44100)
    library = VoiceLibrary(tmp_path / "voices")
    voice = library.create('CON: "the narrator"?', [(clip, "Hello there.")])
    panel = voices_panel.VoicesPanel(VoiceCommands(library), ClipJobs())
    qtbot.addWidget(panel)
    panel.select(voice.id)
    offered = []

    def save_as(parent, title, suggested, filters):
        offered.append(Path(suggested).name)  # offered in the folder last used for voices (else the documents)
        return str(tmp_path / "out" / Path(suggested).name), ""

    (tmp_path / "out").mkdir()
    monkeypatch.setattr(voices_panel.QFileDialog, "getSaveFileName", save_as)
    panel.export_file()
    assert offered == ["CON- -the narrator--.s2voice"] and name_problem(offered[0]) is None
    assert_portable(tmp_path / "out")


def test_training_speaker_folders(tmp_path):
    from s2studio.train.clips import TrainClip
    from s2studio.train.run import _write_tokens

    speakers = [s for s in HOSTILE if s.casefold() not in ("alice",)] + ["Alice"]
    clips = tuple(TrainClip(f"clip{i}", tmp_path / f"clip{i}.wav", "Hello.", s, 1.0) for i, s in enumerate(speakers))
    codes = [np.zeros((10, 4), np.int64) for _ in clips]
    _write_tokens(tmp_path / "tokens", clips, codes, "digest")
    assert_portable(tmp_path / "tokens")
    groups = json.loads((tmp_path / "tokens" / "groups.json").read_text(encoding="utf-8"))
    assert sum(len(g["sentences"]) for g in groups) == len(clips)


def test_a_project_with_hostile_names_saves_under_valid_names_and_a_device_take_id_is_refused(tmp_path):
    from s2studio.errors import UserError
    from s2studio.state.project import Project, Take
    from s2studio.state.project_files import TAKE_ID, load_project, save_project
    from s2studio.state.take_files import take_files

    script = "".join(f"{s or 'x'}: Hello there.\n" for s in HOSTILE[:8])
    project = Project(script=script, cast={"CON": "v0123456789ab", "a<b>:c|d?*": "v0123456789ac"}, title="NUL")
    project.add_take(Take("3f2a9c0d41b2", "l1", "Hello there.", tone(), np.zeros((10, 2), np.int64), 1, "fp"))
    (tmp_path / "projects").mkdir()
    path = save_project(project, tmp_path / "projects" / "scene")
    assert_portable(tmp_path / "projects")
    # a project file from anyone naming a take after a device: refused, never read as takes/con.flac
    meta = json.loads((path / "project.json").read_text(encoding="utf-8"))
    text = json.dumps(meta).replace("3f2a9c0d41b2", "con")
    (path / "project.json").write_text(text, encoding="utf-8")
    made, named = take_files(path, "3f2a9c0d41b2"), take_files(path, "con")
    named.audio.parent.mkdir(exist_ok=True)
    for old, new in ((made.audio, named.audio), (made.codes, named.codes)):
        old.rename(new)
    with pytest.raises(UserError, match="take id"):
        load_project(path)
    assert TAKE_ID.match("console") and not any(TAKE_ID.match(d) for d in ("con", "nul", "aux", "prn", "com1", "lpt9"))
