"""The studio on the real engine and the tiny demo model: load, encode a dropped voice, render two
speakers live, and play while rendering (the demo model speaks noise; the pipeline is what is tested)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from PySide6.QtCore import Qt

from s2studio import app
from ui_helpers import write_wav


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("demo") / "demo-tiny"
    subprocess.run([sys.executable, "-m", "s2studio", "demo-model", str(path)], check=True, capture_output=True)
    return path


@pytest.mark.slow
def test_real_engine_on_the_demo_model(qtbot, tmp_path, monkeypatch, demo_model, request):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    app.make_application()
    w = app.build_window("s2")
    request.addfinalizer(lambda: (w.player.close(), w.ctx.host.shutdown()))
    w.ctx.settings.clear()
    w.ask_on_close = False
    qtbot.addWidget(w)
    w.show()
    w.load_model(demo_model)
    qtbot.waitUntil(lambda: w.model_info is not None, timeout=120000)
    assert "torch" in sys.modules  # loaded by the engine thread …
    a = w.library.create("A", [(write_wav(tmp_path / "a.wav", seconds=3.0), "hello there")])
    b = w.library.create("B", [(write_wav(tmp_path / "b.wav", seconds=3.0, hz=330), "hi again")])
    w.voices.refresh()
    w._voices_changed()
    w.settings_panel.max_frames.setValue(48)
    w.settings_panel.seed_mode.setCurrentIndex(1)
    w.editor.setPlainText("Alice: Good [whispering] morning.\nBob: [laughing] Hello!")
    w.reparse()
    w.cast_bar.combos["Alice"].setCurrentIndex(w.cast_bar.combos["Alice"].findData(a.id))
    w.cast_bar.combos["Bob"].setCurrentIndex(w.cast_bar.combos["Bob"].findData(b.id))
    order: list[str] = []
    w.player.started_audio.connect(lambda: order.append("playing"))
    w.session.finished.connect(lambda cancelled: order.append("finished"))
    failures: list[str] = []
    w.session.failed.connect(failures.append)
    w.flow.failed.connect(failures.append)
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: "finished" in order or bool(failures), timeout=300000)
    assert failures == []
    assert len(w.project.lines) == 2
    assert all(len(w.project.current(ln.line_id).audio) > 0 for ln in w.script.lines)
    assert order[0] == "playing"
    w.close()
