"""What a take's files hold, kept in its row: opening a project stats each take's files instead of reading their
headers; a file removed, cut short or replaced behind the project's back is still reported (one line, the rest
opens), and a project saved before rows held it opens from the headers and gains it at its next save."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from s2studio.state import take_files as take_files_module
from s2studio.state.project import FileSizes, Project, Take
from s2studio.state.project_files import read_project, save_project
from s2studio.state.project_folder import ProjectFolder
from s2studio.state.project_journal import JOURNAL, capture
from s2studio.state.take_files import take_files

LENGTHS = {"a1": 1000, "b2": 1500, "c3": 2200}


def _saved(tmp_path: Path) -> Path:
    project = Project(script="Alice: One.\nAlice: Two.\n")
    for i, (take_id, n) in enumerate(LENGTHS.items()):
        audio = (np.sin(np.arange(n) / (3.0 + i)) * 0.5).astype(np.float32)
        codes = np.arange(10 * (i + 2), dtype=np.int64).reshape(10, i + 2)
        project.add_take(Take(take_id, "l1" if i < 2 else "l2", "One.", audio, codes, i))
    return save_project(project, tmp_path / "p.s2proj")


def _rows(path: Path) -> dict[str, dict]:
    doc = json.loads((path / "project.json").read_text())
    return {row["take_id"]: row for entry in doc["lines"].values() for row in entry["takes"]}


def _on_disk(path: Path, take_id: str) -> dict[str, int]:
    files = take_files(path, take_id)
    return {"samples": LENGTHS[take_id], "audio": files.audio.stat().st_size, "codes": files.codes.stat().st_size}


@pytest.fixture
def header_reads(monkeypatch) -> list[str]:
    """The take files whose headers an open reads."""
    read: list[str] = []
    for name in ("flac_length", "check_codes_file"):
        real = getattr(take_files_module, name)

        def counted(path, real=real):
            read.append(os.path.basename(path))
            return real(path)

        monkeypatch.setattr(take_files_module, name, counted)
    return read


def test_each_row_holds_what_its_files_hold_and_an_open_reads_no_header(tmp_path, header_reads):
    path = _saved(tmp_path)
    rows = _rows(path)
    assert {take_id: row["sizes"] for take_id, row in rows.items()} == {t: _on_disk(path, t) for t in LENGTHS}
    folder, opened = ProjectFolder.open(path)
    assert header_reads == [] and opened.problems == () and folder.stale_rows == 0
    takes = {t.take_id: t for entry in opened.project.lines.values() for t in entry.takes}
    assert {t: (take.sound.length, take.sizes) for t, take in takes.items()} == {
        t: (n, FileSizes(**_on_disk(path, t))) for t, n in LENGTHS.items()}
    assert np.array_equal(takes["b2"].codes, np.arange(30).reshape(10, 3))
    assert len(takes["c3"].audio) == 2200


def _truncate(path: Path) -> None:
    with path.open("r+b") as f:
        f.truncate(20)


def _pickled(path: Path) -> None:
    np.save(path, np.array([{"x": 1}], dtype=object), allow_pickle=True)


def _linked(path: Path) -> None:
    target = path.with_name("elsewhere.flac")
    path.rename(target)
    path.symlink_to(target)


DAMAGE = {  # name: (suffix, how, what the problem says)
    "audio_removed": (".flac", Path.unlink, "No such file"),
    "codes_removed": (".npy", Path.unlink, "No such file"),
    "audio_cut_short": (".flac", _truncate, "is not readable audio"),
    "codes_cut_short": (".npy", _truncate, "b2.npy is damaged"),
    "codes_replaced_by_a_pickle": (".npy", _pickled, "holds Python objects"),
    "audio_replaced_by_a_link": (".flac", _linked, "link"),
}


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_a_take_file_damaged_behind_the_projects_back_is_reported(name, tmp_path, header_reads):
    suffix, damage, reason = DAMAGE[name]
    path = _saved(tmp_path)
    damage(Path(str(take_files(path, "b2").stem) + suffix))
    folder, opened = ProjectFolder.open(path)
    assert [[t.take_id for t in e.takes] for e in opened.project.lines.values()] == [["a1"], ["c3"]]
    assert len(opened.problems) == 1, opened.problems
    assert opened.problems[0].startswith('take b2 ("One.") left out: ') and reason in opened.problems[0]
    assert "\n" not in opened.problems[0]
    assert set(header_reads) <= {"b2.flac", "b2.npy"}  # the others open from their rows


def test_a_file_of_another_size_whose_header_reads_is_kept_as_before(tmp_path, header_reads):
    path = _saved(tmp_path)
    with take_files(path, "a1").audio.open("ab") as f:  # still a FLAC stream whose header says 1000 samples
        f.write(b"\0" * 100)
    folder, opened = ProjectFolder.open(path)
    take = opened.project.lines["l1"].takes[0]
    assert opened.problems == () and header_reads == ["a1.flac", "a1.npy"]
    assert take.sizes == FileSizes(1000, _on_disk(path, "a1")["audio"], _on_disk(path, "a1")["codes"])
    assert folder.stale_rows == 1  # the next save writes what the files hold now


def test_a_project_saved_without_sizes_opens_from_the_headers_and_gains_them_at_its_next_save(tmp_path,
                                                                                              header_reads):
    path = _saved(tmp_path)
    doc = json.loads((path / "project.json").read_text())
    for entry in doc["lines"].values():
        for row in entry["takes"]:
            del row["sizes"]
    (path / "project.json").write_text(json.dumps(doc))
    folder, opened = ProjectFolder.open(path)
    assert sorted(header_reads) == ["a1.flac", "a1.npy", "b2.flac", "b2.npy", "c3.flac", "c3.npy"]
    assert opened.problems == () and folder.stale_rows == 3
    assert [t.sound.length for e in opened.project.lines.values() for t in e.takes] == list(LENGTHS.values())
    opened.project.title = "Renamed"  # one small change: without stale rows, a journal line
    folder.save(capture(opened.project))
    assert folder.stale_rows == 0 and folder.generation == doc["generation"] + 1  # written whole
    assert {take_id: row["sizes"] for take_id, row in _rows(path).items()} == {t: _on_disk(path, t) for t in LENGTHS}
    assert (path / JOURNAL).read_bytes().count(b"\n") == 1  # the new journal's header alone
    header_reads.clear()
    assert read_project(path).project.title == "Renamed" and header_reads == []


def test_a_save_after_an_open_appends_and_keeps_the_sizes(tmp_path, header_reads):
    path = _saved(tmp_path)
    folder, opened = ProjectFolder.open(path)
    generation = folder.generation
    project = opened.project
    project.add_take(Take("d4", "l2", "Two.", np.full(700, 0.1, np.float32), np.zeros((10, 1), np.int64), 9))
    folder.save(capture(project))
    assert folder.generation == generation and (path / JOURNAL).read_bytes().count(b"\n") == 2  # one line appended
    again = read_project(path).project
    assert header_reads == []
    sizes = {t.take_id: t.sizes for e in again.lines.values() for t in e.takes}
    assert sizes["d4"] == FileSizes(700, take_files(path, "d4").audio.stat().st_size,
                                    take_files(path, "d4").codes.stat().st_size)
    assert sizes["a1"] == FileSizes(**_on_disk(path, "a1"))
