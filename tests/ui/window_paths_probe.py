"""Run by test_no_torch_in_window.py in an interpreter of its own (so that nothing else imported torch first):
the window's fine-tune, voice preview and transcription paths, for real where they can be, then the check that
the window's process still has no torch. The studio's engine is the fake one (the real engine's thread imports
torch in this process by design); everything else is real: the training job on the tiny model, the previews
through the engine seam, the tests' tiny Whisper."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
from PySide6.QtCore import Qt

sys.path.insert(0, str(Path(__file__).parents[1]))
sys.path.insert(0, str(Path(__file__).parent))
from speech import tiny_model  # noqa: E402
from ui_helpers import close_studio, open_studio, write_wav  # noqa: E402


def test_fine_tune_preview_and_transcription_leave_torch_out(qtbot, tmp_path: Path, monkeypatch) -> None:
    from s2studio.audio.asr import AsrSettings
    from s2studio.engine.fake import FakeEngine
    from s2studio.ui.control.clips import ClipJobs
    from s2studio.ui.voices.finetune.dialog import FineTuneDialog

    assert "torch" not in sys.modules
    whisper = tiny_model()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    w = open_studio(qtbot, lambda: FakeEngine(frame_latency_s=0.001))
    try:
        lib = w.library
        voice = lib.create("Alice", [(write_wav(tmp_path / f"c{i}.wav", 8.0, 150 + 40 * i), f"Clip {i}, spoken.")
                                     for i in range(4)])
        dialog = FineTuneDialog(lib, voice.id, Path(os.environ["S2STUDIO_PROBE_MODEL"]), tmp_path / "data",
                                host=w.ctx.host, model_info=w.model.info)
        qtbot.addWidget(dialog)
        dialog.show()
        dialog.form.steps.setValue(1)
        dialog.form.batch_size.setValue(1)
        dialog.form.max_length.setValue(128)
        dialog.form.device.setCurrentIndex(dialog.form.device.findData("cpu"))
        with qtbot.waitSignal(dialog.run.estimated, timeout=240_000) as estimated:
            qtbot.mouseClick(dialog.estimate_button, Qt.MouseButton.LeftButton)
        assert estimated.args[1] == "" and estimated.args[0].seconds_per_step > 0
        with qtbot.waitSignal(dialog.run.ended, timeout=240_000) as ended:
            qtbot.mouseClick(dialog.start_button, Qt.MouseButton.LeftButton)
        assert ended.args == [str(tmp_path / "data" / "training" / voice.id / "lora.safetensors"), ""]
        qtbot.waitUntil(lambda: all(r.state == "ready" for r in dialog.checkpoints.rows), timeout=30_000)
        with qtbot.waitSignal(dialog.checkpoints.previews.ready, timeout=30_000):  # the voice's preview, with its new LoRA
            assert dialog.checkpoints.previews.preview(lib.get(voice.id)) is None

        jobs = ClipJobs()
        t = np.arange(44100 * 2) / 44100
        with qtbot.waitSignal(jobs.transcribed, timeout=120_000) as heard:
            jobs.transcribe(1, 1, (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 44100,
                            AsrSettings(str(whisper), "en"))
        assert heard.args[:2] == [1, 1]
        jobs.wait()
    finally:
        close_studio(w)
    assert "torch" not in sys.modules, "the window's process imported torch"
