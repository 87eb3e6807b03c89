"""A screenshot of the Fine-tune voice dialog mid-run: a voice of four spoken-length clips, the tiny demo model
trained for real (batch 1, short samples, so that it takes a minute) after Estimate timed one step, the loss plot
as the run drew it, and the checkpoints saved so far with their previews (rendered by the fake engine on an engine
host, as the studio's engine would: the tiny model's own audio is noise either way).

    xvfb-run -a -s "-screen 0 1400x900x24" .venv/bin/python tools/screenshot_finetune.py --out docs/screenshots
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("docs/screenshots"))
    p.add_argument("--steps", type=int, default=40)
    args = p.parse_args()

    from PySide6.QtWidgets import QApplication

    from s2studio.demo_model import write_demo_model
    from s2studio.engine.api import LoadRequest
    from s2studio.engine.fake import FakeEngine
    from s2studio.worker import EngineHost
    from s2studio.state.voices import VoiceLibrary
    from s2studio.ui.voices.finetune.dialog import FineTuneDialog

    app = QApplication([])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["XDG_CACHE_HOME"] = str(root / "cache")  # the previews stay in the temporary folder
        host = EngineHost(lambda: FakeEngine())
        infos: list = []
        host.model_ready.connect(lambda event: infos.append(event.info))
        host.load(LoadRequest("load", Path("fake-model")))
        while not infos:
            app.processEvents()
            time.sleep(0.02)
        model = write_demo_model(root / "tiny", seed=1)
        lib = VoiceLibrary(root / "voices")
        clips = []
        for i in range(4):
            t = np.arange(44100 * 9) / 44100
            x = 0.3 * np.sin(2 * np.pi * (150 + 40 * i) * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
            sf.write(str(root / f"c{i}.wav"), x.astype(np.float32), 44100, subtype="PCM_16")
            clips.append((root / f"c{i}.wav", f"This is clip number {i}, read slowly and clearly."))
        voice = lib.create("Narrator", clips, consent="my own voice")
        dialog = FineTuneDialog(lib, voice.id, model, root, host=host, model_info=infos[0])
        dialog.resize(720, 900)
        dialog.form.steps.setValue(args.steps)
        dialog.form.batch_size.setValue(1)
        dialog.form.max_length.setValue(160)
        dialog.form.device.setCurrentIndex(dialog.form.device.findData("cpu"))
        dialog.form.save_every.setValue(8)
        dialog.show()
        dialog.measure()
        while dialog.run.running:
            app.processEvents()
            time.sleep(0.02)
        dialog.start()
        shot_at = args.steps - 3  # mid-run: Stop is live, the ETA is counting down
        while dialog.run.running and not (dialog.plot.points and dialog.plot.points[-1][0] >= shot_at):
            app.processEvents()
            time.sleep(0.02)
        waited = time.monotonic()  # the checkpoints' previews so far
        while any(r.state in ("waiting", "rendering") for r in dialog.checkpoints.rows) and time.monotonic() - waited < 10:
            app.processEvents()
            time.sleep(0.01)
        args.out.mkdir(parents=True, exist_ok=True)
        dialog.grab().save(str(args.out / "finetune-dialog.png"))
        print(args.out / "finetune-dialog.png", dialog.status.text())
        dialog.run.stop()
        while dialog.run.running:
            app.processEvents()
            time.sleep(0.02)
        host.shutdown()


if __name__ == "__main__":
    main()
