"""Where S2 Studio keeps its data (design.md §7).

One root, the platformdirs user data dir, so that voices, models and projects can be backed up or
moved together; `S2STUDIO_DATA_DIR` replaces it for tests and portable installs (a USB stick). A root
that cannot be a folder (the variable names a file, or a path through one, or bytes that are not a
path) is refused here, once, with a message that names where it came from.
"""

from __future__ import annotations

import os
from pathlib import Path

from s2studio.errors import UserError, printable

ENV_DATA_DIR = "S2STUDIO_DATA_DIR"


def data_dir() -> Path:
    """The data root; not created here (callers create what they write)."""
    override = os.environ.get(ENV_DATA_DIR)
    if override:
        root = Path(override).expanduser()
        source = f"; set {ENV_DATA_DIR} to a folder"
    else:
        import platformdirs

        root = Path(platformdirs.user_data_dir("s2studio", appauthor=False))
        source = f"; move that file away or set {ENV_DATA_DIR} to a folder"
    for folder in (root, *root.parents):
        if folder.exists():
            if not folder.is_dir():
                raise UserError(f"the data folder {printable(root)} is unusable: {printable(folder)} is a file"
                                + source)
            break
    return root


def cache_dir() -> Path:
    """What can be made or fetched again (speech-recognition models, transcripts, voice previews): the
    platformdirs user cache dir, never backed up with the data."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("s2studio", appauthor=False))


def voices_dir() -> Path:
    return data_dir() / "voices"


def models_dir() -> Path:
    return data_dir() / "models"
