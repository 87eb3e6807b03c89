"""The take checks' thresholds (Settings ▸ Checks, `synth --check`) and the key that says which checker made a
result. Torch-free and Qt-free: the window reads it to know which stored results are out of date.

How the defaults were chosen (bench/take_checks.py prints the figures behind them, on espeak-ng speech and the
tests' tiny.en, the weakest recognizer a person may pick): each threshold sits between what clean takes measure
and what the fault it is for measures, nearer the clean side only where the fault is far away.

- words: tiny.en on clean espeak takes makes a near miss in about one word of twenty ("colour" heard as
  "color"), which counts as half an error; so up to 0.12 word error rate passes and 0.30 fails. A word of the line
  missing, a tag read aloud, or three words added in a row fail whatever the rate: those are the model's faults,
  not the recognizer's (a recognizer mishears; it rarely drops or invents a word).
- pace: clean takes are within 15 % of their voice's clips; a take 35 % faster or slower warns, 80 % fails. It is
  judged against the voice's clips and against the picked takes of the lines around it, the worse one standing.
- fade: clean takes' last third is within ±3 dB of their first; 4 dB quieter warns, 6 dB fails (the fault the
  issue names fades 12 dB over the line, which measures 7–9 dB between the thirds).
- end: a take whose last 20 ms are within 25 dB of its speech, with less than 30 ms of quiet after its last sound,
  is cut off.
- silence: a pause of 1.2 s inside a line warns and 2.5 s fails (clean lines pause at most ~0.6 s at a full stop).
- clipping: 0.01 % of samples at full scale warns, 0.1 % fails.
- voice: the embedding of a take of the voice's own speaker scores 0.83–0.97 against its clips (espeak-ng), another
  voice 0.56–0.67; a real clone scores lower than its own recording, so the warning starts at 0.78 and 0.70 fails.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass

from s2studio.state.schema import dataclass_kind

CHECKER_VERSION = 3
"""Raised when a check measures differently: every stored result is then made again (2: pace judged against
the lines around it too; 3: words heard in a word's place or spelled nearly alike are mishearings, not misses)."""


@dataclass(frozen=True)
class CheckSettings:
    words_warn: float = 0.12
    """Word error rate above which "words" warns."""
    words_fail: float = 0.30
    pace_warn: float = 1.35
    """Faster or slower than the voice's own pace by this factor: warns."""
    pace_fail: float = 1.8
    fade_warn_db: float = 4.0
    """The last third quieter than the first by this many dB: warns."""
    fade_fail_db: float = 6.0
    end_quiet_ms: float = 30.0
    """Quiet needed after the last sound for an ending not to count as cut off."""
    silence_warn_s: float = 1.2
    """A pause inside the line this long warns."""
    silence_fail_s: float = 2.5
    clip_warn: float = 0.0001
    """Fraction of samples at full scale that warns."""
    clip_fail: float = 0.001
    voice_warn: float = 0.78
    """Similarity to the voice's clips below which "voice" warns."""
    voice_fail: float = 0.70


LIMITS: dict[str, tuple[float, float]] = {
    "words_warn": (0.0, 1.0), "words_fail": (0.0, 2.0), "pace_warn": (1.0, 4.0), "pace_fail": (1.0, 6.0),
    "fade_warn_db": (0.5, 30.0), "fade_fail_db": (0.5, 40.0), "end_quiet_ms": (0.0, 500.0),
    "silence_warn_s": (0.2, 30.0), "silence_fail_s": (0.2, 60.0), "clip_warn": (0.0, 0.1), "clip_fail": (0.0, 0.5),
    "voice_warn": (0.0, 1.0), "voice_fail": (0.0, 1.0),
}
SETTINGS = dataclass_kind(CheckSettings, LIMITS)
"""The thresholds as stored (Settings ▸ Checks): a value out of range is refused, a missing one is its default."""


@functools.lru_cache(maxsize=16)  # asked for every take a render finishes: the same few settings each time
def check_key(settings: CheckSettings, asr_model: str, asr_language: str) -> str:
    """What made a result: the checker's version, its thresholds and the speech-recognition model. A stored
    result with another key is checked again."""
    blob = json.dumps([CHECKER_VERSION, asdict(settings), asr_model, asr_language], sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:12]
