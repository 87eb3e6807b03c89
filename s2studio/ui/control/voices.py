"""The voice library's commands: create, add or remove a clip, rename, delete with one level of undo, import and
export `.s2voice` files. QtCore only.

The views ask the person (names, files, which clip) and call these; every change of the library comes back as one
`changed` signal, which the voice list, the cast and the document follow. A refusal is a `UserError` the view
shows where the person is (the new-voice dialog keeps it open with its reason, a panel shows a warning).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from s2studio.errors import UserError
from s2studio.state.voices import Voice, VoiceLibrary

logger = logging.getLogger(__name__)


class VoiceCommands(QObject):
    changed = Signal(str)
    """The library changed; the voice to select ("" keeps the selection)."""
    message = Signal(str)
    """A one-line notice for the status bar."""
    undo_offered = Signal(str)
    """What Undo would bring back (the deleted voice's name); "" when there is nothing to undo."""

    def __init__(self, library: VoiceLibrary, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.library = library
        self._undo_file: Path | None = None
        # Made at the first delete; removed when the window closes (`forget_undo`) or at exit.
        self._undo_dir: tempfile.TemporaryDirectory[str] | None = None

    def voices(self) -> list[Voice]:
        return self.library.list()

    def reread(self) -> None:
        """The library changed outside these commands (a project's packed voices, a LoRA attached)."""
        self.changed.emit("")

    def create(self, name: str, pairs: list[tuple[Path, str]], consent: str = "") -> Voice:
        voice = self.library.create(name, pairs, consent=consent)
        self._done(voice, f"Voice “{voice.name}” created.")
        return voice

    def add_clip(self, voice_id: str, clip: Path, transcript: str) -> Voice:
        voice = self.library.add_clip(voice_id, clip, transcript)
        self._done(voice, f"Clip added to “{voice.name}”.")
        return voice

    def remove_clip(self, voice_id: str, clip_id: str) -> Voice:
        voice = self.library.remove_clip(voice_id, clip_id)
        self._done(voice, f"Clip removed from “{voice.name}”.")
        return voice

    def rename(self, voice_id: str, name: str) -> None:
        self.library.rename(voice_id, name)
        self.changed.emit("")

    def delete(self, voice_id: str) -> None:
        """Delete at once (no question), keeping a copy so that Undo brings it back with the same id. Without a
        copy there is no delete: the voice stays as it was and the UserError says why."""
        voice = self.library.get(voice_id)
        if self._undo_file is not None:  # one level of undo: the copy before it goes
            self._undo_file.unlink(missing_ok=True)
            self._undo_file = None
        try:
            if self._undo_dir is None:
                self._undo_dir = tempfile.TemporaryDirectory(prefix="s2studio-undo-")
            self._undo_file = self.library.export(voice_id, Path(self._undo_dir.name) / f"{voice_id}.s2voice")
        except (UserError, OSError) as exc:
            self.undo_offered.emit("")
            reason = exc if isinstance(exc, UserError) else (
                f"The temp folder cannot hold the undo copy ({exc.strerror or exc}); free some space there.")
            raise UserError(f"{reason}\n“{voice.name}” was not deleted.") from exc
        self.library.delete(voice_id)
        self.undo_offered.emit(voice.name)
        self.changed.emit("")
        self.message.emit(f"Voice “{voice.name}” deleted.")

    def undo_delete(self) -> None:
        if self._undo_file is None:
            return
        voice = self.library.import_voice(self._undo_file)
        self._undo_file.unlink(missing_ok=True)
        self._undo_file = None
        self.undo_offered.emit("")
        self._done(voice, f"Voice “{voice.name}” restored.")

    def forget_undo(self) -> None:
        """Drop the deleted voice's copy and its folder: nothing of the studio stays in the temp folder."""
        self._undo_file = None
        self.undo_offered.emit("")
        if self._undo_dir is not None:
            self._undo_dir.cleanup()
            self._undo_dir = None

    def export(self, voice_id: str, path: Path) -> Path:
        path = self.library.export(voice_id, path)
        self.message.emit(f"Exported to {path}.")
        return path

    def import_file(self, path: Path) -> Voice:
        """Import one `.s2voice` file and select it."""
        voice = self.library.import_voice(path)
        self.changed.emit(voice.id)
        return voice

    def _done(self, voice: Voice, message: str) -> None:
        self.changed.emit(voice.id)
        self.message.emit(message)
