"""A project saved to another folder takes every take along (hard links where the disk allows, copies where it
does not), the copy opens with every sample, and the takes read from the new folder after; an old project (format
1) opens as it is and moves into today's layout at its first save."""

from __future__ import annotations

import errno
import json
import os
import shutil
import threading

import numpy as np
import pytest
import soundfile as sf

from s2studio.errors import Cancelled
from s2studio.state.project import Project, Take
from s2studio.state.project_files import read_project
from s2studio.state.project_folder import ProjectFolder
from s2studio.state.project_journal import capture
from s2studio.state.take_files import take_files


def book(tmp_path, n: int = 12) -> tuple[Project, ProjectFolder]:
    p = Project(script="".join(f"Alice: Line {i}.\n" for i in range(n)), line_ids=[f"l{i}" for i in range(n)])
    for i in range(n):
        audio = (0.2 * np.sin(np.arange(3000 + 100 * i) / (3 + i))).astype(np.float32)
        p.add_take(Take(f"{i:04x}ab", f"l{i}", f"Line {i}.", audio, np.full((10, 2), i, np.int64), i))
    folder = ProjectFolder(tmp_path / "book.s2proj")
    folder.save(capture(p))
    return p, folder


def audio_of(path) -> dict[str, bytes]:
    return {k: e.current.audio.tobytes() for k, e in read_project(path).project.lines.items()}


@pytest.mark.parametrize("links", [True, False], ids=["linked", "copied"])
def test_save_as_takes_every_take_along_and_the_copy_opens(tmp_path, monkeypatch, links):
    p, folder = book(tmp_path)
    expected = audio_of(folder.path)
    if not links:  # another disk: links refused, the files are copied
        def refuse(*_a, **_k):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        monkeypatch.setattr(os, "link", refuse)
    told: list[tuple[float, str]] = []
    target = ProjectFolder(tmp_path / "elsewhere" / "copy.s2proj")
    (tmp_path / "elsewhere").mkdir()
    target.save(capture(p), voices={}, progress=lambda f, text: told.append((f, text)))
    assert told[-1][0] == 1.0 and told[-1][1] == ("Linking takes: 12 of 12" if links else "Copying takes: 12 of 12")
    for take in (e.current for e in p.lines.values()):
        old, new = take_files(folder.path, take.take_id), take_files(target.path, take.take_id)
        for a, b in ((old.audio, new.audio), (old.codes, new.codes), (old.peaks, new.peaks)):
            assert a.read_bytes() == b.read_bytes()
            assert (a.stat().st_ino == b.stat().st_ino) == links
        assert take.files == new  # the project reads its takes from its new folder
    assert audio_of(target.path) == expected
    shutil.rmtree(folder.path)  # the old folder gone: the open project still plays every take
    assert {k: e.current.audio.tobytes() for k, e in p.lines.items()} == expected


def test_a_cancelled_save_as_leaves_nothing_and_the_project_as_it_was(tmp_path):
    p, folder = book(tmp_path)
    cancel = threading.Event()

    def told(fraction: float, _text: str) -> None:
        cancel.set()

    with pytest.raises(Cancelled):
        ProjectFolder(tmp_path / "copy.s2proj").save(capture(p), progress=told, cancel=cancel)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["book.s2proj"]
    assert all(e.current.files.folder == folder.path for e in p.lines.values())


def test_an_old_project_opens_as_it_is_and_moves_into_todays_layout_at_its_first_save(tmp_path):
    folder = tmp_path / "old.s2proj"
    (folder / "takes").mkdir(parents=True)
    rows, originals = {}, {}
    for i in range(3):
        audio = (0.25 * np.sin(np.arange(5000) / (2 + i))).astype(np.float32)
        sf.write(folder / "takes" / f"{i:012x}.flac", audio, 44100, subtype="PCM_24")
        np.save(folder / "takes" / f"{i:012x}.npy", np.full((10, 3), i, np.int64))
        originals[f"l{i}"] = sf.read(folder / "takes" / f"{i:012x}.flac", dtype="float32")[0]
        rows[f"l{i}"] = {"picked": 0, "takes": [{"take_id": f"{i:012x}", "text": f"Line {i}.", "seed": i}]}
    (folder / "project.json").write_text(json.dumps({"format": 1, "script": "A: x\n", "lines": rows}))

    writer, opened = ProjectFolder.open(folder)
    project = opened.project
    assert opened.problems == () and {k: e.current.audio.tobytes() for k, e in project.lines.items()} == \
        {k: a.tobytes() for k, a in originals.items()}
    assert list((folder / "takes").iterdir()) and not (folder / "journal.jsonl").exists()  # opening writes nothing
    peaks = {k: e.current.sound.peaks().copy() for k, e in project.lines.items()}  # computed: none stored
    project.title = "Saved today"
    writer.save(capture(project))
    doc = json.loads((folder / "project.json").read_text())
    assert doc["format"] == 2 and (folder / "journal.jsonl").is_file()
    assert sorted(p.name for p in (folder / "takes").iterdir()) == ["00"]  # the flat files moved into a folder
    for line_id, entry in project.lines.items():
        files = entry.current.files
        assert files == take_files(folder, entry.current.take_id) and files.peaks.is_file()
        assert np.array_equal(np.load(files.peaks), peaks[line_id])
    again = read_project(folder).project
    assert again.title == "Saved today"
    assert {k: e.current.audio.tobytes() for k, e in again.lines.items()} == \
        {k: a.tobytes() for k, a in originals.items()}
    assert [e.current.codes[0, 0] for e in again.lines.values()] == [0, 1, 2]
