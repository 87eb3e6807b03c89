"""Automatic transcripts of reference clips (design.md §8): faster-whisper, cached by audio and model.

Why faster-whisper: S2 clones from a clip and its exact transcript, and Whisper is what peers use for it.
faster-whisper runs Whisper through CTranslate2 (int8 on the CPU, well under real time on two cores for tiny
and base, bench/asr_speed.py), is MIT, needs no torch (the studio's GUI process never imports torch) and is an
optional extra (`pip install 's2studio[asr]'`). Its bundled Silero VAD skips the silence Whisper would
otherwise fill with invented words.

`transcribe` takes samples (the trimmed clip, not its file), resamples them to 16 kHz, and looks the result up
in the cache first: `paths.cache_dir()/transcripts/<sha256 of the 16 kHz float32 samples>-<model key>.json`,
written through `state.atomic`; the model key names the model's files (the Hugging Face snapshot, or a
folder's path and size) and the language asked for, so another model or language transcribes again.
Everything here blocks: callers run it on a worker thread (the studio: `ui.control.background`), with a
`cancel` event checked between Whisper's 30 s windows and during a download.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from s2studio import paths
from s2studio.audio.asr_languages import language_name
from s2studio.audio.asr_local import present_instead
from s2studio.audio.asr_models import (DEFAULT_MODEL, INSTALL_HINT, NotHere, OtherModelHere, Progress, asr_missing, describe,
                                       ensure_model)
from s2studio.audio.dsp import resample
from s2studio.errors import Cancelled, UserError, printable
from s2studio.state.audio_limits import rate_problem
from s2studio.state.atomic import write_text_atomic

log = logging.getLogger(__name__)

ASR_RATE = 16000
"""Whisper hears 16 kHz."""
CACHE_FORMAT = "s2studio-transcript-1"


@dataclass(frozen=True)
class AsrSettings:
    """What the person chose in Settings ▸ Transcripts (and the command line's --asr-model/--language)."""

    model: str = DEFAULT_MODEL
    """A size of `asr_models.MODEL_SIZES`, or a folder holding a faster-whisper model."""
    language: str = ""
    """A Whisper language code, or "" to detect the language."""


@dataclass(frozen=True)
class Transcript:
    text: str
    language: str
    """The code Whisper detected (or was given)."""
    language_probability: float
    model: str
    """The model as the studio names it ("base", or a folder's name)."""

    @property
    def language_label(self) -> str:
        """"English (98%)" with the detection's confidence, or just the name when it was certain or given."""
        name = language_name(self.language)
        return f"{name} ({self.language_probability:.0%})" if self.language_probability < 0.995 else name


def audio_key(samples: np.ndarray) -> str:
    """The sha256 of 16 kHz float32 samples: equal audio gives an equal key, whatever file it came from."""
    return hashlib.sha256(np.ascontiguousarray(samples, dtype="<f4").tobytes()).hexdigest()


def model_key(folder: Path, settings: AsrSettings) -> str:
    """The model's identity for the cache: its folder (a Hugging Face snapshot is named by its commit) and the
    size of its weights, with the language asked for."""
    weights = folder / "model.bin"
    stat = weights.stat()
    ident = f"{folder.resolve()}:{stat.st_size}:{stat.st_mtime_ns}:{settings.language or 'detect'}"
    return hashlib.sha256(ident.encode("utf-8", "surrogateescape")).hexdigest()[:16]


class TranscriptCache:
    """One JSON file per (audio, model); a damaged entry is a miss."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = Path(folder) if folder is not None else paths.cache_dir() / "transcripts"

    def path(self, audio: str, model: str) -> Path:
        return self.folder / audio[:2] / f"{audio}-{model}.json"

    def get(self, audio: str, model: str) -> Transcript | None:
        path = self.path(audio, model)
        try:
            raw = json.loads(path.read_text("utf-8"))
            if raw.pop("format", None) != CACHE_FORMAT:
                return None
            return Transcript(str(raw["text"]), str(raw["language"]), float(raw["language_probability"]),
                              str(raw["model"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring the damaged cached transcript %s: %s", path, exc)
            return None

    def put(self, audio: str, model: str, transcript: Transcript) -> None:
        path = self.path(audio, model)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, json.dumps({"format": CACHE_FORMAT, **asdict(transcript)}, ensure_ascii=False))
        except (OSError, UserError) as exc:  # a cache that cannot be written costs a second transcription only
            log.warning("cannot cache the transcript in %s: %s", path, exc)


class Recognizer:
    """One loaded Whisper (kept between calls: loading base takes ~1 s). Thread-safe: one transcription at
    a time."""

    _lock = threading.Lock()
    _loaded: tuple[Path, Any] | None = None

    @classmethod
    def model(cls, folder: Path) -> Any:
        """The `WhisperModel` of `folder`, loaded once (the previous one is released)."""
        if cls._loaded is not None and cls._loaded[0] == folder:
            return cls._loaded[1]
        cls._loaded = None
        try:
            from faster_whisper import WhisperModel  # noqa: PLC0415 - the optional extra
        except ImportError:
            raise UserError(INSTALL_HINT) from None
        try:
            model = WhisperModel(str(folder), device="cpu", compute_type="int8")
        except (RuntimeError, ValueError, OSError) as exc:
            log.warning("loading the speech-recognition model %s failed: %r", folder, exc)
            raise UserError(f"cannot load the speech-recognition model in {printable(folder)} ({printable(exc, 120)}); "
                            "choose another model in Settings") from None
        cls._loaded = (folder, model)
        return model

    @classmethod
    def release(cls) -> None:
        with cls._lock:
            cls._loaded = None


def transcribe(samples: np.ndarray, rate: int, settings: AsrSettings = AsrSettings(),
               cancel: threading.Event | None = None, progress: Progress | None = None,
               cache: TranscriptCache | None = None, endpoint: str | None = None) -> Transcript:
    """What is said in `samples` (mono float at `rate`): from the cache, or by the model (downloaded first
    when needed). Raises `Cancelled` when `cancel` is set, `UserError` when it cannot be done."""
    problem = rate_problem("the audio", rate)
    if problem:  # the resampler's work grows with the reduced ratio's terms: only the rates every reader takes
        raise UserError(problem)
    missing = asr_missing()
    if missing:
        raise UserError(missing)
    cache = cache or TranscriptCache()
    audio = np.asarray(samples, dtype=np.float32).reshape(-1)
    audio = resample(audio, rate, ASR_RATE) if rate != ASR_RATE else audio
    try:
        folder = ensure_model(settings.model, progress, cancel, endpoint=endpoint)
    except NotHere as exc:  # offline: offer a model that is on this computer, when there is one
        other = present_instead(settings.model)
        if other is None:
            raise
        raise OtherModelHere(exc, other.label, other.model) from None
    key_audio, key_model = audio_key(audio), model_key(folder, settings)
    hit = cache.get(key_audio, key_model)
    if hit is not None:
        return hit
    if cancel is not None and cancel.is_set():
        raise Cancelled()
    transcript = _recognize(audio, folder, settings, cancel, progress)
    cache.put(key_audio, key_model, transcript)
    return transcript


def _recognize(audio: np.ndarray, folder: Path, settings: AsrSettings, cancel: threading.Event | None,
               progress: Progress | None) -> Transcript:
    total = max(len(audio) / ASR_RATE, 1e-6)
    name = describe(settings.model)
    with Recognizer._lock:
        if progress is not None:
            progress(0.0, f"Loading the {name} speech-recognition model…")
        model = Recognizer.model(folder)
        if progress is not None:
            progress(0.0, "Transcribing…")
        segments, info = model.transcribe(audio, language=settings.language or None, beam_size=5,
                                          vad_filter=True, condition_on_previous_text=False)
        texts = []
        for segment in segments:  # a generator: each 30 s window is decoded when asked for
            if cancel is not None and cancel.is_set():
                raise Cancelled()
            texts.append(segment.text)
            if progress is not None:
                progress(min(segment.end / total, 1.0), "Transcribing…")
        if cancel is not None and cancel.is_set():
            raise Cancelled()
    text = re.sub(r"\s+", " ", "".join(texts)).strip()
    return Transcript(text, info.language, float(info.language_probability), name)


def word_probabilities(samples: np.ndarray, rate: int, text: str, language: str,
                       settings: AsrSettings = AsrSettings()) -> list[tuple[str, float]]:
    """How sure Whisper is of each word of `text` in `samples` when it is told the text (its decoder forced
    through it, the probabilities faster-whisper's word timestamps carry): a word the audio does not hold scores
    near 0 even where a free transcript would have misheard it. Words as Whisper splits them (punctuation apart);
    the first 30 s of audio only (a line). Blocks; `UserError` when it cannot be done."""
    missing = asr_missing()
    if missing:
        raise UserError(missing)
    if not text.strip():
        return []
    from faster_whisper.audio import pad_or_trim  # noqa: PLC0415 - the optional extra
    from faster_whisper.tokenizer import Tokenizer  # noqa: PLC0415

    audio = np.asarray(samples, dtype=np.float32).reshape(-1)
    audio = resample(audio, rate, ASR_RATE) if rate != ASR_RATE else audio
    folder = ensure_model(settings.model)
    with Recognizer._lock:
        model = Recognizer.model(folder)
        features = model.feature_extractor(audio[:30 * ASR_RATE])
        encoded = model.encode(pad_or_trim(features))
        multilingual = model.model.is_multilingual
        tokenizer = Tokenizer(model.hf_tokenizer, multilingual, task="transcribe",
                              language=(language or "en") if multilingual else "en")
        words = model.find_alignment(tokenizer, [tokenizer.encode(" " + text.strip())], encoded,
                                     features.shape[-1])[0]
    return [(str(w["word"]), float(w["probability"])) for w in words]
