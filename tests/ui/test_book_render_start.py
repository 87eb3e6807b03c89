"""Render All of a book: the first scene is compiled and handed to the engine at once, the others in the passes
after it (the first line does not wait for 200 scenes to be compiled and queued); a Stop meanwhile ends the render without queueing the
rest; each speaker's voice is keyed once for the takes' fingerprints, not once a line. Counted, not timed."""

from __future__ import annotations

import pytest

from s2studio.engine.fake import FakeEngine
from ui_helpers import cast_two_voices, close_studio, open_studio

SCENES = 6


@pytest.fixture
def studio(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, lambda: FakeEngine(frame_latency_s=0.0005, max_batch=4, min_frames=4))
    yield w
    close_studio(w)


def book(scenes: int, lines: int) -> str:
    rows = []
    for c in range(scenes):
        rows.append(f"# Chapter {c + 1}")
        rows += [f"{'Alice' if i % 2 else 'Bob'}: Line {i} of chapter {c + 1}." for i in range(lines)]
    return "\n".join(rows) + "\n"


def submitted(w, monkeypatch) -> list[str]:  # noqa: ANN001
    jobs: list[str] = []
    submit = w.ctx.host.submit

    def counted(job_id, work, exclusive=False):  # noqa: ANN001, ANN202
        jobs.append(job_id)
        return submit(job_id, work, exclusive)

    monkeypatch.setattr(w.ctx.host, "submit", counted)
    return jobs


def test_render_all_hands_the_engine_its_first_scene_at_once_and_the_others_after(qtbot, studio, tmp_path,
                                                                                  monkeypatch):
    from s2studio.ui.control import render

    w = studio
    cast_two_voices(w, tmp_path, book(SCENES, 3))
    qtbot.waitUntil(w.actions_by_name["render_all"].isEnabled, timeout=10000)
    keyed: list[str] = []
    voice_key = render.voice_key
    monkeypatch.setattr(render, "voice_key", lambda voice: keyed.append(voice.id) or voice_key(voice))
    jobs = submitted(w, monkeypatch)
    ended: list[bool] = []
    w.session.finished.connect(ended.append)
    w.actions_by_name["render_all"].trigger()
    assert len(jobs) == 1 and len(w.session.unsent) == SCENES - 1  # the first scene; the rest in later passes
    assert sorted(keyed) == sorted({w.document.project.cast["Alice"], w.document.project.cast["Bob"]})
    qtbot.waitUntil(lambda: bool(ended), timeout=30000)
    assert ended == [False] and len(jobs) == SCENES and not w.session.unsent
    assert all(w.document.project.current(line_id) is not None for line_id in w.document.script.line_ids)


def test_pressing_render_all_compiles_only_the_first_scene_in_its_pass(qtbot, studio, tmp_path, monkeypatch):
    """The other scenes are compiled as they are handed over, and what a line's take records is made when the take
    comes: the pass of a book's Render All does the work of one scene, not of 10,000 lines."""
    from s2studio.engine import plan
    from s2studio.ui.control import render

    w = studio
    cast_two_voices(w, tmp_path, book(SCENES, 3))
    qtbot.waitUntil(w.actions_by_name["render_all"].isEnabled, timeout=10000)
    compiled: list[str] = []
    asked: list[str] = []
    spec, ask = plan.LineSpec, render.Asked
    monkeypatch.setattr(plan, "LineSpec", lambda line_id, *a: compiled.append(line_id) or spec(line_id, *a))
    monkeypatch.setattr(render, "Asked", lambda speaker, text, *a: asked.append(text) or ask(speaker, text, *a))
    ended: list[bool] = []
    w.session.finished.connect(ended.append)
    line_ids = list(w.document.script.line_ids)
    w.actions_by_name["render_all"].trigger()
    assert compiled == line_ids[:3] and asked == []
    qtbot.waitUntil(lambda: bool(ended), timeout=30000)
    assert ended == [False] and compiled == line_ids  # each line compiled once, in order
    assert {w.document.project.current(i).text for i in line_ids} == set(asked)


def test_the_end_of_a_render_looks_at_the_lines_still_streaming_not_at_every_line(qtbot, studio, tmp_path,
                                                                                 monkeypatch):
    w = studio
    cast_two_voices(w, tmp_path, book(SCENES, 3))
    qtbot.waitUntil(w.actions_by_name["render_all"].isEnabled, timeout=10000)
    asked: list[str] = []
    ending: list[bool] = []
    partial, end = w.timeline.partial, w.session._end
    monkeypatch.setattr(w.timeline, "partial", lambda line_id: (ending and asked.append(line_id)) or partial(line_id))
    monkeypatch.setattr(w.session, "_end", lambda: (ending.append(True), end()))
    ended: list[bool] = []
    w.session.finished.connect(ended.append)
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: bool(ended), timeout=30000)
    assert ended == [False] and ending and len(asked) <= 1  # 18 lines: each asked before
    assert not any(partial(line_id) for line_id in w.document.script.line_ids)


def test_a_stop_before_every_scene_is_queued_ends_the_render_without_them(qtbot, studio, tmp_path, monkeypatch):
    w = studio
    cast_two_voices(w, tmp_path, book(SCENES, 3))
    qtbot.waitUntil(w.actions_by_name["render_all"].isEnabled, timeout=10000)
    ended: list[bool] = []
    w.session.finished.connect(ended.append)
    w.flow.render(w.document.script.lines[-1:])  # the voices encoded first (a Stop while encoding is a failure)
    qtbot.waitUntil(lambda: bool(ended), timeout=10000)
    ended.clear()
    jobs = submitted(w, monkeypatch)
    w.actions_by_name["render_all"].trigger()
    w.actions_by_name["stop_render"].trigger()  # in the same pass: five scenes never queued
    qtbot.waitUntil(lambda: bool(ended), timeout=10000)
    assert ended == [True] and len(jobs) == 1 and not w.session.busy and not w.session.pending
    qtbot.wait(50)
    assert len(jobs) == 1  # nothing queued after the stop
    first_scene = set(w.document.script.line_ids[:3])
    made = {i for i in w.document.script.line_ids[:-1] if w.document.project.current(i) is not None}
    assert made <= first_scene


def test_the_first_take_queued_for_its_checks_imports_no_checker_on_the_windows_thread(qtbot, studio, tmp_path,
                                                                                        monkeypatch):
    import importlib.abc
    import sys
    import threading

    from s2studio.checks.job import Clip
    from s2studio.ui.control.take_checks import TakeChecks

    w = studio
    cast_two_voices(w, tmp_path, "Alice: One two.\nBob: Three four.\n")
    imported: list[bool] = []  # per import of the checker: on the window's thread?

    class Watch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):  # noqa: ANN001, ANN201, ARG002
            if name == "s2studio.checks.checker":
                imported.append(threading.current_thread() is threading.main_thread())

    monkeypatch.delitem(sys.modules, "s2studio.checks.checker", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Watch(), *sys.meta_path])
    monkeypatch.setattr(TakeChecks, "_start", lambda _self: None)  # no checker: the queue is read below
    checks = w.check_commands.checks
    checks.enabled = True
    qtbot.waitUntil(w.actions_by_name["render_all"].isEnabled, timeout=10000)
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: not w.session.busy, timeout=30000)
    assert all(w.document.project.current(line_id) is not None for line_id in w.document.script.line_ids)
    assert True not in imported
    jobs = [checks._queue.get_nowait() for _ in range(2)]
    assert {job.take.line_id for job in jobs} == set(w.document.script.line_ids)
    assert all(job.clips and isinstance(job.clips[0], Clip) for job in jobs)  # each with its voice's clips
