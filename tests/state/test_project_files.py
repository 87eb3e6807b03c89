"""Project files: a save/load round trip keeps everything; damaged or foreign folders give one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from s2studio.errors import UserError
from s2studio.state.project import GenerationSettings, Project, Take
from s2studio.state.project_files import load_project, save_project
from s2studio.state.take_files import take_files


def _take(take_id: str, line_id: str, n: int, seed: int) -> Take:
    audio = (np.sin(np.arange(n) / 7.0) * 0.5).astype(np.float32)
    return Take(take_id, line_id, "Hello [sigh] there.", audio, np.arange(20, dtype=np.int64).reshape(10, 2), seed,
                "fp-" + take_id)


def test_round_trip(tmp_path):
    project = Project(script="Alice: Hello [sigh] there.\n", cast={"Alice": "v0123456789ab"},
                      settings=GenerationSettings(seed_mode="fixed", seed=5, temperature=0.6, speed="fast"),
                      title="Scene", gap_s=0.75)
    project.add_take(_take("t1", "l1", 1000, 1))
    project.add_take(_take("t2", "l1", 1200, 2))
    project.pick("l1", 0)
    path = save_project(project, tmp_path / "scene")
    assert path.name == "scene.s2proj"
    back = load_project(path)
    assert (back.script, back.cast, back.settings, back.title) == (project.script, project.cast, project.settings,
                                                                   "Scene")
    assert back.gap_s == 0.75
    assert back.lines["l1"].picked == 0
    assert [t.take_id for t in back.lines["l1"].takes] == ["t1", "t2"]
    for a, b in zip(project.lines["l1"].takes, back.lines["l1"].takes):
        assert np.abs(a.audio - b.audio).max() < 2 ** -22  # 24-bit FLAC
        assert np.array_equal(a.codes, b.codes) and (a.seed, a.fingerprint) == (b.seed, b.fingerprint)


def test_save_replaces_an_existing_project_whole(tmp_path):
    first = Project(script="one")
    first.add_take(_take("old", "l1", 100, 1))
    path = save_project(first, tmp_path / "p.s2proj")
    second = Project(script="two")
    save_project(second, path)
    assert load_project(path).script == "two"
    assert not take_files(path, "old").audio.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.s2proj"]


def test_errors(tmp_path):
    with pytest.raises(UserError, match=r"is not an S2 Studio project \(project.json is missing\)"):
        load_project(tmp_path)
    (tmp_path / "project.json").write_text("{not json")
    with pytest.raises(UserError, match="it is not JSON .*; the project file is damaged"):
        load_project(tmp_path)
    (tmp_path / "project.json").write_text('{"format": 99}')
    with pytest.raises(UserError, match="saved by a newer S2 Studio"):
        load_project(tmp_path)


def test_saving_again_reuses_take_files(tmp_path):
    project = Project(script="x")
    project.add_take(_take("t1", "l1", 500, 1))
    path = save_project(project, tmp_path / "p.s2proj")
    inode = take_files(path, "t1").audio.stat().st_ino
    project.add_take(_take("t2", "l1", 600, 2))
    save_project(project, path)
    assert take_files(path, "t1").audio.stat().st_ino == inode  # not written again
    assert [t.take_id for t in load_project(path).lines["l1"].takes] == ["t1", "t2"]
