"""Where S2 Studio keeps its data (design.md §7).

One root, the platformdirs user data dir, so that voices, models and projects can be backed up or
moved together; `S2STUDIO_DATA_DIR` replaces it for tests and portable installs (a USB stick).
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_DATA_DIR = "S2STUDIO_DATA_DIR"


def data_dir() -> Path:
    """The data root; not created here (callers create what they write)."""
    override = os.environ.get(ENV_DATA_DIR)
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("s2studio", appauthor=False))


def voices_dir() -> Path:
    return data_dir() / "voices"


def models_dir() -> Path:
    return data_dir() / "models"
