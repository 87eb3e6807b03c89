"""The one router for files dropped on the studio, wherever they land: the audio files of a drop together make
one new voice (1–4 clips), each `.s2voice` is imported, a project (`.s2proj` folder) opens. QtCore only.

The router takes the drops that land on the window (`watch`) and those the voice list hands it; the handlers are the views' commands, which ask what
they need (the new voice's name, whether to discard unsaved work). A drop is routed once the event loop is back,
so the dragging application is not held while a dialog is open.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QEvent, QMimeData, QObject, QTimer, Signal

from s2studio.errors import UserError

logger = logging.getLogger(__name__)

AUDIO_SUFFIXES = frozenset({".wav", ".flac", ".ogg", ".mp3", ".aiff", ".aif"})
VOICE_SUFFIX = ".s2voice"


def dropped_paths(mime: QMimeData) -> list[Path]:
    """The local files of a drag (links and text carry none)."""
    return [Path(u.toLocalFile()) for u in mime.urls() if u.isLocalFile()]


def is_audio(path: Path) -> bool:
    return path.suffix.lower() in AUDIO_SUFFIXES


def is_project(path: Path) -> bool:
    return path.suffix == ".s2proj" or (path / "project.json").is_file()


def voice_files(paths: Sequence[Path]) -> list[Path]:
    """What makes or brings a voice: audio clips and `.s2voice` files (what the voice list takes)."""
    return [p for p in paths if is_audio(p) or p.suffix == VOICE_SUFFIX]


class DropRouter(QObject):
    refused = Signal(str)
    """A dropped project could not be opened: one line saying why."""

    def __init__(self, new_voice: Callable[[list[Path]], object], import_voice: Callable[[Path], object],
                 open_project: Callable[[Path], object], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._new_voice, self._import_voice, self._open_project = new_voice, import_voice, open_project

    def watch(self, window: QObject) -> None:
        """Take the drops of files that land on `window` (one that accepts drops) and on no part that takes them."""
        window.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.DragEnter:
            if dropped_paths(event.mimeData()):
                event.acceptProposedAction()
            return True
        if event.type() == QEvent.Type.Drop:
            event.acceptProposedAction()
            self.route(dropped_paths(event.mimeData()))
            return True
        return super().eventFilter(watched, event)

    def route(self, paths: Sequence[Path]) -> None:
        """Open what was dropped, once the drop's event has returned."""
        paths = list(paths)
        QTimer.singleShot(0, self, lambda: self.open(paths))

    def open(self, paths: Sequence[Path]) -> None:
        """The audio files together make one voice; each `.s2voice` is imported; each project opens."""
        audio = [p for p in paths if is_audio(p)]
        if audio:
            self._new_voice(audio)
        for path in paths:
            if path.suffix == VOICE_SUFFIX:
                self._import_voice(path)
            elif is_project(path):
                try:
                    self._open_project(path)
                except UserError as exc:
                    self.refused.emit(str(exc))
