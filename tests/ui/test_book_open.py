"""Opening a book: what shows a whole project at once (the cast's rows, ...) is built over several passes of the
event loop, so that the window keeps answering, ends as if built at once, and loses nothing done meanwhile.
Counted, not timed."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication

from s2studio.state import project_voices, staleness
from s2studio.state.take_check import TakeCheck
from s2studio.ui.control import document as document_module
from s2studio.ui.control import parse_ahead as parse_ahead_module
from s2studio.ui.control import slices, take_checks
from s2studio.ui.dialogs import project_commands
from s2studio.ui.script import cast_panel as cast_module
from s2studio.ui.script.cast_panel import CastPanel
from s2studio.ui.window import line_states as line_states_module
from ui_helpers import cast_two_voices, close_studio, fake_engine, open_studio, shown_all

SPEAKERS = [f"Speaker{i:02d}" for i in range(20)]
VOICES = [(f"v{i}", f"Voice {i}") for i in range(5)]


def chosen(panel: CastPanel) -> dict[str, str]:
    return {s: combo.currentData() for s, combo in panel.combos.items()}


def test_a_large_cast_is_built_a_few_rows_a_pass_and_a_pick_meanwhile_is_kept(qtbot, monkeypatch):
    monkeypatch.setattr(slices, "BUDGET_S", 0.0)  # one row a pass
    panel = CastPanel()
    qtbot.addWidget(panel)
    panel.show()
    panel.set_voices(VOICES)
    picked: list[tuple[str, str]] = []
    panel.cast_changed.connect(lambda speaker, vid: picked.append((speaker, vid)))
    cast = {s: VOICES[i % len(VOICES)][0] for i, s in enumerate(SPEAKERS)}
    panel.set_speakers(SPEAKERS, cast, {s: i for i, s in enumerate(SPEAKERS)})
    assert list(panel.combos) == SPEAKERS[:1]  # the rest after the window answered
    assert panel.building()
    panel.combos[SPEAKERS[0]].setCurrentIndex(panel.combos[SPEAKERS[0]].findData("v4"))  # a pick meanwhile
    passes = 1
    while panel.building():
        QApplication.processEvents()
        passes += 1
        assert len(panel.combos) <= passes
    assert passes >= len(SPEAKERS)
    assert picked == [(SPEAKERS[0], "v4")]
    assert chosen(panel) == {**cast, SPEAKERS[0]: "v4"}
    assert [panel.combos[s].objectName() for s in SPEAKERS] == [f"cast:{s}" for s in SPEAKERS]
    monkeypatch.setattr(cast_module, "AT_ONCE", len(SPEAKERS))  # the same cast built in one pass: the same rows
    everyone = CastPanel()
    qtbot.addWidget(everyone)
    everyone.set_voices(VOICES)
    everyone.set_speakers(SPEAKERS, {**cast, SPEAKERS[0]: "v4"}, {s: i for i, s in enumerate(SPEAKERS)})
    assert not everyone.building()
    assert chosen(everyone) == chosen(panel)
    assert everyone.summary.text() == panel.summary.text()


def test_a_new_cast_while_the_last_is_built_builds_only_the_new_one(qtbot):
    panel = CastPanel()
    qtbot.addWidget(panel)
    panel.set_voices(VOICES)
    panel.set_speakers(SPEAKERS, {}, {s: i for i, s in enumerate(SPEAKERS)})
    panel.set_speakers(["Alice", "Bob"], {"Bob": "v1"}, {"Alice": 0, "Bob": 1})
    qtbot.waitUntil(lambda: not panel.building())
    QApplication.processEvents()
    assert chosen(panel) == {"Alice": "", "Bob": "v1"}


# -- the studio opening a project ------------------------------------------------------------------


@pytest.fixture
def studio(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, lambda: fake_engine(4, 0.0))
    w.check_commands.checks.enabled = False  # no checker process: what is queued is counted below
    yield w
    close_studio(w)


def rendered_project(qtbot, w, tmp_path) -> tuple[Path, str]:
    """A saved project of 24 rendered lines, one of them edited since (stale); its path and that line's id."""
    cast_two_voices(w, tmp_path, "".join(f"{'Alice' if i % 2 else 'Bob'}: Line number {i}.\n" for i in range(24)))
    qtbot.waitUntil(w.actions_by_name["render_all"].isEnabled, timeout=10000)
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: not w.flow.busy and len(w.document.project.lines) == 24, timeout=30000)
    edited = w.document.script.lines[5]
    cursor = w.editor.textCursor()
    cursor.setPosition(edited.end)
    cursor.insertText(" Changed")
    w.reparse()
    path = tmp_path / "book.s2proj"
    assert w.projects.save_as(path)
    qtbot.waitUntil(lambda: not w.store.unsaved_work, timeout=10000)
    return path, edited.line_id


def shown(w) -> dict:
    """What the window shows of a project: lines, states drawn on the timeline and in the gutter, cast."""
    script = w.document.script
    return {"text": w.editor.toPlainText(), "ids": script.line_ids, "stale": w.player_bar.waveform.stale_lines,
            "marks": [w.lines.mark_at(i) for i in range(w.editor.document().blockCount())],
            "cast": {s: c.currentData() for s, c in w.cast_panel.combos.items()},
            "timeline": tuple(t.line_id for t in w.timeline.layout.tracks)}


def test_a_book_opened_is_shown_in_slices_and_an_edit_and_a_click_meanwhile_are_kept(qtbot, studio, tmp_path,
                                                                                      monkeypatch):
    w = studio
    path, edited = rendered_project(qtbot, w, tmp_path)
    monkeypatch.setattr(slices, "BUDGET_S", 10.0)  # at once: what the window shows when every slice is done
    hashed_here: list[str] = []  # the texts whose fingerprint the window's thread made
    fingerprint = staleness.take_fingerprint
    monkeypatch.setattr(staleness, "take_fingerprint", lambda text, *rest: (
        threading.current_thread() is threading.main_thread() and hashed_here.append(text), fingerprint(text, *rest))[1])
    assert w.projects.open(path)
    qtbot.waitUntil(lambda: shown_all(w))
    at_once = shown(w)
    assert at_once["stale"] == {edited} and len(at_once["ids"]) == 24
    assert w.lines._recount.passes == 1  # the 24 lines in one step
    assert set(hashed_here) == {w.document.script.line(edited).text}  # only the stale line's: the fresh ones'
    # fields all match what is asked now (a book's 10,000 fingerprints were a second of the window's thread)
    monkeypatch.setattr(slices, "BUDGET_S", 0.0)  # one step a pass
    monkeypatch.setattr(line_states_module, "LINES_A_STEP", 1)  # one line a step
    assert w.projects.open(path)
    recount = w.lines._recount
    assert w.editor.toPlainText() == at_once["text"]  # the text at once, the rest pass by pass
    assert w.showing.busy and not recount.busy
    target = w.document.script.lines[20]
    w.lines.select(target.line_id)  # a click on a line's mark meanwhile
    assert w.editor.textCursor().blockNumber() == target.source_line - 1
    cursor = w.editor.textCursor()
    cursor.setPosition(w.document.script.lines[2].end)
    w.editor.setTextCursor(cursor)
    qtbot.keyClicks(w.editor, " Typed")  # and an edit
    w.reparse()
    assert w.showing.busy
    qtbot.waitUntil(lambda: shown_all(w))
    assert w.showing.passes >= 4 and recount.passes >= 20  # it yielded to the event loop between parts, lines
    now = shown(w)
    typed = w.document.script.lines[2]
    assert typed.text.endswith("Typed") and "Typed" in now["text"]
    assert now["stale"] == {edited, typed.line_id}  # the edit's line too, as when it is typed after the open
    assert now["ids"] == at_once["ids"] and now["cast"] == at_once["cast"] and now["timeline"] == at_once["timeline"]
    expected = [m if m is None or m.line_id != typed.line_id else dataclasses.replace(m, kind="stale")
                for m in at_once["marks"]]
    assert now["marks"] == expected


def test_a_book_opened_has_its_takes_upgraded_off_the_windows_thread_and_its_checks_made_one_job_at_a_time(
        qtbot, studio, tmp_path, monkeypatch):
    w = studio
    path, _edited = rendered_project(qtbot, w, tmp_path)
    upgraded_here: list[int] = []
    real = document_module.Document._upgrade_takes
    monkeypatch.setattr(document_module.Document, "_upgrade_takes",
                        lambda self: (upgraded_here.append(1), real(self))[1])
    assert w.projects.open(path)
    assert upgraded_here == []  # the writer thread did it
    assert all(t.fingerprint for e in w.document.project.lines.values() for t in e.takes)
    checks = w.check_commands.checks
    checks.enabled = True
    monkeypatch.setattr(checks, "_start", lambda: None)  # nothing is checked: the jobs are read from the queue
    made: list[str] = []
    paces = checks.neighbour_paces
    monkeypatch.setattr(checks, "neighbour_paces", lambda line_id, speaker: (made.append(line_id),
                                                                              paces(line_id, speaker))[1])
    checks.check_project()
    assert made == [] and checks.busy  # from the next pass on
    qtbot.waitUntil(lambda: checks._queue.qsize() > 0)
    QApplication.processEvents()
    picked = [e.current.take_id for e in w.document.project.lines.values() if e.current is not None]
    assert len(picked) == 24 and all(checks.waiting(t) for e in w.document.project.lines.values() for t in e.takes)
    assert checks._queue.qsize() == len(made) == take_checks.AHEAD  # the others' jobs are made when they are next
    done: list[str] = []
    while checks.busy:  # the checker's results, one by one: each lets the next job be made
        job = checks._queue.get_nowait()
        done.append(job.take.take_id)
        checks._store(job, "not checked here")
        assert checks._queue.qsize() <= take_checks.AHEAD
    assert done == picked and len(made) == 24  # every take once, the picked ones first, each job made once


def test_a_project_whose_voices_the_library_lacks_is_resolved_remapped_and_parsed_off_the_windows_thread(
        qtbot, studio, tmp_path, monkeypatch):
    w = studio
    path, edited = rendered_project(qtbot, w, tmp_path)
    for voice_id in set(w.document.project.cast.values()):  # the same voices under other ids (another computer)
        w.library.delete(voice_id)
    a = w.library.create("A", [(tmp_path / "a.wav", "hello there")])
    b = w.library.create("B", [(tmp_path / "b.wav", "hi again")])
    w.voices.refresh()
    w.voice_commands.reread()
    here: list[str] = []  # the walks over every take (or line) that ran on the window's thread
    for module, name in ((project_voices, "_heard_in_takes"), (project_commands, "remap"),
                         (parse_ahead_module, "project_ids"), (document_module, "project_ids"),
                         (project_commands, "parse_ahead"), (project_commands, "upgrade_takes")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *args, _real=real, _name=name: (
            threading.current_thread() is threading.main_thread() and here.append(_name), _real(*args))[1])
    parses = w.document.parses_off_thread
    assert w.projects.open(path)
    assert here == []
    assert w.document.project.cast == {"Bob": b.id, "Alice": a.id}  # found by their clips
    assert w.document.script.warnings == ()  # parsed with the voices found: no speaker reads as unknown ...
    assert w.document.parses_off_thread == parses  # ... so it is not parsed again for its warnings
    qtbot.waitUntil(lambda: shown_all(w))
    assert w.player_bar.waveform.stale_lines == {edited}  # the takes remapped to the new ids still answer their lines
    assert w.store.unsaved_work  # the cast names this library's voices now


def test_a_projects_takes_to_check_are_listed_in_slices_the_picked_ones_first(qtbot, studio, tmp_path, monkeypatch):
    w = studio
    rendered_project(qtbot, w, tmp_path)
    w.actions_by_name["render_all"].trigger()  # a second take of every line
    qtbot.waitUntil(lambda: not w.flow.busy and all(len(e.takes) == 2 for e in w.document.project.lines.values()),
                    timeout=30000)
    checks = w.check_commands.checks
    checks.enabled = True
    monkeypatch.setattr(checks, "_start", lambda: None)
    monkeypatch.setattr(take_checks, "LINES_A_STEP", 5)
    monkeypatch.setattr(slices, "BUDGET_S", 0.0)  # a step a pass
    steps: list[int] = []

    class Counted(set):  # each step's takes, as the listing adds them (however many passes the machine's load runs)
        def update(self, *takes) -> None:  # noqa: ANN002
            before = len(self)
            super().update(*takes)
            steps.append(len(self) - before)

    checks._pending = Counted()
    checks.check_project()
    assert not checks._pending and checks.busy
    qtbot.waitUntil(lambda: not checks._listing.busy)
    assert steps and all(0 < n <= 5 for n in steps)  # five lines' takes a step
    assert checks._listing.passes >= 10  # 24 lines, 5 a step, twice (the picked takes, then the others)
    entries = list(w.document.project.lines.values())
    queued = [job.take.take_id for job in list(checks._queue.queue)] + [t.take_id for t in checks._waiting]
    assert queued == [e.current.take_id for e in entries] + [t.take_id for e in entries for t in e.takes
                                                              if t is not e.current]


def test_a_book_reopened_with_its_takes_checked_queues_no_check(qtbot, studio, tmp_path, monkeypatch):
    w = studio
    path, _edited = rendered_project(qtbot, w, tmp_path)
    checks = w.check_commands.checks
    again = set()
    for i, entry in enumerate(w.document.project.lines.values()):
        for take in entry.takes:  # every third line's takes checked with other settings: checked again
            w.document.set_check(take, TakeCheck((), "other settings" if i % 3 == 0 else checks.key))
            if i % 3 == 0:
                again.add(take.take_id)
    assert w.projects.save_as(path)
    qtbot.waitUntil(lambda: not w.store.unsaved_work, timeout=10000)
    checks.enabled = True
    monkeypatch.setattr(checks, "_start", lambda: None)
    assert w.projects.open(path)
    qtbot.waitUntil(lambda: not checks._listing.busy)
    jobs = [checks._queue.get_nowait() for _ in range(checks._queue.qsize())]
    assert len(again) == 8 and len(jobs) == take_checks.AHEAD
    queued = [job.take.take_id for job in jobs] + [t.take_id for t in checks._waiting]
    assert sorted(queued) == sorted(again)  # those checked with today's settings are not queued again


def test_slices_yield_between_passes_start_again_from_scratch_and_finish_at_once(qtbot, monkeypatch):
    monkeypatch.setattr(slices, "BUDGET_S", 0.0)
    done: list[str] = []
    seen: list[int] = []
    work = slices.Slices(seen.append, lambda: done.append("done"))
    work.start(range(5))
    assert seen == [0] and work.busy
    QApplication.processEvents()
    assert seen == [0, 1]
    work.start(range(10, 13), now=False)  # what was left of the first run is dropped
    assert seen == [0, 1]
    qtbot.waitUntil(lambda: not work.busy)
    assert seen == [0, 1, 10, 11, 12] and done == ["done"] and work.passes == 4  # the last finds nothing left
    work.start(range(100, 103))
    work.finish()
    assert seen[-3:] == [100, 101, 102] and done == ["done", "done"] and not work.busy


def test_the_windows_work_in_slices_shares_one_budget_a_pass_and_a_job_left_out_goes_first_next(qtbot, monkeypatch):
    qtbot.waitUntil(lambda: not slices.pass_budget()._waiting)  # no other work waiting
    monkeypatch.setattr(slices, "BUDGET_S", 0.0)  # a pass's budget spent by its first step
    ran: list[tuple[str, int]] = []
    a = slices.Slices(lambda i: ran.append(("a", i)))
    b = slices.Slices(lambda i: ran.append(("b", i)))
    a.start(range(3), now=False)
    b.start(range(3), now=False)
    QApplication.processEvents()
    assert ran == [("a", 0)]  # one pass: one step of one job, not a slice of each (they would add up)
    QApplication.processEvents()
    assert ran == [("a", 0), ("b", 0)]  # the job the budget did not reach went first
    qtbot.waitUntil(lambda: not a.busy and not b.busy)
    assert sorted(ran) == [(k, i) for k in "ab" for i in range(3)]
