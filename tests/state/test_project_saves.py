"""Saving as a database would: a save writes only what changed (one journal line), and a failure or a kill at
any write step of any kind of save leaves the folder holding the save before or the save after, never less;
the next save then goes through."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
from dataclasses import replace
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from s2studio.errors import UserError
from s2studio.state.project import GenerationSettings, Project, Take
from s2studio.state.project_files import read_project, recover
from s2studio.state.project_folder import ProjectFolder
from s2studio.state.project_journal import capture
from s2studio.state.take_files import take_files
from project_changes import RandomChanges

WRITE_STEPS = ("open", "write", "fsync", "replace", "rename", "link", "mkdir", "ftruncate")
"""The calls that change a disk (an `open` only when it creates or writes)."""


def make_take(take_id: str, line_id: str, n: int, seed: int) -> Take:
    audio = (0.3 * np.sin(np.arange(n) * (0.01 + seed / 100))).astype(np.float32)
    return Take(take_id, line_id, f"text of {take_id}", audio, np.full((10, 3), seed, np.int64), seed)


def base_project() -> Project:
    p = Project(script="Alice: One.\nBob: Two.\n", line_ids=["l1", "l2"], title="Scene")
    p.add_take(make_take("aa0001", "l1", 3000, 1))
    p.add_take(make_take("bb0002", "l2", 2000, 2))
    return p


def changed(p: Project) -> Project:
    """What a session does to the project between two saves: an edit, a new take, another pick, a deletion."""
    p.script = "Alice: One, again.\nBob: Two.\n"
    p.add_take(make_take("cc0003", "l1", 5000, 3))
    p.pick("l1", 0)
    p.title = "Scene 2"
    p.add_take(make_take("dd0004", "l2", 800, 4), pick=False)
    p.delete_take("l2", "dd0004")
    return p


def state_of(path: Path) -> object:
    """What a person would find on opening `path` (None: no project there)."""
    recover(path)
    if not path.exists():
        return None
    opened = read_project(path)
    assert opened.problems == ()
    p = opened.project
    return (p.script, p.title, p.line_ids, {
        k: (e.picked, [(t.take_id, t.seed, hashlib.sha1(t.audio.tobytes()).hexdigest(), t.codes.tolist())
                       for t in e.takes]) for k, e in p.lines.items()})


def format1(folder: Path, project: Project) -> None:
    """`project` as the studio wrote it before (format 1: flat takes, no peaks, no journal)."""
    (folder / "takes").mkdir(parents=True)
    lines = {}
    for line_id, entry in project.lines.items():
        for t in entry.takes:
            sf.write(folder / "takes" / f"{t.take_id}.flac", t.audio, 44100, subtype="PCM_24")
            np.save(folder / "takes" / f"{t.take_id}.npy", t.codes)
        lines[line_id] = {"picked": entry.picked, "takes": [{"take_id": t.take_id, "text": t.text, "seed": t.seed}
                                                             for t in entry.takes]}
    doc = {"format": 1, "title": project.title, "script": project.script, "line_ids": project.line_ids, "lines": lines}
    (folder / "project.json").write_text(json.dumps(doc))


# Each kind of save: (set the folder up, return its writer and the project to save).
Setup = Callable[[Path], tuple[ProjectFolder, Project]]


def _new(path: Path) -> tuple[ProjectFolder, Project]:
    return ProjectFolder(path), base_project()


def _append(path: Path) -> tuple[ProjectFolder, Project]:
    p = base_project()
    folder = ProjectFolder(path)
    folder.save(capture(p))
    return folder, changed(p)


def _compaction(path: Path) -> tuple[ProjectFolder, Project]:
    folder, p = _append(path)
    folder.save(capture(p))
    folder.document_bytes = 0
    p.add_take(make_take("ee0005", "l2", 900, 5))
    p.delete_take("l1", "aa0001")  # its files go at the compaction
    folder.journal_at += 2 << 20
    return folder, p


def _migration(path: Path) -> tuple[ProjectFolder, Project]:
    format1(path, base_project())
    folder, opened = ProjectFolder.open(path)
    return folder, changed(opened.project)


def _over_another(path: Path) -> tuple[ProjectFolder, Project]:
    other = Project(script="Someone else's.")
    other.add_take(make_take("ff0006", "x", 400, 6))
    ProjectFolder(path).save(capture(other))
    return ProjectFolder(path), base_project()


SETUPS: dict[str, Setup] = {"new folder": _new, "journal append": _append, "compaction": _compaction,
                            "format 1 migration": _migration, "save over another project": _over_another}


@contextmanager
def counting(action: Callable[[str], None] | None = None, at: int = -1) -> Iterator[list[str]]:
    """Count the write steps inside the block; `action(step)` runs before step number `at` (from 0)."""
    calls: list[str] = []
    real = {name: getattr(os, name) for name in WRITE_STEPS}

    def wrap(name: str) -> Callable[..., object]:
        def step(*args: object, **kwargs: object) -> object:
            if name != "open" or int(args[1]) & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):  # type: ignore[call-overload]
                calls.append(name)
                if len(calls) - 1 == at and action is not None:
                    action(name)
            return real[name](*args, **kwargs)
        return step

    for name in WRITE_STEPS:
        setattr(os, name, wrap(name))
    try:
        yield calls
    finally:
        for name, fn in real.items():
            setattr(os, name, fn)


def no_space(step: str) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def _expected(kind: str, tmp_path: Path) -> tuple[object, object, int]:
    """(state before, state after, write steps) of a save of this kind that nothing disturbs."""
    path = tmp_path / "reference" / "p.s2proj"
    path.parent.mkdir()
    folder, project = SETUPS[kind](path)
    before = state_of(path)
    with counting() as calls:
        folder.save(capture(project))
    return before, state_of(path), len(calls)


def _hidden(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in root.rglob(".*")]


@pytest.mark.parametrize("kind", SETUPS)
def test_a_failure_at_any_write_step_loses_nothing(kind, tmp_path):
    before, after, steps = _expected(kind, tmp_path)
    assert before != after and steps > 5
    for k in range(steps):
        path = tmp_path / f"run{k}" / "p.s2proj"
        path.parent.mkdir()
        folder, project = SETUPS[kind](path)
        try:
            with counting(no_space, k):
                folder.save(capture(project))
        except UserError as exc:
            assert "No space left on device" in str(exc) and "\n" not in str(exc)
            assert state_of(path) in (before, after), f"step {k}"
        else:
            assert state_of(path) == after, f"step {k}"
        assert _hidden(path.parent) == [], f"step {k}"  # no temp file left behind
        folder.save(capture(project))  # the disk has room again: the same writer goes on
        assert state_of(path) == after, f"step {k}"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="kills a forked copy of the test")
@pytest.mark.parametrize("kind", ["new folder", "journal append", "compaction", "format 1 migration"])
def test_killed_at_any_write_step_loses_nothing(kind, tmp_path):
    before, after, steps = _expected(kind, tmp_path)
    for k in range(steps):
        path = tmp_path / f"run{k}" / "p.s2proj"
        path.parent.mkdir()
        folder, project = SETUPS[kind](path)
        child = os.fork()
        if child == 0:  # a crash: no cleanup, no finally, at step k
            try:
                with counting(lambda _step: os._exit(9), k):
                    folder.save(capture(project))
            finally:
                os._exit(0)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 9, f"step {k}"
        assert state_of(path) in (before, after), f"step {k}"
        again = ProjectFolder.open(path)[0] if path.exists() else ProjectFolder(path)
        again.save(capture(project))  # the next session saves the same project
        assert state_of(path) == after, f"step {k}"


def test_a_save_writes_only_what_changed(tmp_path):
    p = Project(script="".join(f"Alice: Line number {i} of the book.\n" for i in range(2000)),
                line_ids=[f"l{i}" for i in range(2000)])
    for i in range(0, 2000, 10):
        p.add_take(make_take(f"t{i:05d}", f"l{i}", 500, i))
    folder = ProjectFolder(tmp_path / "book.s2proj")
    folder.save(capture(p))
    doc = folder.path / "project.json"
    stamp = (doc.stat().st_ino, doc.stat().st_mtime_ns)
    flac = take_files(folder.path, "t00000").audio
    inode = flac.stat().st_ino
    p.script = p.script.replace("Line number 1000 ", "Line number one thousand ")
    p.add_take(make_take("new001", "l1000", 500, 7))
    folder.save(capture(p))
    folder.save(capture(p))  # nothing changed: nothing written
    journal = (folder.path / "journal.jsonl").read_bytes().splitlines()
    assert len(journal) == 2  # the header and one save
    record = json.loads(journal[1].rpartition(b" ")[0])
    assert record["script"][2] == "one thousand" and set(record["lines"]) == {"l1000"}
    assert len(journal[1]) < 400
    assert (doc.stat().st_ino, doc.stat().st_mtime_ns) == stamp and flac.stat().st_ino == inode
    reopened = read_project(folder.path).project
    assert reopened.script == p.script and [t.take_id for t in reopened.lines["l1000"].takes] == ["t01000", "new001"]


def test_a_torn_tail_is_ignored_and_damage_is_reported_and_kept(tmp_path):
    p = base_project()
    folder = ProjectFolder(tmp_path / "p.s2proj")
    folder.save(capture(p))
    p.title = "Second"
    folder.save(capture(p))
    journal = folder.path / "journal.jsonl"
    good = journal.read_bytes()
    journal.write_bytes(good + b'{"n":2,"set":{"title":"Thi')  # a save the crash cut short
    opened = ProjectFolder.open(folder.path)
    assert opened[1].project.title == "Second" and opened[1].problems == ()
    p.title = "Third"
    opened[0].save(capture(p))  # the torn tail is cut off first
    assert read_project(folder.path).project.title == "Third"
    lines = journal.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b"Second", b"Secund")  # a bit flipped on the disk: the CRC says so
    journal.write_bytes(b"".join(lines))
    writer, opened = ProjectFolder.open(folder.path)
    assert opened.project.title == "Scene" and len(opened.problems) == 1
    assert "line 2 is damaged" in opened.problems[0] and "left out" in opened.problems[0]
    writer.save(capture(p))
    assert read_project(folder.path).project.title == "Third"
    kept = list(folder.path.glob("journal-damaged-*.jsonl"))
    assert len(kept) == 1 and b"Secund" in kept[0].read_bytes()


def test_a_journal_older_than_its_document_is_ignored(tmp_path):
    """A crash between a compaction's two renames: project.json is new, the journal still the old one."""
    p = base_project()
    folder = ProjectFolder(tmp_path / "p.s2proj")
    folder.save(capture(p))
    p.title = "From the journal"
    folder.save(capture(p))
    old_journal = (folder.path / "journal.jsonl").read_bytes()
    ProjectFolder(folder.path).save(capture(p))  # compaction: generation 2
    (folder.path / "journal.jsonl").write_bytes(old_journal)
    opened = read_project(folder.path)
    assert opened.project.title == "From the journal" and opened.problems == ()


def test_a_deleted_take_keeps_its_audio_after_its_files_are_collected(tmp_path):
    p = base_project()
    folder = ProjectFolder(tmp_path / "p.s2proj")
    folder.save(capture(p))
    take = p.lines["l2"].takes[0]
    audio = take.audio.copy()
    files = take.files
    p.delete_take("l2", "bb0002")
    ProjectFolder(folder.path).save(capture(p))  # a compaction: the files go
    assert not files.audio.exists() and not files.codes.exists()
    p.restore_take(take, 0, True)  # Undo
    assert np.array_equal(take.audio, audio)
    folder.save(capture(p))
    assert np.array_equal(read_project(folder.path).project.lines["l2"].takes[0].audio, audio)


def test_a_new_take_is_written_once(tmp_path):
    p = base_project()
    folder = ProjectFolder(tmp_path / "p.s2proj")
    folder.save(capture(p))
    take = make_take("cc0003", "l1", 5000, 3)
    p.add_take(take)
    folder.write_takes([take])
    assert take.files == take_files(folder.path, "cc0003") and not take.sound.in_memory
    inode = take.files.audio.stat().st_ino
    folder.save(capture(p))
    ProjectFolder(folder.path).save(capture(p))
    assert take.files.audio.stat().st_ino == inode
    assert sys.getrefcount(take) > 1


MANY_TAKES = """
import resource, sys
from pathlib import Path
import numpy as np
from s2studio.state.project import Project, Take
from s2studio.state.project_files import read_project
from s2studio.state.project_folder import ProjectFolder
from s2studio.state.project_journal import capture
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))  # macOS's default; the soft limit cannot be raised past it
n = 400
p = Project(script="".join(f"Ann: Line {i}.\\n" for i in range(n)), line_ids=[f"l{i}" for i in range(n)])
for i in range(n):
    p.add_take(Take(f"t{i:04d}", f"l{i}", f"Line {i}.", np.full(200, i / 1000, np.float32),
                    np.full((10, 2), i, np.int64), i))
ProjectFolder(Path(sys.argv[1])).save(capture(p))
back = read_project(Path(sys.argv[1])).project
print(sum(len(e.takes) for e in back.lines.values()), round(float(back.lines["l399"].takes[0].audio[0]), 3))
"""


def test_a_save_of_more_takes_than_the_open_files_limit(tmp_path):
    """An autosave after an instant render of a book writes every take at once: 3 files a take, never all open."""
    run = subprocess.run([sys.executable, "-c", MANY_TAKES, str(tmp_path / "p.s2proj")], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["400", "0.399"]


def test_a_takes_check_is_saved_with_it_as_a_change_of_its_line_and_read_back_equal(tmp_path):
    from s2studio.state.take_check import CheckResult, TakeCheck

    p = base_project()
    folder = ProjectFolder(tmp_path / "p.s2proj")
    folder.save(capture(p))
    take = p.lines["l1"].takes[0]
    found = TakeCheck((CheckResult("words", "failed", 0.5, 0.25, "missed “river”"),
                       CheckResult("runaway", "skipped", 1.0, None, "frame limit unknown")), "key0")
    take.check = found
    p.touch(take)
    folder.save(capture(p))
    journal = (folder.path / "journal.jsonl").read_bytes().splitlines()
    record = json.loads(journal[-1].rpartition(b" ")[0])
    assert set(record["lines"]) == {"l1"}
    assert read_project(folder.path).project.lines["l1"].takes[0].check == found
    doc = json.loads((folder.path / "project.json").read_text("utf-8"))
    row = doc["lines"]["l1"]["takes"][0]
    row["check"] = {"key": "k", "checks": [{"name": "words", "verdict": "great", "score": 1.0, "reason": ""}]}
    (folder.path / "journal.jsonl").unlink()
    (folder.path / "project.json").write_text(json.dumps(doc), "utf-8")
    with pytest.raises(UserError, match=r"takes\[0\]\.check\.checks\[0\]\.verdict must be one of"):
        read_project(folder.path)


def test_a_save_after_a_few_changes_reads_only_their_lines_and_reads_back_equal(tmp_path, monkeypatch):
    """The cost of an append is what changed: the rows keyed, the takes whose ids are checked and whose files are
    looked for are those of the lines changed since the save before, not the 2,000 of the book."""
    from s2studio.state import project_journal
    from s2studio.state.script import parse_script
    from s2studio.state.staleness import take_settings, upgrade_takes
    from s2studio.state.take_check import CheckResult, TakeCheck

    p = Project(script="", line_ids=[f"l{i}" for i in range(2000)])
    for i in range(2000):
        p.add_take(make_take(f"t{i:05d}", f"l{i}", 200, i))
    aged = p.lines["l8"].takes[0]  # as saved before fingerprints were as they are now
    aged.text, aged.speaker, aged.voice, aged.settings = "Hello.", "Alice", "", take_settings(GenerationSettings())
    aged.fingerprint = "an older hash"
    folder = ProjectFolder(tmp_path / "book.s2proj")
    folder.save(capture(p))
    keyed: list[int] = []
    looked_at: list[str] = []
    key_line, place = project_journal._keyed_line, ProjectFolder._place_takes
    monkeypatch.setattr(project_journal, "_keyed_line", lambda line: keyed.append(1) or key_line(line))
    monkeypatch.setattr(ProjectFolder, "_place_takes", lambda self, takes, *rest: (
        looked_at.extend(t.take_id for t in takes), place(self, takes, *rest))[1])

    checked = p.lines["l5"].takes[0]
    checked.check = TakeCheck((CheckResult("words", "passed", 1.0, 0.0, ""),), "key5")
    p.touch(checked)
    p.add_take(make_take("n00001", "l6", 300, 9))
    p.delete_take("l7", "t00007")
    upgrade_takes(p, [replace(parse_script("Alice: Hello.").lines[0], line_id="l8")], {})
    folder.save(capture(p))
    assert len(keyed) == 3 and sorted(looked_at) == ["n00001", "t00005", "t00006", "t00008"]
    journal = (folder.path / "journal.jsonl").read_bytes().splitlines()
    record = json.loads(journal[-1].rpartition(b" ")[0])
    assert set(record["lines"]) == {"l5", "l6", "l7", "l8"} and record["lines"]["l7"] is None

    reopened = read_project(folder.path).project
    assert reopened.lines["l5"].takes[0].check == checked.check
    assert [t.take_id for t in reopened.lines["l6"].takes] == ["t00006", "n00001"] and "l7" not in reopened.lines
    assert reopened.lines["l8"].takes[0].fingerprint == aged.fingerprint != "an older hash"


def test_appends_after_any_sequence_of_changes_read_back_as_the_project(tmp_path):
    """Takes made, picked, deleted, restored and checked between saves: each save appends what changed since the
    one before, and the folder reads back as the project is, row fields included."""
    p = Project(script="", line_ids=[f"l{i}" for i in range(40)])
    changes = RandomChanges(5, 40, lambda take_id, line_id: make_take(take_id, line_id, 50, changes.made),
                            checks=True)
    folder = ProjectFolder(tmp_path / "p.s2proj")

    def rows(project: Project) -> dict[str, object]:
        return {k: (e.picked, [(t.take_id, t.fingerprint, t.check) for t in e.takes])
                for k, e in project.lines.items()}

    for round_ in range(30):
        changes.round(p, 5, round_)
        folder.save(capture(p))
        if round_ % 6 == 5:
            assert rows(read_project(folder.path).project) == rows(p), f"round {round_}"
    assert folder.records > 20  # appends, not whole documents
    assert rows(read_project(folder.path).project) == rows(p)


def test_a_document_written_whole_is_written_in_pieces_as_one_dump_would_write_it(tmp_path, monkeypatch):
    """The document of a compaction goes to disk a few thousand of the encoder's chunks at a time (a book's joined
    into one string held the interpreter for tens of ms), byte for byte what one `json.dumps` gives."""
    from s2studio.state import project_folder
    from s2studio.state.project_document import whole_document

    p = Project(script="".join(f"Alice: Line {i} “quoted”.\n" for i in range(300)),
                line_ids=[f"l{i}" for i in range(300)], title="Große Bühne")
    for i in range(0, 300, 3):
        p.add_take(make_take(f"t{i:05d}", f"l{i}", 100, i))
    pieces: list[int] = []
    add = project_folder._JsonPieces.__iter__
    monkeypatch.setattr(project_folder._JsonPieces, "PIECE_CHUNKS", 500)
    monkeypatch.setattr(project_folder._JsonPieces, "__iter__",
                        lambda self: (pieces.append(len(piece)) or piece for piece in add(self)))
    folder = ProjectFolder(tmp_path / "p.s2proj")
    folder.save(capture(p))
    written = (folder.path / "project.json").read_bytes()
    one_dump = json.dumps(whole_document(capture(p).keyed(), folder.generation), indent=1, ensure_ascii=False,
                          allow_nan=False).encode("utf-8")
    assert written == one_dump and len(pieces) > 10 and sum(pieces) == len(written) == folder.document_bytes
    assert read_project(folder.path).project.title == "Große Bühne"
