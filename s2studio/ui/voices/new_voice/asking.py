"""Asking the person for a new voice or one more clip: the file dialog or the microphone, then the new-voice
dialog, run until the voice library takes what it holds or the person cancels. A refusal (a name in use, a clip
that is not speech) is shown in the dialog, which stays open with everything typed in it.

The voices panel, the window's drop router and the Voices menu start here; what the library does is the
commands' (`ui.control.voices`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QDialog, QFileDialog, QWidget

from s2studio.errors import UserError
from s2studio.state.voices import MAX_CLIPS, Voice
from s2studio.ui.control.asr_choice import asr_settings
from s2studio.ui.control.clips import ClipJobs
from s2studio.ui.control.voices import VoiceCommands
from s2studio.ui.file_places import AUDIO_FILTER, remember, start_in
from s2studio.ui.voices.new_voice.clip_draft import ClipDraft
from s2studio.ui.voices.new_voice.dialog import NewVoiceDialog


class NewVoiceAsking:
    """The dialogs that make a voice (browse, record, dropped files) or add a clip to one, over `parent`."""

    def __init__(self, parent: QWidget, commands: VoiceCommands, jobs: ClipJobs,
                 settings: QSettings | None = None) -> None:
        """`jobs`: the clip jobs every dialog shares (so a loaded speech model stays loaded); `settings`: where
        the speech recogniser's choices are kept."""
        self.parent = parent
        self.commands = commands
        self.jobs = jobs
        self.settings = settings

    def record(self) -> None:
        """Record a clip from the microphone, then name the voice made of it."""
        from s2studio.ui.voices.record_dialog import RecordDialog  # noqa: PLC0415 - opened rarely

        dialog = RecordDialog(self.parent, [v.name for v in self.commands.library.list()])
        accepted = dialog.exec()
        take = dialog.take() if accepted else None
        transcript, name = dialog.transcript.toPlainText().strip(), dialog.suggested_name
        dialog.deleteLater()  # modal dialogs are deleted explicitly: a parented, unreferenced one crashed PySide
        if take is not None:
            self.new_voice_from([take], transcript, name=name)

    def browse(self) -> None:
        """Choose 1–4 clips of one voice with the file dialog, then name the voice made of them."""
        names, _ = QFileDialog.getOpenFileNames(self.parent, f"Choose 1–{MAX_CLIPS} reference clips of one voice",
                                                start_in("clips"), AUDIO_FILTER)
        if names:
            remember("clips", Path(names[0]))
            self.new_voice_from([Path(n) for n in names])

    def new_voice_from(self, clips: Path | Sequence[Path | ClipDraft], transcript: str = "",
                       name: str = "") -> Voice | None:
        """Ask for the name and each clip's transcript (filled in automatically when there is none), then
        create one voice of those clips (the first MAX_CLIPS of them). Returns it (None when cancelled)."""
        clips = [clips] if isinstance(clips, Path) else list(clips)
        dialog = self._dialog(clips[:MAX_CLIPS], transcript, name=name)
        if len(clips) > MAX_CLIPS:
            dialog.reason.setText(f"⚠ A voice takes 1–{MAX_CLIPS} clips: only the first {MAX_CLIPS} of the "
                                  f"{len(clips)} files are used.")
        return self._until_accepted(dialog, lambda: self.commands.create(dialog.name.text(), dialog.pairs(),
                                                                         consent=dialog.consent.text()))

    def add_clip(self, voice: Voice, clip: Path | None = None, transcript: str = "") -> Voice | None:
        """One more reference clip for `voice` (chosen with a file dialog when not given); None when cancelled."""
        if clip is None:
            name, _ = QFileDialog.getOpenFileName(self.parent, f"Add a clip to “{voice.name}”", start_in("clips"),
                                                  AUDIO_FILTER)
            if not name:
                return None
            clip = Path(name)
            remember("clips", clip)
        dialog = self._dialog([clip], transcript, add_to=voice.name)

        def add() -> Voice:
            pairs = dialog.pairs()
            if not pairs:
                raise UserError("Add a clip first.")
            return self.commands.add_clip(voice.id, *pairs[0])

        return self._until_accepted(dialog, add)

    def _dialog(self, clips: list, transcript: str, add_to: str | None = None, name: str = "") -> NewVoiceDialog:
        return NewVoiceDialog(clips, transcript, self.parent, add_to=add_to, asr=asr_settings(self.settings),
                              jobs=self.jobs, name=name)

    @staticmethod
    def _until_accepted(dialog: NewVoiceDialog, apply: Callable[[], Voice]) -> Voice | None:
        """Run the dialog until `apply` succeeds or the person cancels. The dialog is released (its jobs, its
        players) either way."""
        try:
            while dialog.exec() == QDialog.DialogCode.Accepted:
                try:
                    return apply()
                except UserError as exc:
                    dialog.reason.setText(f"⚠ {exc}")
            return None
        finally:
            dialog.release()
            dialog.deleteLater()
