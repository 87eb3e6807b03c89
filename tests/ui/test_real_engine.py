"""The studio on the real engine and the tiny demo model: load, encode the voices, render two speakers
live, and play while rendering (the demo model speaks noise; the pipeline is what is tested).

Not marked slow: about 7 s once torch is imported (20 s alone, most of it importing torch), so CI runs
a real-engine render in the UI tests. The demo model is written in-process, not by `s2studio
demo-model`, which would import torch a second time in a subprocess."""

from __future__ import annotations

import numpy as np
import pytest

from ui_helpers import open_real_studio, write_wav


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory):
    from s2studio.demo_model import write_demo_model

    return write_demo_model(tmp_path_factory.mktemp("demo") / "demo-tiny", seed=0)


def test_real_engine_on_the_demo_model(qtbot, tmp_path, monkeypatch, demo_model, request):
    w = open_real_studio(qtbot, monkeypatch, tmp_path / "data", request)
    w.models.load(demo_model)
    qtbot.waitUntil(lambda: w.model.info is not None and not w.model.busy, timeout=120000)
    assert (w.model.info.sample_rate, w.model.info.device) == (44100, "cpu")
    a = w.library.create("A", [(write_wav(tmp_path / "a.wav", seconds=3.0), "hello there")])
    b = w.library.create("B", [(write_wav(tmp_path / "b.wav", seconds=3.0, hz=330), "hi again")])
    w.voices.refresh()
    w.voice_commands.reread()
    w.inspector.settings_panel.max_seconds.setValue(2.2)  # 47 frames
    w.inspector.settings_panel.seed_mode.setCurrentIndex(1)
    w.editor.setPlainText("Alice: Good [whispering] morning.\nBob: [laughing] Hello!")
    w.reparse()
    w.cast_panel.combos["Alice"].setCurrentIndex(w.cast_panel.combos["Alice"].findData(a.id))
    w.cast_panel.combos["Bob"].setCurrentIndex(w.cast_panel.combos["Bob"].findData(b.id))
    order: list[str] = []
    w.player.started_audio.connect(lambda: order.append("playing" if w.session.busy else "played after"))
    w.session.finished.connect(lambda cancelled: order.append("finished"))
    failures: list[str] = []
    w.session.failed.connect(failures.append)
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: "finished" in order or bool(failures), timeout=300000)
    assert failures == []
    assert len(w.document.project.lines) == 2
    assert all(len(w.document.project.current(ln.line_id).audio) > 0 for ln in w.document.script.lines)
    assert order[0] == "playing"  # the player started while the engine was still rendering
    w.close()


def test_a_line_rendered_again_with_its_fixed_seed_is_the_same_take(qtbot, tmp_path, monkeypatch, demo_model,
                                                                     request):
    """The fast loop in bfloat16 (what the studio runs on a GPU, here on the CPU): Render Line twice with a fixed
    seed gives the same take, although the second render finds the first's prompt in the engine's cache."""
    from dataclasses import replace

    w = open_real_studio(qtbot, monkeypatch, tmp_path / "data", request)
    w.live.enabled = False
    settings = replace(w.document.project.settings, precision="bf16", speed="fast", seed_mode="fixed", seed=7, max_frames=40)
    w.document.set_settings(settings)
    w.models.load(demo_model)
    qtbot.waitUntil(lambda: w.model.info is not None and not w.model.busy, timeout=120000)
    assert w.model.info.precision == "bfloat16"
    voice = w.library.create("A", [(write_wav(tmp_path / "a.wav", seconds=3.0), "hello there")])
    w.voices.refresh()
    w.voice_commands.reread()
    w.editor.setPlainText("Alice: Could you pass me the salt?")
    w.reparse()
    w.cast_panel.combos["Alice"].setCurrentIndex(w.cast_panel.combos["Alice"].findData(voice.id))
    failures: list[str] = []
    w.session.failed.connect(failures.append)
    line = w.document.script.lines[0]
    for count in (1, 2):
        w.actions_by_name["render_line"].trigger()
        qtbot.waitUntil(lambda: bool(failures) or (len(w.document.project.takes_of(line.line_id)) == count
                                                   and not w.flow.busy), timeout=120000)
        assert failures == []
    first, second = w.document.project.takes_of(line.line_id)
    assert first.take_id != second.take_id and first.seed == second.seed == 7
    assert first.codes.shape[1] > 0 and np.array_equal(first.codes, second.codes)
    assert np.array_equal(first.audio, second.audio)
    w.close()
