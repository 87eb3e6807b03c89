"""Export: format, one file and/or per-line stems, SRT/VTT, gap, normalisation, metadata, with progress.

The picked take of every rendered line goes to `audio.export.export` (the same layout code as the
player's timeline). Writing runs off the GUI thread (`control.background`) so a long MP3 encode never
freezes the window.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFileDialog,
                               QFormLayout, QHBoxLayout, QLabel, QLineEdit, QProgressBar, QPushButton, QWidget)

from s2studio.audio.export import FORMATS, ExportResult, ExportSettings, Metadata, RenderedLine, export
from s2studio.engine import api
from s2studio.state.project import Project
from s2studio.state.script import Script
from s2studio.ui.control.background import Background

FORMAT_LABELS = {"wav": "WAV (16-bit)", "flac": "FLAC (24-bit)", "ogg": "OGG Vorbis", "opus": "OGG Opus",
                 "mp3": "MP3"}


def rendered_lines(project: Project, script: Script) -> tuple[list[RenderedLine], int]:
    """The picked takes in script order, and how many lines have none."""
    out, missing = [], 0
    for line in script.lines:
        take = project.current(line.line_id)
        if take is None:
            missing += 1
        else:
            out.append(RenderedLine(line.line_id, line.speaker, line.text, take.audio))
    return out, missing


class ExportDialog(QDialog):
    gap_changed = Signal(float)
    """The user changed the gap between lines: it is the project's gap, so the player's timeline follows."""

    def __init__(self, project: Project, script: Script, info: api.ModelInfo | None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Export audio")
        self.setObjectName("exportDialog")
        self.setMinimumWidth(520)
        self.lines, missing = rendered_lines(project, script)
        self.model_name = info.name if info else "Fish Audio S2 Pro"
        self.voices = tuple(sorted({v for v in project.cast.values() if v}))
        self.result: ExportResult | None = None
        self._task = Background("export", self)
        self._task.done.connect(self._done)
        form = QFormLayout(self)
        form.setSpacing(8)
        summary = f"{len(self.lines)} rendered line{'s' * (len(self.lines) != 1)}"
        if missing:
            summary += f"; {missing} not rendered yet will be left out"
        self.summary = QLabel(summary)
        form.addRow(self.summary)
        self.format = QComboBox()
        self.format.setAccessibleName("Format")
        for key in FORMATS:
            self.format.addItem(FORMAT_LABELS.get(key, key), key)
        self.format.currentIndexChanged.connect(self._format_changed)
        form.addRow("Format", self.format)
        self.out = QLineEdit(str(Path.home() / f"{project.title or 'script'}.wav"))
        self.out.setAccessibleName("Output file")
        form.addRow("File", self._with_browse(self.out, self._browse_out))
        self.stems = QCheckBox("Also write one file per line (stems) to")
        self.stems.setAccessibleName("Write stems")
        self.stems_dir = QLineEdit(str(Path.home() / "stems"))
        self.stems_dir.setAccessibleName("Stems folder")
        form.addRow(self.stems, self._with_browse(self.stems_dir, self._browse_stems))
        self.srt = QCheckBox("SRT subtitles")
        self.srt.setChecked(True)
        self.srt.setAccessibleName("Write SRT subtitles")
        self.vtt = QCheckBox("WebVTT subtitles")
        self.vtt.setAccessibleName("Write WebVTT subtitles")
        subs = QHBoxLayout()
        subs.addWidget(self.srt)
        subs.addWidget(self.vtt)
        subs.addStretch(1)
        form.addRow("Subtitles", subs)
        self.gap = QDoubleSpinBox()
        self.gap.setRange(0.0, 5.0)
        self.gap.setSingleStep(0.1)
        self.gap.setValue(project.gap_s)
        self.gap.setSuffix(" s")
        self.gap.setAccessibleName("Gap between lines")
        self.gap.setToolTip("Silence between lines, in the export and in the player's timeline.")
        self.gap.valueChanged.connect(self._gap_changed)
        self._project = project
        form.addRow("Gap between lines", self.gap)
        self.normalize = QComboBox()
        self.normalize.setAccessibleName("Normalisation")
        for label, value in (("None", "none"), ("Peak to −1 dBFS", "peak"), ("Loudness to −16 LUFS", "loudness")):
            self.normalize.addItem(label, value)
        form.addRow("Normalise", self.normalize)
        self.title = QLineEdit(project.title)
        self.title.setAccessibleName("Title metadata")
        self.title.setPlaceholderText("Title written into the file")
        form.addRow("Title", self.title)
        note = QLabel("Files are tagged “AI-generated speech” where the format allows.")
        note.setEnabled(False)
        form.addRow(note)
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setVisible(False)
        self.progress.setAccessibleName("Export progress")
        form.addRow(self.progress)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        form.addRow(self.status)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Close)
        self.export_button = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.export_button.setText("Export")
        self.export_button.setEnabled(bool(self.lines))
        self.buttons.accepted.connect(self.start)
        self.buttons.rejected.connect(self.reject)
        form.addRow(self.buttons)

    def _with_browse(self, edit: QLineEdit, slot) -> QWidget:  # noqa: ANN001
        w = QWidget()
        row = QHBoxLayout(w)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(edit, 1)
        b = QPushButton("…")
        b.setAccessibleName(f"Browse: {edit.accessibleName()}")
        b.setMaximumWidth(32)
        b.clicked.connect(slot)
        row.addWidget(b)
        return w

    def _gap_changed(self, value: float) -> None:
        self._project.gap_s = round(value, 3)
        self.gap_changed.emit(self._project.gap_s)

    def _format_changed(self) -> None:
        fmt = self.format.currentData()
        path = Path(self.out.text())
        self.out.setText(str(path.with_suffix(FORMATS[fmt][2])))

    def _browse_out(self) -> None:
        name, _ = QFileDialog.getSaveFileName(self, "Export to", self.out.text())
        if name:
            self.out.setText(name)

    def _browse_stems(self) -> None:
        name = QFileDialog.getExistingDirectory(self, "Stems folder", self.stems_dir.text())
        if name:
            self.stems_dir.setText(name)
            self.stems.setChecked(True)

    def settings(self) -> ExportSettings:
        meta = Metadata(title=self.title.text().strip(), model=self.model_name, voices=self.voices)
        return ExportSettings(format=self.format.currentData(), gap_s=self._project.gap_s,
                              normalize=self.normalize.currentData(), metadata=meta)

    def start(self) -> None:
        out = Path(self.out.text()).expanduser()
        settings = self.settings()
        stems = Path(self.stems_dir.text()).expanduser() if self.stems.isChecked() else None
        srt = out.with_suffix(".srt") if self.srt.isChecked() else None
        vtt = out.with_suffix(".vtt") if self.vtt.isChecked() else None
        self.progress.setVisible(True)
        self.export_button.setEnabled(False)
        self.status.setText("Exporting…")
        lines = list(self.lines)
        self._task.start(lambda _task: export(lines, settings, out=out, stems_dir=stems, srt=srt, vtt=vtt))

    def done(self, code: int) -> None:  # noqa: D102 - closing waits for a running export (seconds at most)
        self._task.wait()
        super().done(code)

    def _done(self, result: ExportResult | None, error: str) -> None:
        self.progress.setVisible(False)
        self.export_button.setEnabled(True)
        if error:
            self.status.setText(f"✗ {error}")
            return
        self.result = result
        names = ", ".join(p.name for p in result.files[:4]) + (" …" if len(result.files) > 4 else "")
        self.status.setText(f"✓ Wrote {len(result.files)} file{'s' * (len(result.files) != 1)}: {names}")
