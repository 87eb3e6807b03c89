"""The Fine-tune voice dialog with real clicks, training for real on the tiny model: the loss plot grows step by
step from the run's own metrics, Stop saves a checkpoint that Resume continues from, and the finished LoRA is the
voice's (its file byte for byte); a voice with too little speech or no model loaded cannot start."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from PySide6.QtCore import Qt

from s2studio.demo_model import write_demo_model
from s2studio.state.voices import VoiceLibrary
from s2studio.ui.voices.finetune_dialog import FineTuneDialog


def speech(path: Path, seconds: float, hz: float) -> Path:
    t = np.arange(int(44100 * seconds)) / 44100
    x = 0.3 * np.sin(2 * np.pi * hz * t) + 0.01 * np.random.default_rng(int(hz)).standard_normal(len(t))
    sf.write(str(path), x.astype(np.float32), 44100, subtype="PCM_16")
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_demo_model(tmp_path_factory.mktemp("ft-model") / "tiny", seed=1)


def voice_with(lib: VoiceLibrary, tmp_path: Path, seconds: float, clips: int = 4):
    pairs = [(speech(tmp_path / f"c{i}.wav", seconds, 150 + 40 * i), f"Clip number {i}, spoken clearly.")
             for i in range(clips)]
    return lib.create("Alice", pairs)


def small(dialog: FineTuneDialog, steps: int) -> None:
    dialog.steps.setValue(steps)
    dialog.batch_size.setValue(1)
    dialog.max_length.setValue(128)
    dialog.device.setCurrentIndex(dialog.device.findData("cpu"))


def test_train_stop_resume_and_attach(qtbot, tiny: Path, tmp_path: Path) -> None:
    lib = VoiceLibrary(tmp_path / "data" / "voices")
    voice = voice_with(lib, tmp_path, 8.0)
    dialog = FineTuneDialog(lib, voice.id, tiny, tmp_path / "data")
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.start_button.isEnabled() and not dialog.resume.isEnabled()
    small(dialog, 3)
    dialog.save_every.setValue(1)
    steps: list[int] = []
    stop_at = [1]

    def stop_after_first(ev) -> None:  # noqa: ANN001 - a RunEvent
        if ev.kind == "step":
            steps.append(ev.metrics.step)
            if ev.metrics.step in stop_at:  # a person pressing Stop while step 1 is shown
                qtbot.mouseClick(dialog.stop_button, Qt.MouseButton.LeftButton)

    dialog.run.event.connect(stop_after_first)
    with qtbot.waitSignal(dialog.run.ended, timeout=240_000):  # the run's end, after its last event
        qtbot.mouseClick(dialog.start_button, Qt.MouseButton.LeftButton)
        assert not dialog.start_button.isEnabled() and dialog.stop_button.isEnabled()
    assert steps == [1] and [s for s, _ in dialog.plot.points] == [1]
    assert "Stopped after step 1" in dialog.status.text() and lib.get(voice.id).lora is None
    assert dialog.resume.isEnabled() and dialog.resume.isChecked()

    # Resume: steps 2 and 3 on the same run; the plot shows them, the voice gets the final LoRA
    stop_at.clear()
    with qtbot.waitSignal(dialog.run.ended, timeout=240_000):
        qtbot.mouseClick(dialog.start_button, Qt.MouseButton.LeftButton)
    folder = tmp_path / "data" / "training" / voice.id
    assert steps == [1, 2, 3] and [s for s, _ in dialog.plot.points] == [2, 3], dialog.status.text()
    assert dialog.progress.value() == 3
    kept = lib.get(voice.id)
    assert kept.lora is not None and lib.lora_path(kept).read_bytes() == (folder / "lora.safetensors").read_bytes()
    assert json.loads((folder / "lora.json").read_text())["steps"] == 3
    assert kept.lora.note.startswith("r_8_alpha_16, 3 steps, loss ")
    assert f"{kept.lora.note.rsplit(' ', 1)[1]}" == f"{dialog.plot.points[-1][1]:.3f}"
    assert "now speaks with this LoRA" in dialog.status.text() and dialog.start_button.isEnabled()


def test_too_little_speech_or_no_model_cannot_start(qtbot, tiny: Path, tmp_path: Path) -> None:
    lib = VoiceLibrary(tmp_path / "voices")
    voice = voice_with(lib, tmp_path, 5.0, clips=2)
    short = FineTuneDialog(lib, voice.id, tiny, tmp_path)
    qtbot.addWidget(short)
    assert not short.start_button.isEnabled()
    assert "only 10 s of speech; fine-tuning needs at least 30 s" in short.status.text()
    qtbot.mouseClick(short.start_button, Qt.MouseButton.LeftButton)
    assert not short.run.running
    no_model = FineTuneDialog(lib, voice.id, None, tmp_path)
    qtbot.addWidget(no_model)
    assert not no_model.start_button.isEnabled() and "Load a model first" in no_model.status.text()


def test_the_voice_panel_asks_for_the_dialog_and_shows_the_lora(qtbot, tmp_path: Path) -> None:
    from safetensors.numpy import save

    from s2studio.ui.voices.voices_panel import VoicesPanel

    lib = VoiceLibrary(tmp_path / "voices")
    voice = voice_with(lib, tmp_path, 3.0, clips=1)
    panel = VoicesPanel(lib)
    qtbot.addWidget(panel)
    assert not panel.finetune_button.isEnabled()  # nothing selected yet
    panel.select(voice.id)
    with qtbot.waitSignal(panel.finetune_requested) as asked:
        qtbot.mouseClick(panel.finetune_button, Qt.MouseButton.LeftButton)
    assert asked.args == [voice.id]
    lora = tmp_path / "lora.safetensors"
    lora.write_bytes(save({"embeddings.lora_A": np.zeros((2, 4), np.float32),
                           "embeddings.lora_B": np.zeros((4, 2), np.float32)}))
    lib.set_lora(voice.id, lora, "r_8_alpha_16, 200 steps, loss <1.2>")
    panel.refresh()
    panel.select(voice.id)
    assert "Fine-tuned: r_8_alpha_16, 200 steps, loss &lt;1.2&gt;" in panel.details.header.text()


def test_a_new_run_keeps_the_earlier_one_aside(tmp_path: Path) -> None:
    from s2studio.ui.control.finetune import has_checkpoint, set_aside

    run = tmp_path / "training" / "v1"
    (run / "checkpoints" / "step_000000001").mkdir(parents=True)
    (run / "checkpoints" / "step_000000001" / "lora.safetensors").write_bytes(b"x")
    assert has_checkpoint(run)
    assert set_aside(run) == tmp_path / "training" / "v1.earlier-1" and not run.exists()
    run.mkdir()
    assert set_aside(run).name == "v1.earlier-2" and not has_checkpoint(run)
    assert (tmp_path / "training" / "v1.earlier-1" / "checkpoints" / "step_000000001" / "lora.safetensors").exists()
