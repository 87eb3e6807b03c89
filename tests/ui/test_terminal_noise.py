"""No noise in the terminal a person started the studio from: closing the new-voice dialog warns nothing, a
fine-tuning run prints no dtype warning, and an audio underrun the player recovers from goes to the log, not to
stderr."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from PySide6.QtWidgets import QDialogButtonBox

from pulse import pulse_server
from s2studio.demo_model import write_demo_model
from s2studio.ui.voices.new_voice.dialog import NewVoiceDialog
from ui_helpers import close_studio, fake_engine, on_modal, open_studio, write_wav

ROOT = Path(__file__).resolve().parents[2]


def test_cancelling_the_new_voice_dialog_warns_nothing(qtbot, tmp_path, monkeypatch, recwarn):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, fake_engine)
    clips = [write_wav(tmp_path / "a.wav"), write_wav(tmp_path / "b.wav", hz=330)]
    seen = []

    def cancel(d: NewVoiceDialog) -> None:
        seen.append(len(d.cards))
        d.buttons.button(QDialogButtonBox.StandardButton.Cancel).click()

    on_modal(qtbot, NewVoiceDialog, cancel)
    assert w.voices.asking.new_voice_from(clips) is None and seen == [2]
    qtbot.wait(50)
    noise = [str(r.message) for r in recwarn if issubclass(r.category, RuntimeWarning)]
    assert noise == []  # once: six "Failed to disconnect" warnings, the dialog released twice
    close_studio(w)


def test_a_fine_tuning_run_prints_no_warning(tmp_path):
    sys.path.insert(0, str(ROOT / "tests"))
    from test_train_cli import write_clips

    model = write_demo_model(tmp_path / "tiny", seed=1)
    data = write_clips(tmp_path / "data", count=4)
    done = subprocess.run([sys.executable, "-m", "s2studio", "train", "--model", str(model), "--data", str(data),
                           "--out", str(tmp_path / "run"), "--steps", "1", "--batch-size", "1", "--max-length", "128"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONWARNINGS": "default"})
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr  # the dtype notice of torch's RMSNorm said nothing useful


UNDERRUN = textwrap.dedent("""
    import logging, sys, time
    logging.basicConfig(stream=sys.stdout, level=logging.DEBUG, format="%(name)s %(message)s")
    from s2studio.ui.control.player import load_sounddevice
    sd, reason = load_sounddevice()
    assert sd is not None and not reason, reason
    def late(out, frames, at, status):  # a callback late every block: the device underruns
        time.sleep(0.15)
        out[:] = 0
    class Seen(logging.Handler):  # ends the run at the first recovery; a busy machine may take a while to underrun
        recovered = False
        def emit(self, record):
            Seen.recovered = Seen.recovered or "snd_pcm_recover" in record.getMessage()
    logging.getLogger().addHandler(Seen())
    with sd.OutputStream(samplerate=44100, channels=1, callback=late, blocksize=256):
        deadline = time.monotonic() + 30
        while not Seen.recovered and time.monotonic() < deadline:
            time.sleep(0.1)
""")


def test_an_underrun_goes_to_the_log_not_the_terminal(tmp_path):
    with pulse_server(tmp_path / "pulse") as pulse:
        done = subprocess.run([sys.executable, "-c", UNDERRUN], cwd=ROOT, capture_output=True, text=True,
                              timeout=120, env={**pulse.env, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert "ALSA lib" not in done.stderr, done.stderr
    assert "(snd_pcm_recover)" in done.stdout  # the underrun, in the log (its words are a format: "%s occurred")


LOG_PROBE = textwrap.dedent("""
    import logging, sys
    from pathlib import Path
    from s2studio.cli import terminal_logging
    terminal_logging(verbose=False)  # as `s2studio` without a command sets it up, before the studio's log file
    from s2studio.app import setup_logging
    setup_logging(Path(sys.argv[1]))
    logging.getLogger("s2studio.activity").info("render finished: 1 of 1 lines")
    logging.getLogger("s2studio.ui.control.player").warning("no audio output device")
    from PySide6.QtCore import qWarning
    qWarning("Unable to detect a launcher")
""")


def test_the_studios_activity_and_qts_own_messages_go_to_the_log_not_the_terminal(tmp_path):
    done = subprocess.run([sys.executable, "-c", LOG_PROBE, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stderr == "WARNING s2studio.ui.control.player: no audio output device\n"  # what the person must know
    logged = (tmp_path / "studio.log").read_text()
    assert "INFO MainThread s2studio.activity: render finished: 1 of 1 lines" in logged
    assert "INFO MainThread qt.default: Unable to detect a launcher" in logged
