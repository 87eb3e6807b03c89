"""The input of the voice encoder's golden (tests/golden/voice_encoder/): a voiced sound made from a seeded
generator, the same on every machine, so the golden needs no audio file. `python tests/voice_golden.py OUT` in an
environment where `import resemblyzer` works (an older setuptools: its webrtcvad imports pkg_resources) writes
Resemblyzer's own embedding of it to OUT."""

from __future__ import annotations

import sys

import numpy as np

RATE = 16000


def voiced(seconds: float = 3.0, f0: float = 130.0, seed: int = 0) -> np.ndarray:
    """Harmonics of a gliding pitch under a syllable-rate envelope, with a little noise (float32, 16 kHz)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    pitch = f0 * (1 + 0.08 * np.sin(2 * np.pi * 0.7 * t))
    phase = 2 * np.pi * np.cumsum(pitch) / RATE
    sound = sum(np.sin(k * phase) / k * (1.5 if 4 <= k <= 7 else 1.0) for k in range(1, 25))
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * 4.0 * t) ** 2
    out = sound * envelope + 0.02 * rng.standard_normal(t.size)
    return (0.3 * out / np.abs(out).max()).astype(np.float32)


if __name__ == "__main__":
    from resemblyzer import VoiceEncoder  # the reference: Resemblyzer's own code, in its own environment

    encoder = VoiceEncoder("cpu", verbose=False)
    np.save(sys.argv[1], np.stack([encoder.embed_utterance(voiced(seconds, f0, seed))
                                   for seconds, f0, seed in ((3.0, 130.0, 0), (5.0, 210.0, 1))]))
