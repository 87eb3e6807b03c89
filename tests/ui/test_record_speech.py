"""Recording speech as a person would: espeak-ng speaks into a PulseAudio null sink whose monitor is the default
microphone, the studio's record dialog records it through PortAudio and ALSA's PulseAudio plugin, and the tests'
speech-recognition model must hear the sentence in the take, so a garbled take cannot pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import soundfile as sf

from pulse import pulse_server
from s2studio.audio.asr import AsrSettings, transcribe
from speech import SENTENCE, espeak, tiny_model, word_error_rate

PROBE = Path(__file__).with_name("record_probe.py")


def test_a_recorded_sentence_is_heard_in_the_take(tmp_path):
    model = tiny_model()
    espeak(SENTENCE, tmp_path / "sentence.wav")
    with pulse_server(tmp_path / "pulse") as pulse:
        env = {**pulse.env, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(Path(__file__).parents[2])}
        probe = subprocess.Popen([sys.executable, str(PROBE), str(tmp_path / "take.wav")], env=env, text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            first = probe.stdout.readline()
            assert first.startswith("RECORDING"), first + probe.stderr.read()
            speaker = pulse.play_into_mic(tmp_path / "sentence.wav")
            assert speaker.wait(60) == 0, speaker.stderr.read()
            probe.stdin.write("stop\n")
            probe.stdin.flush()
            done = probe.stdout.readline()
            assert done.startswith("DONE"), done + probe.stderr.read()
        finally:
            probe.kill() if probe.poll() is None else None
            probe.wait()
    audio, rate = sf.read(str(tmp_path / "take.wav"), dtype="float32")
    assert len(audio) / rate > sf.info(str(tmp_path / "sentence.wav")).duration  # the whole sentence is in it
    heard = transcribe(audio, rate, AsrSettings(str(model), "en"))
    assert word_error_rate(SENTENCE, heard.text) <= 0.5, heard.text
