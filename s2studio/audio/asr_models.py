"""The speech-recognition models: which ones, where they live, and fetching one from Hugging Face.

faster-whisper runs CTranslate2 conversions of Whisper. The studio offers four sizes (Settings), all
multilingual because S2 speaks many languages; a folder holding a converted model (`model.bin`,
`config.json`, `tokenizer.json`) can be named instead of a size. A size is downloaded on first use into the
user cache (`paths.cache_dir()/asr-models`, Hugging Face's cache layout, so an interrupted download resumes
and a finished one is found offline), with progress and cancel; offline without the model is one clear
`UserError`, never a traceback.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shlex
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from s2studio import paths
from s2studio.errors import Cancelled, UserError, printable

log = logging.getLogger(__name__)

Progress = Callable[[float, str], None]
"""(fraction 0..1, what is happening) for a progress bar."""


@dataclass(frozen=True)
class ModelSize:
    name: str
    repo: str
    megabytes: int
    label: str


MODEL_SIZES: dict[str, ModelSize] = {m.name: m for m in (
    ModelSize("tiny", "Systran/faster-whisper-tiny", 75, "Tiny: fastest, least exact"),
    ModelSize("base", "Systran/faster-whisper-base", 145, "Base: fast"),
    ModelSize("small", "Systran/faster-whisper-small", 484, "Small: slower, more exact"),
    ModelSize("large-v3-turbo", "mobiuslabsgmbh/faster-whisper-large-v3-turbo", 1620,
              "Large v3 turbo: most exact, slow on a CPU"),
)}
DEFAULT_MODEL = "base"
"""Base (74 M parameters, twice tiny): a fraction of real time on a CPU and far fewer errors than tiny; the
tiny.en of the test package transcribes at 0.13–0.15 s per second of audio on two cores (bench/asr_speed.py)."""
MODEL_FILES = ["config.json", "preprocessor_config.json", "model.bin", "tokenizer.json", "vocabulary.*"]
"""What a CTranslate2 Whisper needs (faster-whisper's own list); nothing else of a repository is fetched."""

INSTALL_HINT = ("Automatic transcripts need the optional package faster-whisper: pip install 's2studio[asr]' "
                "(or type the transcript)")


def asr_missing() -> str:
    """Why transcripts cannot be made here ("" when faster-whisper is installed)."""
    if importlib.util.find_spec("faster_whisper") is None:
        return INSTALL_HINT
    return ""


def models_dir() -> Path:
    return paths.cache_dir() / "asr-models"


def describe(model: str) -> str:
    """A model as the studio names it: "base", or a folder's name (with its parent's when it is just "model")."""
    if model in MODEL_SIZES:
        return model
    path = Path(model)
    return f"{path.parent.name}/{path.name}" if path.name.lower() in ("model", "models") else path.name or model


def model_folder(path: Path) -> Path:
    """`path` when it holds a CTranslate2 Whisper model, else a `UserError` naming what is missing."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise UserError(f"the speech-recognition model folder {printable(path)} does not exist; choose a size "
                        f"({', '.join(MODEL_SIZES)}) or a folder with a faster-whisper model")
    missing = [f for f in ("model.bin", "config.json", "tokenizer.json") if not (path / f).is_file()]
    if missing:
        raise UserError(f"{printable(path)} is not a faster-whisper model folder ({', '.join(missing)} missing)")
    spec = ctranslate2_spec(path / "model.bin")
    if spec is None:
        raise UserError(f"{printable(path)} is not a faster-whisper model folder (its model.bin is not a CTranslate2 "
                        "model)")
    if spec and not spec.startswith("Whisper"):
        raise UserError(f"{printable(path)} holds a CTranslate2 {printable(spec, 40)}, not a Whisper model; choose a "
                        "faster-whisper model folder")
    return path


def ctranslate2_spec(weights: Path) -> str | None:
    """The model type a CTranslate2 `model.bin` names in its header ("WhisperSpec"); "" for a version-1 file,
    which names none; None when it is not a CTranslate2 file (or cannot be read). The header is a little-endian
    int32 version, then from version 2 on a uint16 length and the spec's name, NUL-terminated."""
    try:
        with open(weights, "rb") as f:
            head = f.read(262)
    except OSError:
        return None
    version = int.from_bytes(head[:4], "little") if len(head) >= 4 else 0
    if version == 1:
        return ""
    if not 2 <= version < 100 or len(head) < 6:
        return None
    length = int.from_bytes(head[4:6], "little")
    name = head[6:6 + length]
    if length == 0 or len(name) < length or not name.endswith(b"\0"):
        return None
    try:
        return name[:-1].decode("ascii")
    except UnicodeDecodeError:
        return None


def _size(model: str) -> ModelSize:
    size = MODEL_SIZES.get(model)
    if size is None:
        raise UserError(f"unknown speech-recognition model {model!r}; use one of {', '.join(MODEL_SIZES)} "
                        "or a folder with a faster-whisper model")
    return size


def find_model(model: str, cache: Path | None = None) -> Path | None:
    """The folder of `model` (a size or a folder) on this computer without any network; None when a size
    has not been downloaded yet."""
    if model not in MODEL_SIZES:
        return model_folder(Path(model))
    if importlib.util.find_spec("huggingface_hub") is None:
        return None
    from huggingface_hub import snapshot_download  # noqa: PLC0415 - comes with faster-whisper

    try:
        return Path(snapshot_download(_size(model).repo, cache_dir=cache or models_dir(), local_files_only=True,
                                      allow_patterns=MODEL_FILES))
    except Exception:  # noqa: BLE001 - not cached (or a partial download): the answer is "not here"
        return None


def looks_downloaded(model: str, cache: Path | None = None) -> bool:
    """Whether a size seems to be in the cache (its weights in a snapshot of Hugging Face's cache layout),
    without loading huggingface_hub: cheap enough for a settings page. `find_model` is the real check."""
    if model not in MODEL_SIZES:
        return (Path(model) / "model.bin").is_file()
    folder = (cache or models_dir()) / f"models--{_size(model).repo.replace('/', '--')}" / "snapshots"
    return any(folder.glob("*/model.bin"))


def ensure_model(model: str, progress: Progress | None = None, cancel: threading.Event | None = None,
                 cache: Path | None = None, endpoint: str | None = None) -> Path:
    """The folder of `model`, downloaded first when it is a size not on this computer yet."""
    found = find_model(model, cache)
    if found is not None:
        return found
    return download_model(model, progress, cancel, cache, endpoint)


def download_model(model: str, progress: Progress | None = None, cancel: threading.Event | None = None,
                   cache: Path | None = None, endpoint: str | None = None) -> Path:
    """Fetch a model size from Hugging Face (`endpoint`, else `HF_ENDPOINT` as it is now, else huggingface.co)
    into the cache, reporting bytes through `progress` and stopping with `Cancelled` soon after `cancel` is set."""
    size = _size(model)
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None  # a mirror set after huggingface_hub loaded
    if importlib.util.find_spec("huggingface_hub") is None:
        raise UserError(INSTALL_HINT)
    from huggingface_hub import snapshot_download  # noqa: PLC0415

    bar = _progress_bar(size, progress, cancel)
    try:
        folder = snapshot_download(size.repo, cache_dir=cache or models_dir(), allow_patterns=MODEL_FILES,
                                   tqdm_class=bar, endpoint=endpoint)
        if progress is not None:
            progress(1.0, f"Downloaded the {size.name} speech-recognition model.")
    except Cancelled:
        raise
    except Exception as exc:  # noqa: BLE001 - every hub failure becomes one line; details to the log
        log.info("downloading %s failed: %r", size.repo, exc)
        problem = download_problem(size, exc)
        raise (NotHere(size) if problem == str(NotHere(size)) else UserError(problem)) from None
    return model_folder(Path(folder))


class NotHere(UserError):
    """A size that is not on this computer while Hugging Face cannot be reached (`offering` names one that is)."""

    def __init__(self, size: ModelSize) -> None:
        self.size = size
        self.what = f"the speech-recognition model “{size.name}” ({size.megabytes} MB)"
        super().__init__(f"{self.what} is not on this computer and Hugging Face cannot be reached; connect to the "
                         "internet once to download it, or type the transcript")

    def offering(self, label: str) -> str:
        """The same line, offering the model `label` that is on this computer."""
        return (f"{self.what} is not on this computer and Hugging Face cannot be reached; “{label}” is on this "
                f"computer: choose it in Settings ▸ Transcripts (or connect to the internet once to download "
                f"“{self.size.name}”)")


class OtherModelHere(UserError):
    """`NotHere`, with a model that is on this computer offered instead (`model`: what `AsrSettings.model` holds for
    it). Reads as Settings ▸ Transcripts says it; `for_command_line` says it with the command's option."""

    def __init__(self, missing: NotHere, label: str, model: str) -> None:
        self.missing, self.label, self.model = missing, label, model
        super().__init__(missing.offering(label))

    def for_command_line(self, flag: str) -> str:
        return (f"{self.missing.what} is not on this computer and Hugging Face cannot be reached; “{self.label}” is "
                f"on this computer: pass {flag} {shlex.quote(self.model)} (or connect to the internet once to "
                f"download “{self.missing.size.name}”)")


def download_problem(size: ModelSize, exc: BaseException) -> str:
    """One line for a failed download, by what went wrong (offline, not found, disk, other)."""
    what = f"the speech-recognition model “{size.name}” ({size.megabytes} MB)"
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & {"LocalEntryNotFoundError", "ConnectError", "TimeoutException", "OfflineModeIsEnabled",
                "ConnectionError", "ConnectTimeout"}:
        return str(NotHere(size))
    if names & {"RepositoryNotFoundError", "RevisionNotFoundError", "EntryNotFoundError"}:
        return f"{what} was not found on Hugging Face ({size.repo}); choose another size in Settings"
    if isinstance(exc, OSError):
        return f"cannot store {what} in {printable(models_dir())}: {printable(exc.strerror or exc)}"
    return f"downloading {what} failed ({type(exc).__name__}); try again, or type the transcript"


def _progress_bar(size: ModelSize, progress: Progress | None, cancel: threading.Event | None) -> type:
    """A tqdm class for `snapshot_download`: its byte bars report to `progress`, and every update raises
    `Cancelled` once `cancel` is set, which stops the download threads mid-file. The hub's byte total grows as
    each file starts, so the total shown is at least the size's known one and the fraction never goes back."""
    from tqdm.auto import tqdm  # noqa: PLC0415 - comes with huggingface_hub

    lock = threading.Lock()
    state = {"shown": 0.0}

    class Bar(tqdm):  # type: ignore[misc,valid-type]
        def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
            kwargs.pop("name", None)
            kwargs["disable"] = True  # nothing printed: the studio shows its own bar
            super().__init__(*args, **kwargs)
            self.counted = float(kwargs.get("initial") or 0)
            self.is_bytes = kwargs.get("unit") == "B"

        def update(self, n: float | None = 1) -> bool | None:
            if cancel is not None and cancel.is_set():
                raise Cancelled()
            self.counted += n or 0
            if progress is not None and self.is_bytes:
                total = max(float(self.total or 0), size.megabytes * 1e6)
                with lock:
                    fraction = state["shown"] = max(state["shown"], min(self.counted / total, 1.0))
                progress(fraction, f"Downloading the {size.name} speech-recognition model: "
                         f"{self.counted / 1e6:.0f} of {total / 1e6:.0f} MB")
            return None

    return Bar
