"""What the composition root hands to the window: the engine host, folders and remembered settings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings

from s2studio.worker import EngineHost


@dataclass
class StudioContext:
    host: EngineHost
    engine_kind: str
    """"s2" or "fake"."""
    data_dir: Path
    settings: QSettings
    model_dir: Path | None = None
    engine_switch: Any = None
    """The `EngineSwitch` that chooses this computer or a server (None with the fake engine)."""

    @property
    def autosave_dir(self) -> Path:
        return self.data_dir / "autosave"

    @property
    def voices_dir(self) -> Path:
        return self.data_dir / "voices"
