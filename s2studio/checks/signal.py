"""The checks that read the take's samples alone: pace, fade, a cut-off end, a runaway, pauses and clipping.
Numpy only; loudness is the studio's BS.1770 meter (`audio.dsp`), the one EBU R128 measures with.

Speech is found by level: the take's RMS in 10 ms frames, its speech level the 95th percentile of them, and a frame
is sound when it is within 35 dB of that level (and above -65 dBFS). That is enough for TTS takes, which have no
room noise: a pause is a run of quiet frames between the first sound and the last.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from s2studio.audio import FRAME_SAMPLES
from s2studio.audio.dsp import integrated_loudness
from s2studio.checks.settings import CheckSettings
from s2studio.checks.words import normalise
from s2studio.state.take_check import CheckResult

FRAME_S = 0.01
BELOW_SPEECH_DB = 35.0
FLOOR_DB = -65.0
PAUSE_S = 0.25
"""Quiet longer than this inside a line is a pause (left out of the pace)."""
SHORT_TERM_S = 3.0
"""EBU R128's short-term window: the longest stretch each third's loudness is measured over."""
MIN_FADE_SPAN_S = 1.5
MIN_PACE_SYLLABLES = 8
END_S = 0.02
CUT_BELOW_DB = 25.0
"""The last 20 ms louder than this many dB under the speech (and no quiet after the last sound): cut off."""


@dataclass(frozen=True)
class Speech:
    """Where the sound of a take is, in 10 ms frames."""

    rate: int
    db: np.ndarray
    level: float
    """The speech's level, dBFS (95th percentile of the frames' RMS)."""
    start: int
    end: int
    """First and last frame of sound (end inclusive); start > end when there is none."""
    pauses: tuple[tuple[int, int], ...]
    """Runs of quiet frames between start and end, as (first, last + 1)."""

    @property
    def found(self) -> bool:
        return self.start <= self.end

    @property
    def span_s(self) -> float:
        return (self.end - self.start + 1) * FRAME_S if self.found else 0.0

    def talking_s(self) -> float:
        """The span less its pauses longer than `PAUSE_S`."""
        long = sum(b - a for a, b in self.pauses if (b - a) * FRAME_S > PAUSE_S)
        return max(self.span_s - long * FRAME_S, 0.0)

    def longest_pause_s(self) -> float:
        return max(((b - a) * FRAME_S for a, b in self.pauses), default=0.0)


def find_speech(samples: np.ndarray, rate: int) -> Speech:
    hop = max(1, int(rate * FRAME_S))
    x = np.asarray(samples, np.float64).reshape(-1)
    n = len(x) // hop
    if n == 0:
        return Speech(rate, np.zeros(0), -120.0, 0, -1, ())
    power = np.mean(x[:n * hop].reshape(n, hop) ** 2, axis=1)
    db = 10 * np.log10(np.maximum(power, 1e-12))
    loud = db[db > -70]
    level = float(np.percentile(loud, 95)) if len(loud) else -120.0
    sound = db > max(level - BELOW_SPEECH_DB, FLOOR_DB)
    idx = np.flatnonzero(sound)
    if not len(idx):
        return Speech(rate, db, level, 0, -1, ())
    start, end = int(idx[0]), int(idx[-1])
    inner = ~sound[start:end + 1]
    edges = np.diff(np.concatenate([[0], inner.astype(np.int8), [0]]))
    pauses = tuple((start + int(a), start + int(b)) for a, b in zip(np.flatnonzero(edges == 1),
                                                                      np.flatnonzero(edges == -1), strict=True))
    return Speech(rate, db, level, start, end, pauses)


def syllables(text: str) -> int:
    """Syllables of what the line says: vowel groups of each word (numbers written out), one per character of
    scripts written in syllables or ideographs (Chinese, Japanese, Korean)."""
    count = 0
    for word in normalise(text):
        cjk = len(re.findall(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]", word))
        count += cjk or max(1, len(re.findall(r"[aeiouyàáâãäåæèéêëìíîïòóôõöøùúûüýÿœа-яё]+", word)))
    return count


def pace_of(text: str, speech: Speech) -> float | None:
    """Syllables per second of talking (None when the line is too short to tell)."""
    n, talking = syllables(text), speech.talking_s()
    return n / talking if n >= MIN_PACE_SYLLABLES and talking > 0.3 else None


def pace_check(pace: float | None, clips: float | None, neighbours: float | None,
               settings: CheckSettings) -> CheckResult:
    """The take's pace against the voice's own clips and against the lines around it (same speaker): each
    comparison there is judges it, and the worse verdict stands (a take can match a fast chapter and still be
    twice its voice's speed, or match the voice and rush against its neighbours)."""
    if pace is None:
        return CheckResult("pace", "skipped", 1.0, None, "too short to tell")
    against = [(ref, what) for ref, what in ((clips, "this voice's clips"), (neighbours, "the lines around it"))
               if ref is not None and ref > 0]
    if not against:
        return CheckResult("pace", "skipped", 1.0, pace, f"{pace:.1f} syllables/s; no clips or neighbours to "
                                                         "compare with")
    ratio = max((pace / ref for ref, _ in against), key=lambda r: max(r, 1 / r))
    off = max(ratio, 1 / ratio)
    verdict = "failed" if off >= settings.pace_fail else "warning" if off >= settings.pace_warn else "passed"
    how = "too fast" if ratio > 1 else "too slow"
    words = f"{pace:.1f} syllables/s against " + " and ".join(f"{ref:.1f} for {what}" for ref, what in against)
    reason = f"{how}: {words}" if verdict != "passed" else words
    return CheckResult("pace", verdict, float(np.clip(1 - (off - 1) / (settings.pace_fail - 1), 0, 1)),
                       round(pace, 3), reason)


def fade_check(samples: np.ndarray, speech: Speech, settings: CheckSettings) -> CheckResult:
    if speech.span_s < MIN_FADE_SPAN_S:
        return CheckResult("fade", "skipped", 1.0, None, "too short to tell")
    hop = int(speech.rate * FRAME_S)
    a, b = speech.start * hop, (speech.end + 1) * hop
    third = min((b - a) // 3, int(SHORT_TERM_S * speech.rate))
    first = integrated_loudness(samples[a:a + third], speech.rate)
    last = integrated_loudness(samples[b - third:b], speech.rate)
    if not np.isfinite(first) or not np.isfinite(last):
        return CheckResult("fade", "skipped", 1.0, None, "too quiet to measure")
    drop = first - last
    verdict = "failed" if drop >= settings.fade_fail_db else "warning" if drop >= settings.fade_warn_db else "passed"
    reason = (f"the last third is {drop:.1f} dB quieter than the first" if drop > 0
              else f"the last third is {-drop:.1f} dB louder than the first")
    return CheckResult("fade", verdict, float(np.clip(1 - max(drop, 0) / (2 * settings.fade_fail_db), 0, 1)),
                       round(float(drop), 2), reason)


def end_check(speech: Speech, settings: CheckSettings) -> CheckResult:
    if not speech.found:
        return CheckResult("end", "skipped", 1.0, None, "no sound")
    quiet_ms = (len(speech.db) - 1 - speech.end) * FRAME_S * 1000
    tail = speech.db[-max(1, int(END_S / FRAME_S)):]
    last_db = float(10 * np.log10(np.mean(10 ** (tail / 10)))) - speech.level
    cut = quiet_ms < settings.end_quiet_ms and last_db > -CUT_BELOW_DB
    if cut:
        return CheckResult("end", "failed", 0.0, round(last_db, 1),
                           f"cut off: the last 20 ms are {-last_db:.0f} dB under the speech, with no quiet after it")
    return CheckResult("end", "passed", 1.0, round(last_db, 1), f"ends in {quiet_ms:.0f} ms of quiet")


def runaway_check(samples: int, max_frames: int | None) -> CheckResult:
    frames = samples // FRAME_SAMPLES
    if not max_frames:
        return CheckResult("runaway", "skipped", 1.0, float(frames), "frame limit unknown")
    if frames >= max_frames - 1:
        return CheckResult("runaway", "failed", 0.0, float(frames),
                           f"ran to the frame limit ({frames} frames): the model never ended the line")
    return CheckResult("runaway", "passed", 1.0, float(frames), f"{frames} of at most {max_frames} frames")


def silence_check(speech: Speech, settings: CheckSettings) -> CheckResult:
    if not speech.found:
        return CheckResult("silence", "failed", 0.0, None, "the take is silent")
    longest = speech.longest_pause_s()
    verdict = ("failed" if longest >= settings.silence_fail_s else
               "warning" if longest >= settings.silence_warn_s else "passed")
    reason = f"a pause of {longest:.1f} s inside the line" if verdict != "passed" else f"longest pause {longest:.1f} s"
    return CheckResult("silence", verdict, float(np.clip(1 - longest / (2 * settings.silence_fail_s), 0, 1)),
                       round(longest, 2), reason)


def clipping_check(samples: np.ndarray, settings: CheckSettings) -> CheckResult:
    x = np.abs(np.asarray(samples, np.float32))
    share = float(np.count_nonzero(x >= 0.999)) / max(len(x), 1)
    verdict = "failed" if share >= settings.clip_fail else "warning" if share >= settings.clip_warn else "passed"
    reason = f"{share:.3%} of the samples at full scale" if share else "no sample at full scale"
    return CheckResult("clipping", verdict, float(np.clip(1 - share / settings.clip_fail, 0, 1)), share, reason)
