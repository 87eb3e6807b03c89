"""The window's rough edges of issue 14: the unsaved marker, geometry and the last project remembered, Edit and
Help menus, find and replace, Space, the shortcuts table, the takes title, speaker colours, the ruler, the time
readout, and live playback that buffers instead of stuttering."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QSettings, Qt, QUrl
from PySide6.QtGui import QColor, QGuiApplication, QKeySequence
from PySide6.QtWidgets import QToolButton

from s2studio import app
from s2studio.engine.api import SAMPLE_RATE
from s2studio.ui import colors
from s2studio.ui.actions import SPECS, ShortcutsDialog
from s2studio.ui import desktop
from s2studio.ui.dialogs import about
from s2studio.ui.player.waveform_marks import LABEL_GAP
from ui_helpers import cast_two_voices, close_studio, fake_engine, open_studio


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def shown_title(w) -> str:
    return w.windowHandle().title()


def test_the_title_marks_unsaved_changes(qtbot, data_dir, tmp_path):
    w = open_studio(qtbot, fake_engine)
    assert shown_title(w) == "Untitled — S2 Studio"
    qtbot.keyClicks(w.editor, "Alice: Hello.")
    w.reparse()
    assert shown_title(w) == "Untitled* — S2 Studio"
    w.projects.save_as(tmp_path / "scene.s2proj")
    assert shown_title(w) == "scene.s2proj — S2 Studio"
    qtbot.keyClicks(w.editor, " More.")
    w.reparse()
    assert shown_title(w) == "scene.s2proj* — S2 Studio"
    close_studio(w)


def test_geometry_splitters_and_the_last_project_come_back(qtbot, data_dir, tmp_path):
    w = open_studio(qtbot, fake_engine)
    w.resize(700, 520)  # inside the offscreen screen (800 × 600): restoring never moves a window off screen
    qtbot.waitUntil(lambda: w.width() == 700)
    size = (w.width(), w.height())  # no shorter than the window's minimum
    before = w.top_splitter.sizes(), w.outer_splitter.sizes()
    w.top_splitter.setSizes([before[0][0] + 80, before[0][1] - 80, before[0][2]])
    w.outer_splitter.setSizes([before[1][0] - 60, before[1][1] + 60])
    top, outer = w.top_splitter.sizes(), w.outer_splitter.sizes()
    assert (top, outer) != before
    w.editor.setPlainText("Alice: Hello.")
    w.reparse()
    w.projects.save_as(tmp_path / "last.s2proj")
    close_studio(w)

    app.make_application()
    w2 = app.build_window("fake", factory=fake_engine)  # nothing cleared: what the first window left
    qtbot.addWidget(w2)
    w2.projects.ask = False
    w2.show()
    assert (w2.width(), w2.height()) == size != (1280, 800)
    assert w2.top_splitter.sizes() == top and w2.outer_splitter.sizes() == outer
    app.apply_start_hooks(w2, restored=False)
    assert w2.store.path == tmp_path / "last.s2proj" and w2.editor.toPlainText() == "Alice: Hello."
    w2.projects.new()  # an unsaved project at exit: nothing to reopen next time
    close_studio(w2)
    assert QSettings().value("project/last") == ""


def test_edit_commands_act_on_the_focused_field_else_on_the_script(qtbot, data_dir):
    w = open_studio(qtbot, fake_engine)
    a = w.actions_by_name
    w.editor.setPlainText("Alice: One.\nBob: Two.")
    w.voices.search.setFocus()
    qtbot.keyClicks(w.voices.search, "warm")
    w.voices.search.selectAll()
    a["copy"].trigger()
    assert QGuiApplication.clipboard().text() == "warm"
    a["cut"].trigger()
    assert w.voices.search.text() == ""
    w.player_bar.waveform.setFocus()  # no text field has the focus: the commands act on the script
    a["select_all"].trigger()
    a["copy"].trigger()
    assert QGuiApplication.clipboard().text() == "Alice: One.\nBob: Two."
    cursor = w.editor.textCursor()
    cursor.movePosition(cursor.MoveOperation.End)
    w.editor.setTextCursor(cursor)
    QGuiApplication.clipboard().setText("\nCarol: Three.")
    a["paste"].trigger()
    assert w.editor.toPlainText() == "Alice: One.\nBob: Two.\nCarol: Three."
    menus = {m.title().replace("&", ""): [x.objectName() for x in m.actions() if x.objectName()]
             for m in w.menuBar().findChildren(type(w.menuBar().actions()[0].menu()))}
    assert {"cut", "copy", "paste", "select_all", "find", "replace"} <= set(menus["Edit"])
    assert {"shortcuts", "about", "open_log_folder"} <= set(menus["Help"])
    close_studio(w)


def test_find_and_replace_in_the_script(qtbot, data_dir):
    w = open_studio(qtbot, fake_engine)
    w.editor.setPlainText("Alice: The cat sat.\nBob: A Cat? No, a dog.\nAlice: The cat again.")
    qtbot.keyClick(w, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    bar = w.find_bar
    assert bar.isVisible() and not bar.replace_field.isVisible() and bar.find_field.hasFocus()
    qtbot.keyClicks(bar.find_field, "cat")
    assert w.editor.textCursor().selectedText() == "cat" and bar.count.text() == "1 of 3"
    qtbot.keyClick(bar.find_field, Qt.Key.Key_Return)
    assert bar.count.text() == "2 of 3" and w.editor.textCursor().selectedText() == "Cat"
    bar.match_case.setChecked(True)  # "Cat" no longer matches: on to the last "cat"
    assert len(bar.matches()) == 2 and bar.count.text() == "2 of 2"
    qtbot.keyClick(w, Qt.Key.Key_F3)  # wraps round to the first
    assert bar.count.text() == "1 of 2"
    qtbot.keyClick(bar.find_field, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert bar.count.text() == "2 of 2"  # Shift+Enter: back, round the start
    w.actions_by_name["replace"].trigger()
    assert bar.replace_field.isVisible()
    bar.replace_field.setText("dog")
    qtbot.mouseClick(bar.replace_all_button, Qt.MouseButton.LeftButton)
    assert w.editor.toPlainText() == "Alice: The dog sat.\nBob: A Cat? No, a dog.\nAlice: The dog again."
    assert bar.count.text() == "Replaced 2"
    w.editor.undo()  # one Undo takes the whole Replace All back
    assert w.editor.toPlainText() == "Alice: The cat sat.\nBob: A Cat? No, a dog.\nAlice: The cat again."
    bar.find_field.setText("zebra")
    bar.find_next()
    assert bar.count.text() == "No match"
    qtbot.keyClick(bar.find_field, Qt.Key.Key_Escape)
    assert not bar.isVisible() and w.editor.hasFocus()
    close_studio(w)


def test_space_plays_unless_the_focus_types_or_presses(qtbot, data_dir, monkeypatch):
    w = open_studio(qtbot, fake_engine)
    w.activateWindow()
    toggles: list[int] = []
    for name in ("play_pause", "player_play_pause"):  # Space is one of them, wherever the focus lets it through
        w.actions_by_name[name].triggered.connect(lambda *_: toggles.append(1))
    w.player_bar.waveform.setFocus()
    qtbot.keyClick(w.player_bar.waveform, Qt.Key.Key_Space)
    w.voices.list.setFocus()
    qtbot.keyClick(w.voices.list, Qt.Key.Key_Space)
    assert len(toggles) == 2
    w.editor.setFocus()
    qtbot.keyClick(w.editor, Qt.Key.Key_Space)
    assert len(toggles) == 2 and w.editor.toPlainText() == " "
    follow = w.player_bar.findChild(QToolButton, "btn:follow_playhead")
    was = w.player_bar.waveform.follow
    follow.setFocus()
    qtbot.keyClick(follow, Qt.Key.Key_Space)
    assert len(toggles) == 2 and w.player_bar.waveform.follow is not was  # the focused button pressed, nothing played
    assert w.actions_by_name["player_play_pause"].shortcut() == QKeySequence("Space")
    close_studio(w)


def test_shortcuts_table_shows_every_shortcut_whole(qtbot, data_dir):
    w = open_studio(qtbot, fake_engine)
    dialog = ShortcutsDialog(w)
    dialog.show()
    qtbot.waitExposed(dialog)
    metrics = dialog.table.fontMetrics()
    for row in range(dialog.table.rowCount()):
        text = dialog.table.item(row, 2).text()
        assert dialog.table.columnWidth(2) >= metrics.horizontalAdvance(text), text
    assert dialog.table.rowCount() == len(SPECS)
    dialog.close()
    close_studio(w)


def test_about_and_the_log_folder(qtbot, data_dir, monkeypatch):
    from s2studio import __version__

    text = about.about_text("fake")
    assert f"S2 Studio {__version__}" in text and "Apache License 2.0" in text
    assert "Fish Audio Research License" in text and about.WEIGHTS_LICENSE_URL in text
    w = open_studio(qtbot, fake_engine)
    opened: list[QUrl] = []
    monkeypatch.setattr(desktop.QDesktopServices, "openUrl", lambda url: opened.append(url) or True)
    w.actions_by_name["open_log_folder"].trigger()
    assert [Path(u.toLocalFile()) for u in opened] == [data_dir / "logs"] and (data_dir / "logs").is_dir()
    w.actions_by_name["about"].trigger()
    box = w.findChild(about.QMessageBox, "aboutBox")
    qtbot.waitUntil(lambda: box is not None and box.isVisible())
    assert "Model loaded now: fake" in box.text()
    box.close()
    close_studio(w)


def test_the_takes_title_shows_the_line_or_cuts_it_with_an_ellipsis(qtbot, data_dir, tmp_path):
    w = open_studio(qtbot, fake_engine)
    long = "Word " * 40
    w.editor.setPlainText(f"Alice: Really?\nBob: {long.strip()} <end>")
    w.reparse()
    w.lines.select(w.document.script.lines[0].line_id)
    assert "Alice: Really?" in w.inspector.takes.title.text()
    w.lines.select(w.document.script.lines[1].line_id)
    title = w.inspector.takes.title.text()
    assert "…" in title and "&lt;end&gt;" not in title and w.inspector.takes.title.toolTip().endswith("<end>")
    close_studio(w)


def _lab(c: QColor) -> np.ndarray:
    rgb = np.array([c.redF(), c.greenF(), c.blueF()])
    lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ lin
    xyz /= np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def _contrast(a: QColor, b: QColor) -> float:
    def lum(c: QColor) -> float:
        rgb = np.array([c.redF(), c.greenF(), c.blueF()])
        lin = np.where(rgb <= 0.03928, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
        return float(lin @ [0.2126, 0.7152, 0.0722])

    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize(("dark", "background"), [(False, "#ffffff"), (True, "#1e1e1e")])
def test_the_first_twelve_speakers_have_distinct_readable_colours(dark, background):
    names = [f"Speaker {i}" for i in range(12)]
    chosen = colors.speaker_colors({name: place for place, name in enumerate(names)}, dark)
    assert list(chosen) == names
    distances = [float(np.linalg.norm(_lab(chosen[a]) - _lab(chosen[b]))) for a, b in itertools.combinations(names, 2)]
    assert min(distances) >= 18.0
    assert min(_contrast(c, QColor(background)) for c in chosen.values()) >= 3.0
    assert colors.speaker_colors({"Bob": 0, "Alice": 1}, dark)["Bob"] == colors.palette_color(0, dark)


def test_the_cast_and_the_waveform_colour_twelve_speakers_apart(qtbot, data_dir):
    w = open_studio(qtbot, fake_engine)
    names = ["Ann", "Ben", "Cleo", "Dan", "Eve", "Finn", "Gus", "Hal", "Ivy", "Jo", "Kai", "Lu"]
    w.editor.setPlainText("\n".join(f"{n}: Line {i}." for i, n in enumerate(names)))
    w.reparse()
    label_colors = {w.player_bar.waveform.speaker_of(i): w.player_bar.waveform.colour_of(i).name() for i in w.document.script.line_ids}
    assert len(set(label_colors.values())) == 12
    assert label_colors["Ann"] == colors.palette_color(0, colors.is_dark(w.palette())).name()
    close_studio(w)


def test_the_rulers_labels_stay_inside_the_view_and_the_time_reads_as_one(qtbot, data_dir, tmp_path):
    w = open_studio(qtbot, lambda: fake_engine(frames=30, latency_s=0.001))
    cast_two_voices(w, tmp_path)
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: len(w.document.project.lines) == 2 and not w.session.busy, timeout=15000)
    wave = w.player_bar.waveform
    for width in (300, 517, 900, *range(600, 700, 7)):
        wave.resize(width, wave.height())
        wave.fit()
        for zoom in range(3):
            marks = wave.ruler_marks(width)
            shown = [rect for _x, rect, text in marks if text]
            assert shown and all(0 <= rect.left() and rect.right() <= width for rect in shown), \
                (width, zoom, [(r.left(), r.right(), t) for _x, r, t in marks])
            assert all(b.left() - a.right() >= LABEL_GAP for a, b in zip(shown, shown[1:], strict=False)), \
                (width, zoom, [(r.left(), r.right(), t) for _x, r, t in marks])  # no label touches the next
            assert len(shown) >= len(marks) - 1  # at most the last one left out
            wave.zoom_in()
    w.player.seek(SAMPLE_RATE + SAMPLE_RATE // 2)
    qtbot.waitUntil(lambda: w.player_bar.time_label.text().startswith("0:01.5 / "))
    assert "\n" not in w.player_bar.time_label.text()
    close_studio(w)


def test_the_window_process_asks_for_the_interpreter_back_within_a_millisecond(qtbot):
    """The window's thread lets go of the interpreter at every signal it emits (PySide): at Python's default switch
    interval it then waits up to 5 ms for another thread that runs Python, at each of a render's signals."""
    sys.setswitchinterval(0.005)
    app.make_application()
    assert sys.getswitchinterval() == pytest.approx(app.GIL_SWITCH_S) and app.GIL_SWITCH_S <= 0.001
