"""Hostile and damaged project folders through the state API the window calls: one `UserError` naming the
field for a malformed document, unreadable takes reported (never silently dropped), nothing read or
written outside the project's folder, and a folder save of an older studio that a crash interrupted recovered on
the next open (crashes of today's saves: `tests/state/test_project_saves.py`)."""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from umask import umask_set
from hostile_projects import (LINE, MALFORMED, TAKE_IDS, UNREADABLE_TAKES, make_malformed, make_unreadable,
                              valid_document, write_project)

from s2studio.errors import UserError
from s2studio.state.project import FORMAT_VERSION, GenerationSettings, LineTakes, Project, Take
from s2studio.state.project_files import load_project, read_project, save_project
from s2studio.state.schema import SchemaError
from s2studio.state.take_files import take_files


def _tree(root: Path) -> dict[str, int]:
    """Every path under `root` (links not followed) -> its size, to see what changed."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath, n)
            out[str(p.relative_to(root))] = p.lstat().st_size if not p.is_dir() or p.is_symlink() else -1
    return out


@pytest.mark.parametrize("case", MALFORMED, ids=lambda c: c.name)
def test_a_malformed_document_is_one_error_naming_the_field(case, tmp_path):
    folder = make_malformed(case, tmp_path / "p.s2proj")
    with pytest.raises(UserError) as err:
        read_project(folder)
    message = str(err.value)
    assert message.startswith(f"{folder / 'project.json'}: ")
    assert re.search(case.message, message), message
    assert "\n" not in message and "\x1b" not in message and "Traceback" not in message
    with pytest.raises(UserError, match=re.escape(message)):
        load_project(folder)


def test_the_current_format_and_older_documents_open(tmp_path):
    folder = write_project(tmp_path / "now.s2proj", valid_document())
    project = read_project(folder).project
    assert project.settings == GenerationSettings(seed_mode="fixed", seed=5, temperature=0.6, speed="exact")
    assert [t.take_id for t in project.lines[LINE].takes] == list(TAKE_IDS)
    assert project.lines[LINE].picked == 1 and project.gap_s == 0.4 and project.cast == {"Alice": "v0123456789ab"}
    older = valid_document()
    for key in ("settings", "gap_s", "title", "format"):
        del older[key]
    for row in older["lines"][LINE]["takes"]:
        del row["fingerprint"], row["seed"]
    project = read_project(write_project(tmp_path / "old.s2proj", older)).project
    assert (project.settings, project.gap_s, project.title) == (GenerationSettings(), 0.4, "")
    assert [t.seed for t in project.lines[LINE].takes] == [0, 0, 0]
    newer = {**valid_document(), "format": FORMAT_VERSION + 1}
    with pytest.raises(UserError, match="saved by a newer S2 Studio"):
        read_project(write_project(tmp_path / "new.s2proj", newer))


@pytest.mark.parametrize("name", sorted(UNREADABLE_TAKES))
def test_an_unreadable_take_is_reported_not_dropped(name, tmp_path):
    folder = make_unreadable(name, tmp_path / "data" / "projects" / "p.s2proj")
    opened = read_project(folder)
    assert [t.take_id for t in opened.project.lines[LINE].takes] == [TAKE_IDS[0], TAKE_IDS[2]]
    assert opened.project.lines[LINE].picked == 1  # the picked take was the damaged one: the last left
    assert len(opened.problems) == 1
    problem = opened.problems[0]
    assert problem.startswith(f'take {TAKE_IDS[1]} ("Hello there.") left out: ')
    assert re.search(UNREADABLE_TAKES[name][2], problem), problem
    assert "allow_pickle" not in problem and "unsafe" not in problem
    with pytest.raises(UserError, match=re.escape(problem)):
        load_project(folder)


def test_a_traversal_project_reads_and_writes_nothing_outside_its_folder(tmp_path):
    """The take id of the issue climbed five folders; links inside a folder reach out too."""
    root = tmp_path / "root"
    deep = root / "a" / "b" / "c" / "d" / "e"
    climbing = valid_document()
    climbing["lines"][LINE]["takes"][0]["take_id"] = "../../../../../x"
    write_project(deep / "climb.s2proj", climbing)
    outside = root / "elsewhere"
    write_project(outside, valid_document())  # real take files, reachable through links
    linked = write_project(deep / "linked.s2proj", valid_document())
    for p in (linked / "takes").iterdir():
        p.unlink()
    (linked / "takes").rmdir()
    (linked / "takes").symlink_to(outside / "takes")
    (deep / "linked.s2proj.tmp").symlink_to(outside)  # a crafted "interrupted save" pointing out
    before = _tree(root)

    with pytest.raises(UserError, match="take_id must be a take id"):
        read_project(deep / "climb.s2proj")
    opened = read_project(linked)
    assert opened.project.lines == {} and len(opened.problems) == 3  # nothing read through the link
    assert all("takes folder is missing or not a plain folder" in p for p in opened.problems)
    opened.project.add_take(Take("ffffffffffff", LINE, "new", np.zeros(100, np.float32), np.zeros((10, 1), np.int64),
                                 1, "fp"))
    save_project(opened.project, linked)

    after = _tree(root)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert all(k.startswith("a/b/c/d/e/linked.s2proj") for k in changed), sorted(changed)
    assert not (linked / "takes").is_symlink()
    assert _tree(outside) == {k.removeprefix("elsewhere/"): v for k, v in before.items()
                              if k.startswith("elsewhere/")}
    with pytest.raises(ValueError, match="not a fresh take id"):
        save_project(Project(lines={LINE: LineTakes(
            [Take("../../x", LINE, "t", np.zeros(10, np.float32), np.zeros((10, 1), np.int64), 1, "")], 0)}),
            deep / "evil.s2proj")
    assert not (deep / "evil.s2proj").exists() and not (root / "a" / "x.flac").exists()


def test_saving_over_a_folder_that_is_not_a_project_is_refused(tmp_path):
    precious = tmp_path / "Documents.s2proj"
    precious.mkdir()
    (precious / "letter.txt").write_text("keep me")
    with pytest.raises(UserError, match="exists and is not an S2 Studio project; choose another name"):
        save_project(Project(script="x"), precious)
    assert (precious / "letter.txt").read_text() == "keep me"


def test_a_lone_old_folder_is_restored(tmp_path):
    path = save_project(Project(script="kept"), tmp_path / "p.s2proj")
    path.rename(tmp_path / "p.s2proj.old")
    assert load_project(path).script == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.s2proj"]


def test_an_autosave_carries_the_path_it_belongs_to(tmp_path):
    origin = Path(os.fsdecode(b"/home/someone/caf\xe9 \xff.s2proj"))  # not UTF-8: a surrogate escape
    path = save_project(Project(script="x"), tmp_path / "autosave", autosave_of=origin)
    assert read_project(path).autosave_of == origin
    assert read_project(save_project(Project(), tmp_path / "plain")).autosave_of is None


def test_project_files_get_the_umask_mode(tmp_path):
    with umask_set(0o022):
        p = Project()
        p.add_take(Take("abcdefabcdef", "l1", "t", np.zeros(500, np.float32), np.zeros((10, 1), np.int64), 1, "fp"))
        path = save_project(p, tmp_path / "p")
    files = take_files(path, "abcdefabcdef")
    modes = {f.name: f.stat().st_mode & 0o777 for f in (path / "project.json", path / "journal.jsonl", files.audio,
                                                       files.codes, files.peaks)}
    assert set(modes.values()) == {0o644}, modes


def test_settings_are_validated_not_clamped():
    assert GenerationSettings.from_dict({}) == GenerationSettings()
    assert GenerationSettings.from_dict({"seed": 12, "bogus": 1, "temperature": 1}) == \
        GenerationSettings(seed=12, temperature=1.0)
    for data, message in (({"temperature": 5.0}, "settings.temperature must be between 0.05 and 1.95, got 5.0"),
                          ({"seed": "12"}, 'settings.seed must be an integer, got "12"'),
                          ({"top_k": True}, "settings.top_k must be an integer, got true"),
                          ({"quantize": "int3"}, 'settings.quantize must be one of "none", "int8"'),
                          ([], "settings must be an object, got a list")):
        with pytest.raises(SchemaError, match=re.escape(message)) as err:
            GenerationSettings.from_dict(data)
        assert isinstance(err.value, UserError)


def test_a_round_trip_through_the_document_keeps_every_field(tmp_path):
    doc = valid_document()
    folder = write_project(tmp_path / "a.s2proj", doc)
    again = save_project(read_project(folder).project, tmp_path / "b.s2proj")
    written = json.loads((again / "project.json").read_text())
    expected = copy.deepcopy(doc)
    expected.update(voice_names={}, with_voices=False, speaker_colors={})  # fields the document had not set: defaults
    expected.update(format=FORMAT_VERSION, generation=1)  # saved in today's format
    for row in expected["lines"][LINE]["takes"]:  # what its files hold, found from their headers when it opened
        flac, codes = (folder / "takes" / (row["take_id"] + suffix) for suffix in (".flac", ".npy"))
        row["sizes"] = {"samples": 4096, "audio": flac.stat().st_size, "codes": codes.stat().st_size}
    assert written == expected


def test_a_project_json_that_is_a_link_is_not_followed(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps(valid_document()))
    folder = write_project(tmp_path / "p.s2proj", valid_document())
    (folder / "project.json").unlink()
    (folder / "project.json").symlink_to(secret)
    with pytest.raises(UserError, match="project.json is not a plain file; the project file is damaged"):
        read_project(folder)
