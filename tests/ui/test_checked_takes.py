"""Checked takes in the studio: takes spoken by espeak-ng with known faults (`SpeakingEngine`, the fake at the
engine seam) are checked in the checker's own process with the tests' real recognizer; the gutter, the takes
list and Export show what failed and why; Render Failing Lines Again, Best of N and Retake Until It Passes keep
the best take; and the whole loop on the real engine and the tiny demo model, whose noise fails every take."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QMessageBox

from speech import tiny_model
from spoken_takes import LINES, SpeakingEngine, write_clips
from test_take_checks import needs_checks_extra
from ui_helpers import close_studio, on_modal, open_real_studio, open_studio, write_wav

TIMEOUT_MS = 240_000


def cast_reader(w, tmp_path: Path, text: str, clips=None) -> None:  # noqa: ANN001
    voice = w.library.create("Reader", clips if clips is not None else write_clips(tmp_path / "clips"))
    w.voices.refresh()
    w.voice_commands.reread()
    w.editor.setPlainText(text)
    w.reparse()
    combo = w.cast_panel.combos["Narrator"]
    combo.setCurrentIndex(combo.findData(voice.id))
    w.ctx.settings.setValue("asr/model", str(tiny_model()))
    w.check_commands.checks.enabled = True


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory):  # noqa: ANN001, ANN201
    from s2studio.demo_model import write_demo_model  # noqa: PLC0415

    return write_demo_model(tmp_path_factory.mktemp("demo") / "demo-tiny", seed=0)


def test_the_whole_loop_on_the_real_engine_ends_at_k_when_every_take_fails(qtbot, tmp_path, monkeypatch,
                                                                            demo_model, request):
    needs_checks_extra()
    w = open_real_studio(qtbot, monkeypatch, tmp_path / "data", request)
    request.addfinalizer(w.check_commands.checks.shutdown)
    w.live.enabled = False
    w.inspector.settings_panel.max_seconds.setValue(1.0)
    w.models.load(demo_model)
    qtbot.waitUntil(lambda: w.model.info is not None and not w.model.busy, timeout=120000)
    cast_reader(w, tmp_path, "Narrator: Good morning to you all.",
                [(write_wav(tmp_path / "a.wav", seconds=3.0), "hello there")])
    line = w.document.script.lines[0]
    w.lines.select(line.line_id)
    messages: list[str] = []
    w.check_commands.retakes.message.connect(messages.append)
    w.check_commands.retake_until_pass(2)
    qtbot.waitUntil(lambda: bool(messages), timeout=TIMEOUT_MS)
    takes = w.document.project.lines[line.line_id].takes
    assert len(takes) == 2 and all(t.check.of("words").verdict == "failed" for t in takes), \
        [t.check.summary() for t in takes]
    assert "never passed in 2 takes" in messages[0]
    w.close()


@pytest.fixture
def studio(qtbot, tmp_path, monkeypatch):  # noqa: ANN001, ANN201
    needs_checks_extra()
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    engine = SpeakingEngine(frame_latency_s=0.0)
    w = open_studio(qtbot, lambda: engine)
    w.engine = engine
    yield w
    w.check_commands.checks.shutdown()
    close_studio(w)


def checked(w, line_id: str, count: int) -> bool:  # noqa: ANN001
    takes = w.document.project.lines[line_id].takes if line_id in w.document.project.lines else []
    return len(takes) == count and all(t.check is not None for t in takes) and not w.flow.busy


def test_a_failed_take_is_marked_with_its_reason_and_rendered_again_until_it_passes(qtbot, studio, tmp_path):
    w = studio
    w.engine.fault = lambda _line, attempt: ("skip", "clean")[attempt]
    cast_reader(w, tmp_path, f"Narrator: {LINES[0]}")
    line = w.document.script.lines[0]
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: checked(w, line.line_id, 1), timeout=TIMEOUT_MS)
    take = w.document.project.current(line.line_id)
    assert take.check.verdict == "failed" and "missed “walked”" in take.check.of("words").reason
    assert w.lines.mark_at(0).check == "failed"
    assert "Checks of the picked take: failed: words (missed “walked”" in w.lines.tip_at(0)
    w.lines.select(line.line_id)
    assert "✗ checks: failed: words (missed “walked”" in w.inspector.takes.list.item(0).text()
    assert [ln.line_id for ln in w.document.failed_lines()] == [line.line_id]

    on_modal(qtbot, QMessageBox, lambda box: box.buttons()[1].click())  # Export: "Go to First Failed Line"
    w.actions_by_name["export"].trigger()
    assert w.lines.selected().line_id == line.line_id

    w.actions_by_name["render_failing"].trigger()
    qtbot.waitUntil(lambda: checked(w, line.line_id, 2), timeout=TIMEOUT_MS)
    assert w.document.project.current(line.line_id).check.verdict == "passed"
    assert w.lines.mark_at(0).check == "passed" and w.document.failed_lines() == []


def test_best_of_three_keeps_the_clean_take_and_every_take_stays(qtbot, studio, tmp_path):
    w = studio
    w.engine.fault = lambda _line, attempt: ("cut", "clean", "fade")[attempt]
    cast_reader(w, tmp_path, f"Narrator: {LINES[2]}")
    line = w.document.script.lines[0]
    messages: list[str] = []
    w.check_commands.retakes.message.connect(messages.append)
    w.check_commands.best_of_n(3)
    qtbot.waitUntil(lambda: bool(messages), timeout=TIMEOUT_MS)
    takes = w.document.project.lines[line.line_id].takes
    assert [t.check.verdict for t in takes] == ["failed", "passed", "failed"]
    assert w.document.project.current(line.line_id) is takes[1]
    assert messages == ["Best of N: done (line 1: best of 3)"]
    assert w.flow.max_batch > 1 and w.check_commands.retakes.rounds == 1  # the three side by side, in one render


def test_retake_until_it_passes_stops_at_k_and_keeps_the_best(qtbot, studio, tmp_path):
    w = studio
    w.engine.fault = lambda _line, _attempt: "cut"
    cast_reader(w, tmp_path, f"Narrator: {LINES[4]}")
    line = w.document.script.lines[0]
    messages: list[str] = []
    w.check_commands.retakes.message.connect(messages.append)
    w.check_commands.retake_until_pass(2)
    qtbot.waitUntil(lambda: bool(messages), timeout=TIMEOUT_MS)
    assert len(w.document.project.lines[line.line_id].takes) == 2 == w.engine.attempts[line.line_id]
    assert messages == ["Retake until it passes: 1 line never passed in 2 takes, the best kept "
                        "(line 1: none of 2 takes passed; kept the best)"]


def test_only_failed_lines_shown_and_thresholds_or_recognizer_changed_check_every_take_again(qtbot, studio,
                                                                                           tmp_path):
    w = studio
    w.engine.fault = lambda line_id, _attempt: "skip" if line_id == w.document.script.lines[0].line_id else "clean"
    cast_reader(w, tmp_path, f"Narrator: {LINES[0]}\nNarrator: {LINES[1]}")
    first, second = w.document.script.lines
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: checked(w, first.line_id, 1) and checked(w, second.line_id, 1), timeout=TIMEOUT_MS)
    assert [ln.line_id for ln in w.document.failed_lines()] == [first.line_id]

    w.actions_by_name["only_failed"].trigger()
    block = w.editor.document().firstBlock()
    assert (block.isVisible(), block.next().isVisible()) == (True, False)
    w.actions_by_name["only_failed"].trigger()
    assert block.next().isVisible()

    # the pace of a take is judged against its neighbours' too: the other line's measured pace
    paces = w.check_commands.checks.neighbour_paces(second.line_id, "Narrator")
    assert paces == (w.document.project.current(first.line_id).check.of("pace").value,)

    checks, old = w.check_commands.checks, w.check_commands.checks.key
    box = w.inspector.checks_box
    box.spins["words_fail"].setValue(box.spins["words_fail"].value() + 5)  # per cent
    qtbot.waitUntil(lambda: checks.settings.words_fail == pytest.approx(0.35), timeout=5000)
    assert checks.key != old and box.value() == checks.settings
    assert w.ctx.settings.value("checks/thresholds")  # kept for the next start
    takes = [w.document.project.current(ln.line_id) for ln in (first, second)]
    assert all(t.check.key == old for t in takes)  # the old results are shown until their replacements come
    qtbot.waitUntil(lambda: not checks.busy and all(t.check.key == checks.key for t in takes), timeout=TIMEOUT_MS)

    by_threshold = checks.key
    combo = w.inspector.transcripts_box.language
    combo.setCurrentIndex(combo.findData("de"))  # another language for the recognizer: another key
    assert checks.key != by_threshold
    qtbot.waitUntil(lambda: not checks.busy and all(t.check.key == checks.key for t in takes), timeout=TIMEOUT_MS)


def test_stored_thresholds_read_back_and_a_broken_value_gives_the_defaults(tmp_path):  # noqa: ANN001
    import json  # noqa: PLC0415

    from PySide6.QtCore import QSettings  # noqa: PLC0415

    from s2studio.checks.settings import CheckSettings  # noqa: PLC0415
    from s2studio.ui.inspector.checks_box import KEY, thresholds  # noqa: PLC0415

    store = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    assert thresholds(store) == CheckSettings()
    store.setValue(KEY, json.dumps({"words_fail": 0.4}))
    assert thresholds(store) == CheckSettings(words_fail=0.4)
    for broken in (json.dumps({"words_fail": 9.0}), "{not json", json.dumps([1, 2])):
        store.setValue(KEY, broken)
        assert thresholds(store) == CheckSettings()
