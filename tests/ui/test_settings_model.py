"""Settings that cannot break the studio (issue 14): one control for speed against exactness, the length in
seconds, devices this computer lacks greyed out with the reason, a failed load that falls back to the model that
worked and is never remembered, and a reload asked for during a render that waits for its end."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QMessageBox

from s2studio import app
from s2studio.engine.fake import FakeEngine
from s2studio.settings import CHOICES, LIMITS
from s2studio.state.project import GenerationSettings
from s2studio.ui.inspector.settings_panel import MODES, SettingsPanel
from s2studio.units import FRAMES_PER_SECOND
from ui_helpers import cast_two_voices, close_studio, open_studio


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def engine(gpu: bool = False, latency: float = 0.002):
    return lambda: FakeEngine(frame_latency_s=latency, gpu=gpu, min_frames=12, frames_per_char=0.0)


def device_item(w, key: str):
    panel = w.inspector.settings_panel
    return panel.device.model().item(panel.device.findData(key))


def test_devices_this_computer_lacks_are_greyed_out_with_the_reason(qtbot, data_dir):
    w = open_studio(qtbot, engine(gpu=False))
    qtbot.waitUntil(lambda: not w.inspector.settings_panel.device_available("cuda"), timeout=5000)
    cuda = device_item(w, "cuda")
    assert not cuda.isEnabled() and cuda.text() == "NVIDIA GPU (CUDA) — no NVIDIA GPU found"
    assert cuda.toolTip() == "no NVIDIA GPU found"
    assert device_item(w, "cpu").isEnabled() and not device_item(w, "mps").isEnabled()
    close_studio(w)
    w = open_studio(qtbot, engine(gpu=True))
    qtbot.waitUntil(lambda: w.ctx.host.busy is False, timeout=5000)
    assert device_item(w, "cuda").isEnabled() and device_item(w, "cuda").text() == "NVIDIA GPU (CUDA)"
    close_studio(w)


def test_a_failed_load_goes_back_to_the_model_that_worked_and_is_never_remembered(qtbot, data_dir):
    w = open_studio(qtbot, engine(gpu=False))
    panel = w.inspector.settings_panel
    panel.mode.setCurrentIndex(panel.mode.findData("int8"))  # a reload that works
    qtbot.waitUntil(lambda: not w.model.busy and w.model.info is not None, timeout=5000)
    assert w.model.working.loading.quantize == "int8"
    panel.device.setCurrentIndex(panel.device.findData("cuda"))  # as if chosen before the devices were known
    box = None

    def fall_back_box():
        nonlocal box
        box = w.findChild(QMessageBox, "loadFailedBox")
        return box is not None and box.isVisible()

    qtbot.waitUntil(fall_back_box, timeout=5000)
    assert "could not load the model with “Faster, less memory (8-bit) on NVIDIA GPU (CUDA)”" in box.text()
    assert "this computer has none" in box.text()
    assert "went back to “Faster, less memory (8-bit) on Automatic" in box.text()
    qtbot.waitUntil(lambda: not w.model.busy and w.model.info is not None, timeout=5000)  # the model is back
    assert w.document.project.settings.device == "auto" and panel.device.currentData() == "auto"
    assert w.document.project.settings.quantize == "int8"
    remembered = json.loads(w.ctx.settings.value("generation"))
    assert (remembered["device"], remembered["quantize"]) == ("auto", "int8")
    box.close()
    close_studio(w)

    app.make_application()
    w2 = app.build_window("fake", factory=engine())  # the next start loads what worked
    qtbot.addWidget(w2)
    w2.projects.ask = False
    assert (w2.document.project.settings.device, w2.document.project.settings.quantize) == ("auto", "int8")
    close_studio(w2)


def test_a_first_load_that_fails_says_why(qtbot, data_dir):
    app.make_application()
    QSettings().clear()
    QSettings().setValue("generation", json.dumps({"device": "cuda"}))
    w = app.build_window("fake", factory=engine(gpu=False))
    qtbot.addWidget(w)
    w.projects.ask = False
    w.show()
    app.start_engine(w)
    qtbot.waitUntil(lambda: (b := w.findChild(QMessageBox, "loadFailedBox")) is not None and b.isVisible(),
                    timeout=5000)
    assert "this computer has none" in w.findChild(QMessageBox, "loadFailedBox").text()
    assert w.model.info is None and w.status.model.text() == "No model"
    close_studio(w)


def test_one_control_for_speed_and_exactness_and_the_length_in_seconds(qtbot):
    panel = SettingsPanel()
    qtbot.addWidget(panel)
    owner = [GenerationSettings()]
    panel.bind(lambda: owner[0])  # the panel shows its owner's settings and keeps no copy
    seen: list[GenerationSettings] = []
    panel.settings_changed.connect(seen.append)
    assert panel.mode.currentData() == "fast" and "recommended" in panel.mode.currentText()
    for mode in MODES:
        panel.mode.setCurrentIndex(panel.mode.findData(mode.key))
        s = seen[-1]
        assert (s.precision, s.speed, s.quantize) == (mode.precision, mode.speed, mode.quantize)
        assert panel.mode_help.text() == mode.help
    assert [panel.mode.itemText(i) for i in range(4)] == [m.label for m in MODES]
    assert "Exact (slowest)" == MODES[0].label
    old = replace(GenerationSettings(), precision="bf16", speed="exact")  # an older project's combination
    owner[0] = old
    panel.refresh()
    assert panel.mode.currentData() == "custom" and panel.mode.currentText().startswith("As saved: bf16")
    assert panel.settings() == old
    owner[0] = GenerationSettings(max_frames=1024)
    panel.refresh()
    assert panel.max_seconds.value() == pytest.approx(47.6) and panel.max_seconds.suffix() == " s"
    assert panel.settings().max_frames == 1024  # shown in seconds, kept in frames exactly
    panel.max_seconds.setValue(10.0)
    assert seen[-1].max_frames == round(10 * FRAMES_PER_SECOND) == 215
    assert panel.batching.itemText(1) == "Groups of lines, as the reference implementation"


def test_a_reload_asked_for_during_a_render_waits_for_its_end(qtbot, data_dir, tmp_path):
    w = open_studio(qtbot, engine(latency=0.03))
    cast_two_voices(w, tmp_path)
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: w.session.busy, timeout=5000)
    panel = w.inspector.settings_panel
    panel.mode.setCurrentIndex(panel.mode.findData("exact"))
    assert not w.model.busy and w.models.reload_pending  # the render goes on with the model it has
    assert "when this render ends" in w.statusBar().currentMessage()
    qtbot.waitUntil(lambda: not w.session.busy, timeout=15000)
    qtbot.waitUntil(lambda: w.model.working is not None and w.model.working.loading.speed == "exact",
                    timeout=5000)
    assert len(w.document.project.lines) == 2
    close_studio(w)


def test_the_settings_fit_the_inspector_and_scroll_when_taller(qtbot, data_dir):
    w = open_studio(qtbot, engine())
    w.resize(1280, 800)
    w.actions_by_name["settings"].trigger()
    assert w.inspector.currentWidget() is w.inspector.settings_scroll
    qtbot.waitUntil(lambda: w.inspector.settings_scroll.viewport().width() > 0)
    panel, view = w.inspector.settings_panel, w.inspector.settings_scroll.viewport()
    page = w.inspector.settings_page  # the settings, then Render on and Transcripts under them
    assert page.minimumSizeHint().width() <= view.width()  # nothing cut off on the right
    assert page.width() == view.width()
    long_choice = panel.mode.itemText(panel.mode.findData("exact"))
    panel.mode.setCurrentIndex(panel.mode.findData("exact"))
    assert panel.mode.toolTip() == long_choice  # a choice wider than the box is read whole in its tooltip
    assert page.height() > view.height() and w.inspector.settings_scroll.verticalScrollBar().maximum() > 0  # it scrolls
    close_studio(w)


def test_the_panel_offers_the_tables_ranges_steps_and_choices(qtbot):
    panel = SettingsPanel()
    qtbot.addWidget(panel)
    for name, box in (("seed", panel.seed), ("temperature", panel.temperature), ("top_p", panel.top_p),
                      ("top_k", panel.top_k), ("threads", panel.threads), ("max_batch", panel.max_batch)):
        limit = LIMITS[name]
        assert (box.minimum(), box.maximum(), box.singleStep()) == (limit.lo, limit.hi, limit.step), name
    frames = LIMITS["max_frames"]
    assert panel.max_seconds.minimum() * FRAMES_PER_SECOND >= frames.lo
    assert panel.max_seconds.maximum() * FRAMES_PER_SECOND <= frames.hi
    assert panel.threads.value() == LIMITS["threads"].auto and panel.threads.text().startswith("Automatic")
    for name, box in (("device", panel.device), ("seed_mode", panel.seed_mode), ("batching", panel.batching)):
        assert tuple(box.itemData(i) for i in range(box.count())) == CHOICES[name], name
    shown = panel.settings()
    assert (shown.temperature, shown.top_p, shown.top_k, shown.seed) == tuple(
        LIMITS[n].default for n in ("temperature", "top_p", "top_k", "seed"))
