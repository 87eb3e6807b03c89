"""The Settings tab and the model page as a new user met them: the wheel scrolls the panel instead of changing the
field under the pointer, Render on keeps its rows whole after switching modes and says where it connected once,
the seed mode never makes takes stale, readable mode names and a round length limit, the model page's texts stay
whole while the demo model is written, and Help ▸ Open Log Folder says where the log is without a file manager."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QGuiApplication, QWheelEvent
from PySide6.QtWidgets import QApplication, QLabel, QWidget

from s2studio.ui import desktop
from s2studio.ui.dialogs import model_page
from s2studio.ui.dialogs.model_page import ModelPage
from s2studio.ui.inspector.settings_panel import MODES
from ui_helpers import cast_two_voices, close_studio, fake_engine, open_studio


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def wheel(widget: QWidget, notches: int) -> None:
    """One turn of the wheel over the middle of `widget` (negative: towards the person, which scrolls down)."""
    at = widget.rect().center()
    QApplication.sendEvent(widget, QWheelEvent(
        QPointF(at), QPointF(widget.mapToGlobal(at)), QPoint(0, 0), QPoint(0, 120 * notches),
        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False))


def squeezed(root: QWidget) -> list[str]:
    """Wrapped texts shown shorter than they need at their width (cut off at the bottom)."""
    return [label.text()[:40] for label in root.findChildren(QLabel)
            if label.isVisible() and label.wordWrap() and label.text()
            and label.height() < label.heightForWidth(label.width())]


def test_the_wheel_scrolls_the_settings_and_changes_a_field_only_when_it_has_the_focus(qtbot, data_dir):
    w = open_studio(qtbot, fake_engine)
    w.resize(1280, 800)
    w.inspector.show_settings()
    panel, bar = w.inspector.settings_panel, w.inspector.settings_scroll.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0)
    for field in (panel.temperature, panel.mode, panel.top_k, w.inspector.transcripts_box.model):
        assert field.focusPolicy() == Qt.FocusPolicy.StrongFocus  # a wheel never gives them the focus
    bar.setValue(0)
    before = w.document.project.settings
    wheel(panel.temperature, -1)
    assert bar.value() > 0 and panel.temperature.value() == pytest.approx(0.80)  # the panel scrolled
    wheel(panel.mode, -3)
    assert panel.mode.currentData() == "fast" and not w.model.busy  # no reload behind the person's back
    assert w.document.project.settings == before
    scrolled = bar.value()
    wheel(panel.mode, 2)
    assert bar.value() < scrolled
    w.activateWindow()
    panel.temperature.setFocus()
    qtbot.waitUntil(panel.temperature.hasFocus)
    at = bar.value()
    wheel(panel.temperature, -1)  # working in the field: the wheel is the field's
    assert panel.temperature.value() == pytest.approx(0.75) and bar.value() == at
    assert w.document.project.settings.temperature == pytest.approx(0.75)
    close_studio(w)


def test_render_on_keeps_its_rows_whole_and_says_where_it_connected_once(qtbot, data_dir, monkeypatch):
    from s2studio.ui.inspector import render_on

    w = open_studio(qtbot, fake_engine)
    w.resize(1280, 800)
    w.inspector.show_settings()
    page, box = w.inspector.settings_page, w.inspector.render_on
    for key in ("int8", "exact", "int4", "fast", "exact"):  # each mode's help has its own length
        w.inspector.settings_panel.mode.setCurrentIndex(w.inspector.settings_panel.mode.findData(key))
        qtbot.waitUntil(lambda: not w.model.busy, timeout=5000)
        qtbot.wait(20)
        assert not squeezed(page)
        assert box.height() >= box.minimumSizeHint().height()
    assert not box.result.isVisible()  # nothing to say before a test
    monkeypatch.setattr(render_on, "probe_server", lambda target, cancel: (
        "Not connected: cannot reach the server at http://gpu-box:8000 (ConnectError: [Errno 111] Connection "
        "refused); check the address and that the server runs"))
    box.where.setCurrentIndex(box.where.findData("server"))
    box.url.setText("http://gpu-box:8000")
    box.test_button.click()
    qtbot.waitUntil(lambda: box.result.text().startswith("Not connected"), timeout=5000)
    qtbot.wait(20)
    assert box.result.isVisible() and not squeezed(page)
    box.where.setCurrentIndex(box.where.findData("local"))
    assert not box.result.isVisible() and box.result.text() == ""  # back on this computer: no stale line
    close_studio(w)


def test_a_connection_names_the_server_once():
    from s2studio.engine.api import ModelInfo, ModelReady
    from s2studio.worker import servers

    class Engine:
        protocol = "native"

        def __init__(self, _settings) -> None:  # noqa: ANN001
            pass

        def load(self, request, cancel):  # noqa: ANN001, ANN201
            yield ModelReady("test", ModelInfo("tiny on gpu-box:8000", "cpu on gpu-box:8000", "float32", 44100,
                                               "fp", 4096))

        def close(self) -> None:
            pass

    original = servers.RemoteEngine
    servers.RemoteEngine = Engine
    try:
        message = servers.probe_server(servers.ServerTarget("http://gpu-box:8000"))
    finally:
        servers.RemoteEngine = original
    assert message.startswith("Connected: tiny on gpu-box:8000 (cpu, float32), ")
    assert message.count("gpu-box") == 1


def test_switching_the_seed_to_fixed_leaves_every_take_up_to_date(qtbot, data_dir, tmp_path):
    w = open_studio(qtbot, fake_engine)
    cast_two_voices(w, tmp_path)
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: len(w.document.project.lines) == 2 and not w.flow.busy, timeout=10000)
    assert [w.document.state(ln).kind for ln in w.document.script.lines] == ["fresh", "fresh"]
    panel = w.inspector.settings_panel
    panel.seed_mode.setCurrentIndex(panel.seed_mode.findData("fixed"))
    assert w.document.project.settings.seed_mode == "fixed"
    assert [w.document.state(ln).kind for ln in w.document.script.lines] == ["fresh", "fresh"]
    assert not w.player_bar.waveform.stale_lines and w.document.stale_lines() == []
    w.actions_by_name["render_line"].trigger()  # a take with the fixed seed, then another fixed seed
    line = w.lines.selected()
    qtbot.waitUntil(lambda: len(w.document.project.lines[line.line_id].takes) == 2 and not w.flow.busy, timeout=10000)
    panel.seed.setValue(panel.seed.value() + 1)
    assert w.document.state(line).kind == "stale"
    assert [ln.line_id for ln in w.document.stale_lines()] == [line.line_id]
    close_studio(w)


def test_mode_names_fit_the_settings_and_the_longest_line_is_a_round_figure(qtbot, data_dir):
    w = open_studio(qtbot, fake_engine)
    w.resize(1280, 800)
    w.inspector.show_settings()
    panel = w.inspector.settings_panel
    qtbot.waitUntil(lambda: panel.mode.width() > 0)
    metrics = panel.mode.fontMetrics()
    for mode in MODES:  # read whole in the closed box, not only in its list
        assert metrics.horizontalAdvance(mode.label) + 40 <= panel.mode.width(), mode.label
    assert panel.max_seconds.text() == "50.0 s"
    close_studio(w)


def test_the_model_page_stays_whole_while_the_demo_model_is_written(qtbot, tmp_path, monkeypatch):
    import threading

    release = threading.Event()

    def slow_demo(task, dest):  # noqa: ANN001, ANN202
        task.progress.emit(0.1, "writing the demo model…")
        release.wait(10)
        raise model_page.Cancelled()

    monkeypatch.setattr(model_page, "_write_demo", slow_demo)
    page = ModelPage(tmp_path / "models")
    qtbot.addWidget(page)
    page.show()
    qtbot.waitUntil(page.isVisible)
    assert not page.cancel_button.isVisible() and not squeezed(page)
    qtbot.mouseClick(page.demo_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.status.text() == "writing the demo model…", timeout=5000)
    qtbot.wait(20)
    assert page.cancel_button.isVisible() and page.cancel_button.text() == "Stop"
    assert page.cancel_button.accessibleName() == "Stop writing the demo model"
    assert "download" not in " ".join(b.text().lower() for b in page.findChildren(type(page.cancel_button))
                                     if b.isVisible() and b.isEnabled())
    assert not squeezed(page)  # the licence link above the progress bar is whole
    qtbot.mouseClick(page.cancel_button, Qt.MouseButton.LeftButton)
    release.set()
    qtbot.waitUntil(lambda: page.status.text() == "✗ Cancelled.", timeout=5000)
    assert not page.cancel_button.isVisible() and page.demo_button.isEnabled()
    page.done(0)


def test_open_log_folder_without_a_file_manager_shows_the_path_to_copy(qtbot, data_dir, monkeypatch):
    w = open_studio(qtbot, fake_engine)
    monkeypatch.setattr(desktop.QDesktopServices, "openUrl", lambda url: False)  # no file manager
    w.actions_by_name["open_log_folder"].trigger()
    dialog = w.findChild(desktop.FolderDialog, "folderDialog")
    qtbot.waitUntil(lambda: dialog is not None and dialog.isVisible())
    assert dialog.path.text() == str(data_dir / "logs") and dialog.path.isReadOnly()
    assert dialog.path.selectedText() == str(data_dir / "logs")
    dialog.copy_button.click()
    assert QGuiApplication.clipboard().text() == str(data_dir / "logs")
    dialog.close()
    close_studio(w)


def test_the_save_and_open_dialogs_start_in_the_documents_folder_then_the_last_one(qtbot, data_dir, tmp_path,
                                                                                    monkeypatch):
    from s2studio.ui import file_places
    from s2studio.ui.dialogs import project_commands

    documents = tmp_path / "Documents"
    documents.mkdir()
    monkeypatch.setattr(file_places, "documents", lambda: documents)
    w = open_studio(qtbot, fake_engine)
    asked: list[str] = []
    target = tmp_path / "elsewhere" / "scene.s2proj"
    target.parent.mkdir()
    monkeypatch.setattr(project_commands.QFileDialog, "getSaveFileName",
                        lambda _w, _title, start, _filter: asked.append(start) or (str(target), ""))
    monkeypatch.setattr(project_commands.QFileDialog, "getExistingDirectory",
                        lambda _w, _title, start: asked.append(start) or "")
    w.editor.setPlainText("Alice: Hello.")
    w.reparse()
    assert w.projects.save()
    assert asked == [str(documents / "Untitled.s2proj")]  # not the program's folder (a bare name opened there)
    w.projects.open()
    assert asked[-1] == str(target.parent)  # where the person saved last
    close_studio(w)
