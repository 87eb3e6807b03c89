"""Every check of one take, in one call: `Checker.check(job) -> TakeCheck`.

The checker keeps its models between takes (Whisper through `audio.asr`, the voice encoder) and what it measured
of each voice's clips (their pace and embedding, by file). It runs in the checker's own process
(`checks.process`): the speech recognizer and the voice encoder never run in the window's process or in the
engine's loop. A check that cannot run (no speech-recognition model on this computer, the checks extra not
installed, a voice without clips) is "skipped" with the reason; the others still run.
"""

from __future__ import annotations

import importlib.util
import logging
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from s2studio.audio.asr import AsrSettings, transcribe, word_probabilities
from s2studio.audio.asr_models import asr_missing, describe, find_model
from s2studio.audio.dsp import resample
from s2studio.checks import signal
from s2studio.checks.job import CheckJob, Clip
from s2studio.checks.settings import CheckSettings, check_key
from s2studio.checks.words import normalise, support_of, words_check
from s2studio.errors import UserError
from s2studio.state.tags import without_tags
from s2studio.state.take_check import CheckResult, TakeCheck

log = logging.getLogger(__name__)

EMBED_RATE = 16000


@dataclass(frozen=True)
class ClipFacts:
    pace: float | None
    embedding: np.ndarray | None


class Checker:
    def __init__(self, settings: CheckSettings = CheckSettings(), asr: AsrSettings = AsrSettings()) -> None:
        self.settings, self.asr = settings, asr
        self.key = check_key(settings, asr.model, asr.language)
        self._encoder: Any = None
        self._encoder_problem = ""
        self._clips: dict[tuple[str, int, int], ClipFacts] = {}

    def check(self, job: CheckJob) -> TakeCheck:
        """Every check of one take; `UserError` when the checks' own packages are not installed."""
        missing = [name for name in ("num2words", "rapidfuzz") if importlib.util.find_spec(name) is None]
        if missing:
            raise UserError(f"the take checks need {' and '.join(missing)}: pip install 's2studio[checks]'")
        samples = np.asarray(job.samples, np.float32).reshape(-1)
        speech = signal.find_speech(samples, job.rate)
        s = self.settings
        facts = [self._clip(c) for c in job.clips]
        clip_paces = [f.pace for f in facts if f.pace is not None]
        checks = [
            self._words(job.text, samples, job.rate),
            signal.pace_check(signal.pace_of(job.text, speech), statistics.median(clip_paces) if clip_paces else None,
                              statistics.median(job.neighbour_paces) if job.neighbour_paces else None, s),
            signal.fade_check(samples, speech, s),
            signal.end_check(speech, s),
            signal.runaway_check(len(samples), job.max_frames),
            signal.silence_check(speech, s),
            signal.clipping_check(samples, s),
            self._voice(samples, job.rate, [f.embedding for f in facts if f.embedding is not None], bool(job.clips)),
        ]
        return TakeCheck(tuple(checks), self.key)

    # -- words -----------------------------------------------------------------------------------

    def words_problem(self) -> str:
        """Why the words cannot be checked here ("" when they can)."""
        missing = asr_missing()
        if missing:
            return missing
        try:
            here = find_model(self.asr.model)
        except UserError as exc:  # a folder that is not there, a name that is no model
            return str(exc)
        if here is None:
            return (f"the speech-recognition model “{describe(self.asr.model)}” is not on this computer: transcribe "
                    "a clip once to download it, or choose another in Settings ▸ Transcripts")
        return ""

    def _words(self, text: str, samples: np.ndarray, rate: int) -> CheckResult:
        problem = self.words_problem()
        if problem:
            return CheckResult("words", "skipped", 1.0, None, problem)
        try:
            heard = transcribe(samples, rate, self.asr)
        except UserError as exc:
            return CheckResult("words", "skipped", 1.0, None, str(exc))
        lang = heard.language or "en"

        def support() -> list[float | None]:
            spoken = without_tags(text)
            try:
                found = word_probabilities(samples, rate, spoken, lang, self.asr)
            except UserError as exc:
                log.warning("no word probabilities: %s", exc)
                return []
            return support_of(found, normalise(spoken, lang), lang)

        return words_check(text, heard.text, lang, self.settings, support)

    # -- voice -----------------------------------------------------------------------------------

    def encoder(self) -> Any:
        """The voice encoder, loaded on first use (None with `_encoder_problem` when it cannot be)."""
        if self._encoder is None and not self._encoder_problem:
            try:
                from s2studio.checks.voice_encoder import VoiceEncoder  # noqa: PLC0415 - torch, here only

                self._encoder = VoiceEncoder()
            except (UserError, ImportError, OSError, RuntimeError, KeyError) as exc:
                log.warning("the voice encoder cannot be loaded: %r", exc)
                self._encoder_problem = str(exc) if isinstance(exc, UserError) else f"voice encoder: {exc}"
        return self._encoder

    def embed(self, samples: np.ndarray, rate: int) -> np.ndarray | None:
        encoder = self.encoder()
        if encoder is None:
            return None
        speech = signal.find_speech(samples, rate)
        if not speech.found:
            return None
        hop = int(rate * signal.FRAME_S)
        voiced = samples[speech.start * hop:(speech.end + 1) * hop]
        return encoder.embed(resample(voiced, rate, EMBED_RATE) if rate != EMBED_RATE else voiced)

    def _voice(self, samples: np.ndarray, rate: int, clips: list[np.ndarray], has_clips: bool) -> CheckResult:
        if not has_clips:
            return CheckResult("voice", "skipped", 1.0, None, "the voice has no clips to compare with")
        if not clips:
            return CheckResult("voice", "skipped", 1.0, None, self._encoder_problem or "its clips cannot be read")
        take = self.embed(samples, rate)
        if take is None:
            return CheckResult("voice", "skipped", 1.0, None, self._encoder_problem or "no speech to compare")
        mean = np.mean(clips, axis=0)
        similarity = float(take @ (mean / np.linalg.norm(mean)))
        s = self.settings
        verdict = "failed" if similarity < s.voice_fail else "warning" if similarity < s.voice_warn else "passed"
        reason = (f"sounds like another voice: similarity {similarity:.2f} to its clips" if verdict != "passed"
                  else f"similarity {similarity:.2f} to its clips")
        return CheckResult("voice", verdict, float(np.clip(similarity, 0, 1)), round(similarity, 3), reason)

    def _clip(self, clip: Clip) -> ClipFacts:
        """A clip's pace and embedding, measured once per file."""
        path = Path(clip.path)
        try:
            st = path.stat()
        except OSError:
            return ClipFacts(None, None)
        key = (str(path), st.st_size, st.st_mtime_ns)
        facts = self._clips.get(key)
        if facts is None:
            try:
                audio, rate = sf.read(str(path), dtype="float32", always_2d=True)
            except (sf.LibsndfileError, RuntimeError, OSError) as exc:
                log.warning("voice clip %s cannot be read: %s", path, exc)
                return ClipFacts(None, None)
            mono = audio.mean(axis=1)
            facts = ClipFacts(signal.pace_of(clip.transcript, signal.find_speech(mono, rate)) if clip.transcript
                              else None, self.embed(mono, rate))
            self._clips[key] = facts
        return facts
