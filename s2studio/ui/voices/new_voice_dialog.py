"""The dialog that names a new voice (1–4 clips, a transcript each) or adds a clip to a voice."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QFormLayout, QHBoxLayout, QLabel, QLineEdit,
                               QPlainTextEdit, QPushButton, QWidget)

from s2studio.ui.voices.voice_details import clip_warnings, play_file


class NewVoiceDialog(QDialog):
    """Name a new voice made of 1–4 clips, or add one clip to an existing voice (`add_to`): each clip
    has its own transcript, checks and preview."""

    def __init__(self, clips: Path | Sequence[Path], transcript: str = "", parent: QWidget | None = None,
                 add_to: str | None = None) -> None:
        super().__init__(parent)
        self.clips = [clips] if isinstance(clips, Path) else list(clips)
        self.clip = self.clips[0]
        self.setWindowTitle(f"Add a clip to “{add_to}”" if add_to else "New voice")
        self.setObjectName("newVoiceDialog")
        self.setMinimumWidth(460)
        form = QFormLayout(self)
        stem = self.clip.stem.replace("_", " ").replace("-", " ").strip().title()[:60]
        self.name = QLineEdit(stem or "New voice")
        self.name.setAccessibleName("Voice name")
        if add_to is None:
            form.addRow("Name", self.name)
        self.transcripts: list[QPlainTextEdit] = []
        self.checks: list[QLabel] = []
        several = len(self.clips) > 1
        for n, clip in enumerate(self.clips, start=1):
            label = f"Clip {n}" if several else "Clip"
            row = QHBoxLayout()
            row.addWidget(QLabel(clip.name), 1)
            play = QPushButton("▶ Play")
            play.setAccessibleName(f"Play clip {n}" if several else "Play the clip")
            play.clicked.connect(lambda _=False, c=clip: self._show_reason(play_file(c)))
            row.addWidget(play)
            form.addRow(label, row)
            edit = QPlainTextEdit(transcript if n == 1 else "")
            edit.setPlaceholderText(f"Type exactly what is said in {clip.name}.")
            edit.setAccessibleName(f"Transcript of clip {n}" if several else "Transcript of the clip")
            edit.setMaximumHeight(70 if several else 100)
            form.addRow("Transcript", edit)
            self.transcripts.append(edit)
            warnings = clip_warnings(clip)
            checks = QLabel("\n".join(f"⚠ {w}" for w in warnings) or "✓ Clip looks good.")
            checks.setWordWrap(True)
            checks.setAccessibleName(f"Checks of clip {n}" if several else "Clip checks")
            form.addRow("Checks", checks)
            self.checks.append(checks)
        self.transcript = self.transcripts[0]
        self.warnings = self.checks[0]
        self.consent = QLineEdit()
        self.consent.setPlaceholderText("Whose voice is this, and did they agree? (optional)")
        self.consent.setAccessibleName("Consent and source note")
        if add_to is None:
            form.addRow("Source", self.consent)
        self.reason = QLabel("")
        self.reason.setWordWrap(True)
        form.addRow(self.reason)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Add clip" if add_to else "Create voice")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        self.buttons = buttons
        form.addRow(buttons)

    def pairs(self) -> list[tuple[Path, str]]:
        """(clip, transcript) as typed, for `VoiceLibrary.create`."""
        return [(c, t.toPlainText()) for c, t in zip(self.clips, self.transcripts, strict=True)]

    def _show_reason(self, text: str) -> None:
        self.reason.setText(text)
