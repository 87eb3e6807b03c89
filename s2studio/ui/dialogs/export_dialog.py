"""Export: every rendered line or the selected ones, the mix, one track per speaker, one clip per line, SRT/VTT,
format and bitrate, gap, normalisation, title; with progress, a question before files are replaced, and Open
Folder when done.

The picked take of each line goes to `audio.export.export` (the same layout code as the player's timeline),
tagged with the names of the voices that speak it. Writing runs off the GUI thread (`control.background`) so
a long MP3 encode never freezes the window; the files get the modes the user's umask gives (the one writer,
`state.atomic`). The folder, format and bitrate of the last export are remembered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from PySide6.QtCore import QSettings, Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFileDialog,
                               QFormLayout, QHBoxLayout, QLabel, QLineEdit, QMessageBox, QProgressBar, QPushButton,
                               QSizePolicy, QWidget)

from s2studio.audio.export import (BITRATES_KBPS, DEFAULT_KBPS, FORMATS, ExportResult, ExportSettings, Metadata,
                                   RenderedLine, export, format_for, output_paths)
from s2studio.engine import api
from s2studio.errors import UserError
from s2studio.state.project import Project
from s2studio.state.script import Script
from s2studio.ui.control.background import Background
from s2studio.ui.desktop import open_folder

FORMAT_LABELS = {"wav": "WAV (16-bit)", "flac": "FLAC (24-bit, lossless)", "ogg": "OGG Vorbis", "opus": "OGG Opus",
                 "mp3": "MP3"}
MAX_LISTED = 6
"""Files named in the "replace?" question; the rest are counted."""


def rendered_lines(project: Project, script: Script, voice_names: Mapping[str, str] | None = None,
                   only: Sequence[str] | None = None) -> tuple[list[RenderedLine], int]:
    """The picked takes in script order (of the lines in `only`, when given), each with its voice's name and
    its number in the script, and how many of those lines have no take."""
    names = voice_names or {}
    wanted = set(only) if only is not None else None
    out, missing = [], 0
    for number, line in enumerate(script.lines, start=1):
        if wanted is not None and line.line_id not in wanted:
            continue
        take = project.current(line.line_id)
        if take is None:
            missing += 1
        else:
            voice = names.get(project.cast.get(line.speaker, ""), "")
            out.append(RenderedLine(line.line_id, line.speaker, line.text, take.audio, voice=voice, number=number))
    return out, missing


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


class ExportDialog(QDialog):
    gap_changed = Signal(float)
    """The user changed the gap between lines: it is the project's gap, so the player's timeline follows."""

    def __init__(self, project: Project, script: Script, info: api.ModelInfo | None,
                 voice_names: Mapping[str, str] | None = None, selected: Sequence[str] = (),
                 settings: QSettings | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Export audio")
        self.setObjectName("exportDialog")
        self.setMinimumWidth(560)
        self._project, self._script, self._names = project, script, dict(voice_names or {})
        self._selected = list(selected)
        self._settings = settings
        self.model_name = info.name if info else "Fish Audio S2 Pro"
        self.result: ExportResult | None = None
        self._task = Background("export", self)
        self._task.done.connect(self._done)
        form = QFormLayout(self)
        form.setSpacing(8)
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        self.which = QComboBox()
        self.which.setAccessibleName("Lines to export")
        self.which.addItem("All lines", "all")
        self.which.addItem(f"Selected {'line' if len(self._selected) == 1 else 'lines'} ({len(self._selected)})",
                           "selected")
        self.which.model().item(1).setEnabled(bool(self._selected))
        form.addRow("Lines", self.which)
        form.addRow("", self.summary)  # under the choice it counts

        remembered = self._remembered()
        self.format = QComboBox()
        self.format.setAccessibleName("Format")
        for key in FORMATS:
            self.format.addItem(FORMAT_LABELS.get(key, key), key)
        self.format.setCurrentIndex(max(self.format.findData(remembered["format"]), 0))
        self.bitrate = QComboBox()
        self.bitrate.setAccessibleName("Bitrate")
        self.bitrate.setToolTip("MP3: constant bitrate; Opus: average bitrate. Higher is larger and closer to the "
                                "original.")
        fmt_row = QHBoxLayout()
        fmt_row.addWidget(self.format, 1)
        fmt_row.addWidget(self.bitrate)
        form.addRow("Format", fmt_row)
        self.out = QLineEdit(str(remembered["folder"] / f"{project.title or 'script'}"
                                 f"{FORMATS[self.format.currentData()][2]}"))
        self.out.setAccessibleName("Output file")
        self.mix = QCheckBox("One file, the lines in order (the subtitles are named after it)")
        self.mix.setChecked(True)
        self.mix.setAccessibleName("Write the mix")
        self.mix.setToolTip("Every line in one file; the subtitles are named after it")
        form.addRow("Mix", self.mix)  # each output: what it is, then where it goes (as the stems and clips)
        form.addRow("", self._with_browse(self.out, self._browse_out))

        self.stems = QCheckBox("One track per speaker, full length (lines up in a DAW)")
        self.stems.setAccessibleName("Write speaker stems")
        self.stems_dir = QLineEdit()
        self.stems_dir.setAccessibleName("Speaker stems folder")
        form.addRow("Stems", self.stems)
        form.addRow("", self._with_browse(self.stems_dir, lambda: self._browse_dir(self.stems_dir, self.stems)))
        self.clips = QCheckBox("One file per line, each take alone (001_Alice_first-words…)")
        self.clips.setAccessibleName("Write line clips")
        self.clips_dir = QLineEdit()
        self.clips_dir.setAccessibleName("Line clips folder")
        form.addRow("Clips", self.clips)
        form.addRow("", self._with_browse(self.clips_dir, lambda: self._browse_dir(self.clips_dir, self.clips)))
        self._folders_follow = True
        """The stems and clips folders sit beside the mix until the person types or picks their own."""
        for edit in (self.stems_dir, self.clips_dir):
            edit.textEdited.connect(self._folders_chosen)

        self.srt = QCheckBox("SRT")
        self.srt.setChecked(True)
        self.srt.setAccessibleName("Write SRT subtitles")
        self.vtt = QCheckBox("WebVTT")
        self.vtt.setAccessibleName("Write WebVTT subtitles")
        self.keep_tags = QCheckBox("Keep [tags] in the text")
        self.keep_tags.setAccessibleName("Keep delivery tags in the subtitles")
        self.keep_tags.setToolTip("Subtitles show what is heard; tick to keep tags such as [whispering] in them")
        subs = QHBoxLayout()
        for w in (self.srt, self.vtt, self.keep_tags):
            subs.addWidget(w)
        subs.addStretch(1)
        form.addRow("Subtitles", subs)
        self.gap = QDoubleSpinBox()
        self.gap.setRange(0.0, 5.0)
        self.gap.setSingleStep(0.1)
        self.gap.setValue(project.gap_s)
        self.gap.setSuffix(" s")
        self.gap.setAccessibleName("Gap between lines")
        self.gap.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)  # a number, not a text field
        self.gap.setToolTip("Silence between lines, in the export and in the player's timeline.")
        self.gap.valueChanged.connect(self._gap_changed)
        form.addRow("Gap between lines", self.gap)
        self.normalize = QComboBox()
        self.normalize.setAccessibleName("Normalisation")
        for label, value in (("None", "none"), ("Peak to −1 dBFS", "peak"), ("Loudness to −16 LUFS", "loudness")):
            self.normalize.addItem(label, value)
        form.addRow("Normalise", self.normalize)
        self.title = QLineEdit(project.title)
        self.title.setAccessibleName("Title metadata")
        self.title.setPlaceholderText("Title written into the files")
        form.addRow("Title", self.title)
        note = QLabel("Files are tagged “AI-generated speech” and with the voices' names where the format allows.")
        note.setWordWrap(True)
        note.setEnabled(False)
        form.addRow(note)
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setVisible(False)
        self.progress.setAccessibleName("Export progress")
        form.addRow(self.progress)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setAccessibleName("Export result")
        form.addRow(self.status)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Close)
        self.export_button = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.export_button.setText("Export")
        self.open_button = self.buttons.addButton("Open Folder", QDialogButtonBox.ButtonRole.ActionRole)
        self.open_button.setAccessibleName("Open the folder of the exported files")
        self.open_button.setEnabled(False)
        self.open_button.clicked.connect(self.open_output_folder)
        self.buttons.accepted.connect(self.start)
        self.buttons.rejected.connect(self.reject)
        form.addRow(self.buttons)

        self.format.currentIndexChanged.connect(self._format_changed)
        self.out.textChanged.connect(self._follow_out)
        self.which.currentIndexChanged.connect(self._lines_changed)
        self._fill_bitrates(remembered["bitrate"])
        self._follow_out()
        self._lines_changed()

    # -- what is exported --------------------------------------------------------------------------

    def _remembered(self) -> dict:
        s = self._settings
        folder = Path(str(s.value("export/folder", ""))) if s is not None and s.value("export/folder") else Path.home()
        return {"folder": folder if folder.is_dir() else Path.home(),
                "format": str(s.value("export/format", "wav")) if s is not None else "wav",
                "bitrate": int(s.value("export/bitrate", 0) or 0) if s is not None else 0}

    def _remember(self, out: Path) -> None:
        if self._settings is not None:
            self._settings.setValue("export/folder", str(out.parent))
            self._settings.setValue("export/format", self.format.currentData())
            if self.bitrate.isEnabled():
                self._settings.setValue("export/bitrate", self.bitrate.currentData())

    def _lines_changed(self) -> None:
        only = self._selected if self.which.currentData() == "selected" else None
        self.lines, missing = rendered_lines(self._project, self._script, self._names, only)
        text = f"{_plural(len(self.lines), 'rendered line')} to export"
        if missing:
            text += f"; {missing} not rendered yet will be left out"
        self.summary.setText(text)
        self.export_button.setEnabled(bool(self.lines) and not self._task.running)

    def _fill_bitrates(self, wanted: int = 0) -> None:
        fmt = self.format.currentData()
        current = wanted or self.bitrate.currentData() or 0
        self.bitrate.clear()
        offered = BITRATES_KBPS.get(fmt, ())
        for kbps in offered:
            self.bitrate.addItem(f"{kbps} kbps", kbps)
        if offered:
            choice = current if current in offered else DEFAULT_KBPS[fmt]
            self.bitrate.setCurrentIndex(self.bitrate.findData(choice))
        self.bitrate.setEnabled(bool(offered))
        self.bitrate.setVisible(bool(offered))

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
        self._fill_bitrates()

    def _follow_out(self) -> None:
        """The file name changed: a known suffix chooses the format (scene.flac is FLAC), and the stems and
        clips folders follow the name until the person chose their own."""
        out = Path(self.out.text()).expanduser()
        try:
            named = format_for(out)
        except UserError:
            named = None
        if named is not None and named != self.format.currentData():
            self.format.blockSignals(True)
            self.format.setCurrentIndex(self.format.findData(named))
            self.format.blockSignals(False)
            self._fill_bitrates()
        if not self._folders_follow:
            return
        self.stems_dir.setText(str(out.with_name(f"{out.stem} stems")))
        self.clips_dir.setText(str(out.with_name(f"{out.stem} lines")))

    def _folders_chosen(self) -> None:
        self._folders_follow = False

    def _browse_out(self) -> None:
        name, _ = QFileDialog.getSaveFileName(self, "Export to", self.out.text())
        if name:
            self.out.setText(name)

    def _browse_dir(self, edit: QLineEdit, box: QCheckBox) -> None:
        name = QFileDialog.getExistingDirectory(self, box.accessibleName(), edit.text())
        if name:
            self._folders_follow = False
            edit.setText(name)
            box.setChecked(True)

    def settings(self) -> ExportSettings:
        voices = tuple(dict.fromkeys(ln.voice for ln in self.lines if ln.voice))
        meta = Metadata(title=self.title.text().strip(), model=self.model_name, voices=voices)
        return ExportSettings(format=self.format.currentData(), gap_s=self._project.gap_s,
                              normalize=self.normalize.currentData(), metadata=meta,
                              bitrate_kbps=self.bitrate.currentData() if self.bitrate.isEnabled() else None,
                              subtitle_tags=self.keep_tags.isChecked())

    def outputs(self) -> dict[str, Path | None]:
        out = Path(self.out.text()).expanduser()
        ext = FORMATS[self.format.currentData()][2]
        if out.suffix.lower() != ext:  # "scene" or "scene.txt": the format's suffix is added
            out = out.with_name(out.name + ext)
        return {"out": out if self.mix.isChecked() else None,
                "stems_dir": Path(self.stems_dir.text()).expanduser() if self.stems.isChecked() else None,
                "clips_dir": Path(self.clips_dir.text()).expanduser() if self.clips.isChecked() else None,
                "srt": out.with_suffix(".srt") if self.srt.isChecked() else None,
                "vtt": out.with_suffix(".vtt") if self.vtt.isChecked() else None}

    # -- exporting ---------------------------------------------------------------------------------

    def _confirm_replacing(self, paths: list[Path]) -> bool:
        existing = [p for p in paths if p.exists()]
        if not existing:
            return True
        shown = "\n".join(f"  {p.name}" for p in existing[:MAX_LISTED])
        more = f"\n  … and {len(existing) - MAX_LISTED} more" if len(existing) > MAX_LISTED else ""
        answer = QMessageBox.question(
            self, "Replace files?",
            f"{_plural(len(existing), 'file')} already exist{'s' * (len(existing) == 1)} and will be replaced:\n"
            f"{shown}{more}", QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    def start(self) -> None:
        settings = self.settings()
        outputs = self.outputs()
        lines = list(self.lines)
        if not any(outputs.values()):
            self.status.setText("Nothing to write: tick the mix, the stems, the clips or a subtitle format.")
            return
        if not self._confirm_replacing(output_paths(lines, settings.format, **outputs)):
            self.status.setText("Nothing written: choose another file name or folder.")
            return
        self.progress.setVisible(True)
        self.export_button.setEnabled(False)
        self.open_button.setEnabled(False)
        self.status.setText("Exporting…")
        self._task.start(lambda _task: export(lines, settings, **outputs))

    def done(self, code: int) -> None:  # noqa: D102 - closing waits for a running export (seconds at most)
        self._task.wait()
        super().done(code)

    def _done(self, result: ExportResult | None, error: str) -> None:
        self.progress.setVisible(False)
        self.export_button.setEnabled(bool(self.lines))
        if error:
            self.status.setText(f"✗ {error}")
            return
        self.result = result
        self._remember(Path(self.out.text()).expanduser())
        self.open_button.setEnabled(True)
        names = ", ".join(p.name for p in result.files[:4]) + (" …" if len(result.files) > 4 else "")
        self.status.setText(f"✓ Wrote {_plural(len(result.files), 'file')}: {names}")

    def open_output_folder(self) -> bool:
        folder = Path(self.out.text()).expanduser().parent
        return open_folder(folder)
