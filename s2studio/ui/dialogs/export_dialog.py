"""Export: every rendered line or the selected ones, the mix, one track per speaker, one clip per line, one file
per chapter, chapter markers and a CUE sheet, SRT/VTT, format and bitrate, gap, normalisation, title; with
progress and Stop, a question before files are replaced, and Open Folder when done.

The picked take of each line goes to `audio.export.export` (the same layout code as the player's timeline,
and the same code as `s2studio synth`), tagged with the names of the voices that speak it and the chapter
(heading) it opens. Everything slow runs off the GUI thread (`control.background`): looking for files that
would be replaced (thousands of clips), and the export itself, which streams a book of many hours to disk
with a progress bar that appears when it takes longer than a second. The folder, format and bitrate of the
last export are remembered.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from PySide6.QtCore import QSettings, QTimer, Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFormLayout,
                               QHBoxLayout, QLabel, QLineEdit, QMessageBox, QProgressBar, QPushButton, QSizePolicy,
                               QWidget)

from s2studio.audio.disk_space import human_size
from s2studio.audio.export import (BITRATES_KBPS, DEFAULT_KBPS, FORMATS, ExportResult, ExportSettings, Metadata,
                                   export, format_for, output_paths, stems_bytes, stems_format_for)
from s2studio.engine import api
from s2studio.errors import UserError
from s2studio.state.project import Project
from s2studio.state.script import Script
from s2studio.ui.control.background import Background
from s2studio.ui.desktop import open_folder
from s2studio.ui.dialogs.export_fields import FolderField, browse_file, file_name_ok
from s2studio.ui.dialogs.export_lines import duration, plural, rendered_lines

FORMAT_LABELS = {"wav": "WAV (16-bit)", "flac": "FLAC (24-bit, lossless)", "ogg": "OGG Vorbis", "opus": "OGG Opus",
                 "mp3": "MP3"}
MAX_LISTED = 6
"""Files named in the "replace?" question; the rest are counted."""
SHOW_PROGRESS_MS = 1000
"""A progress bar for work that lasts longer than this; a quick export only says it is done."""


class ExportDialog(QDialog):
    gap_changed = Signal(float)
    """The user changed the gap between lines: it is the project's gap, so the player's timeline follows."""

    def __init__(self, project: Project, script: Script, info: api.ModelInfo | None,
                 voice_names: Mapping[str, str] | None = None, selected: Sequence[str] = (),
                 settings: QSettings | None = None, parent: QWidget | None = None, name: str = "") -> None:
        super().__init__(parent)
        self.setWindowTitle("Export audio")
        self.setObjectName("exportDialog")
        self.setMinimumWidth(600)
        self._project, self._script, self._names = project, script, dict(voice_names or {})
        self._selected = list(selected)
        self._settings = settings
        self.model_name = info.name if info else "Fish Audio S2 Pro"
        self.result: ExportResult | None = None
        self._task = Background("export", self)
        self._task.done.connect(self._done)
        self._task.progress.connect(self._progress)
        self._phase = ""
        self._stems_flac_chosen = False
        self.lines: list = []
        self._counting = Background("export-lines", self)
        self._counting.done.connect(self._counted)
        self._count_generation = self._counted_generation = 0
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
        base = name or project.title or "Untitled"
        self.out = QLineEdit(str(remembered["folder"] / f"{base}{FORMATS[self.format.currentData()][2]}"))
        self.out.setAccessibleName("Output file")
        self.mix = QCheckBox("One file, the lines in order (the subtitles are named after it)")
        self.mix.setChecked(True)
        self.mix.setAccessibleName("Write the mix")
        self.mix.setToolTip("Every line in one file; the subtitles are named after it")
        form.addRow("Mix", self.mix)  # each output: what it is, then where it goes (as the stems and clips)
        form.addRow("", browse_file(self, self.out))

        self.stems = QCheckBox("One track per speaker, full length (lines up in a DAW)")
        self.stems.setAccessibleName("Write speaker stems")
        self.stems_flac = QCheckBox("as FLAC")
        self.stems_flac.setAccessibleName("Write the stems as FLAC")
        self.stems_flac.setToolTip("Stems are mostly silence; FLAC stores it in almost nothing")
        self.stems_flac.clicked.connect(self._stems_flac_clicked)
        stems_row = QHBoxLayout()
        stems_row.addWidget(self.stems, 1)
        stems_row.addWidget(self.stems_flac)
        form.addRow("Stems", stems_row)
        self.stems_dir = FolderField("Speaker stems folder", "stems", self.stems)
        form.addRow("", self.stems_dir)
        self.stems_note = QLabel("")
        self.stems_note.setWordWrap(True)
        self.stems_note.setEnabled(False)
        self.stems_note.setVisible(False)
        form.addRow("", self.stems_note)
        self.clips = QCheckBox("One file per line, each take alone (001_Alice_first-words…)")
        self.clips.setAccessibleName("Write line clips")
        form.addRow("Clips", self.clips)
        self.clips_dir = FolderField("Line clips folder", "lines", self.clips)
        form.addRow("", self.clips_dir)
        self.markers = QCheckBox("Markers in the mix and a CUE sheet")
        self.markers.setChecked(True)
        self.markers.setAccessibleName("Write chapter markers")
        self.markers.setToolTip("The script's # headings as chapter markers: cue points in WAV, chapters in MP3, "
                                "FLAC and Ogg, and a .cue sheet beside the mix")
        self.chapter_files = QCheckBox("One file per chapter")
        self.chapter_files.setAccessibleName("Write one file per chapter")
        chapter_row = QHBoxLayout()
        chapter_row.addWidget(self.markers, 1)
        chapter_row.addWidget(self.chapter_files)
        form.addRow("Chapters", chapter_row)
        self.chapters_dir = FolderField("Chapter files folder", "chapters", self.chapter_files)
        form.addRow("", self.chapters_dir)
        self._folders = (self.stems_dir, self.clips_dir, self.chapters_dir)

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
        self.progress.setRange(0, 1000)
        self.progress.setAccessibleName("Export progress")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setAccessibleName("Stop the export")
        self.stop_button.clicked.connect(self._task.cancel.set)
        progress_row = QWidget()
        row = QHBoxLayout(progress_row)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.progress, 1)
        row.addWidget(self.stop_button)
        # the row keeps its height while empty: the bar coming and going never moves the rows around it
        progress_row.setFixedHeight(max(self.progress.sizeHint().height(), self.stop_button.sizeHint().height()))
        self.set_progress_visible(False)
        self._show_progress = QTimer(self)
        self._show_progress.setSingleShot(True)
        self._show_progress.setInterval(SHOW_PROGRESS_MS)
        self._show_progress.timeout.connect(lambda: self.set_progress_visible(self._task.running))
        form.addRow(progress_row)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setAccessibleName("Export result")
        self.status.setMinimumHeight(2 * self.status.fontMetrics().lineSpacing())  # room for a message from the start
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
        self.stems.toggled.connect(self._update_stems_format)
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

    @property
    def ready(self) -> bool:
        """The lines to export are counted (a book's 10,000 are counted off the GUI thread)."""
        return self._counted_generation == self._count_generation

    def _lines_changed(self) -> None:
        only = self._selected if self.which.currentData() == "selected" else None
        self._count_generation += 1
        generation, project, script, names = self._count_generation, self._project, self._script, self._names
        self.export_button.setEnabled(False)
        self.summary.setText("Counting the rendered lines…")
        self._counting.start(lambda _task: (generation, *rendered_lines(project, script, names, only)))

    def _counted(self, result: object, error: str) -> None:
        if error:
            self.summary.setText(f"✗ {error}")
            return
        generation, lines, missing = result  # type: ignore[misc]
        if generation != self._count_generation:  # the choice changed meanwhile: a later count is coming
            return
        self.lines, self._counted_generation = lines, generation
        samples = sum(len(ln.audio) for ln in lines)
        text = f"{plural(len(lines), 'rendered line')} to export"
        if lines:
            text += f" ({duration(samples)})"
        if missing:
            text += f"; {missing:,} not rendered yet will be left out"
        self.summary.setText(text)
        has_chapters = any(ln.chapter for ln in lines)
        for box in (self.markers, self.chapter_files):
            box.setEnabled(has_chapters)
            box.setToolTip("" if has_chapters else "The script has no # headings among these lines")
        self.export_button.setEnabled(bool(lines) and not self._task.running)
        self._update_stems_format()

    def _stems_flac_clicked(self) -> None:
        self._stems_flac_chosen = True
        self._update_stems_format()

    def _update_stems_format(self) -> None:
        """FLAC stems by default when the stems in the mix's format would be huge, and the note says why."""
        fmt, kbps = self.format.currentData(), self.bitrate.currentData() if self.bitrate.isEnabled() else None
        self.stems_flac.setVisible(fmt != "flac")
        big = stems_format_for(self.lines, fmt, self._project.gap_s, kbps) == "flac"
        if not self._stems_flac_chosen:
            self.stems_flac.setChecked(big)
        self.stems_note.setVisible(big and self.stems.isChecked())
        if big:
            speakers = len({ln.speaker for ln in self.lines})
            as_is = stems_bytes(self.lines, fmt, self._project.gap_s, kbps)
            flac = stems_bytes(self.lines, "flac", self._project.gap_s)
            self.stems_note.setText(f"{FORMAT_LABELS[fmt].split(' (')[0]} stems would take about "
                                    f"{human_size(as_is)} ({plural(speakers, 'full-length track')}); as FLAC about "
                                    f"{human_size(flac)}, since FLAC stores their silence in almost nothing.")

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

    def _gap_changed(self, value: float) -> None:
        self._project.gap_s = round(value, 3)
        self.gap_changed.emit(self._project.gap_s)

    def _format_changed(self) -> None:
        text = self.out.text()
        if file_name_ok(text):  # "" or "/tmp/": nothing to give a suffix to yet
            path = Path(text)
            self.out.setText(str(path.with_name(path.stem + FORMATS[self.format.currentData()][2])))
        self._fill_bitrates()
        self._update_stems_format()

    def _follow_out(self) -> None:
        """The file name changed: a known suffix chooses the format (scene.flac is FLAC), and the stems, clips and
        chapters folders follow a valid name ("/tmp/x/scene.wav" -> "/tmp/x/scene stems") until the person chose
        their own. Nothing here raises, whatever is typed: a name being typed is often not a name yet."""
        text = self.out.text()
        if not file_name_ok(text):
            return
        out = Path(text).expanduser()
        try:
            named = format_for(out)
        except UserError:
            named = None
        if named is not None and named != self.format.currentData():
            self.format.blockSignals(True)
            self.format.setCurrentIndex(self.format.findData(named))
            self.format.blockSignals(False)
            self._fill_bitrates()
            self._update_stems_format()
        for folder in self._folders:
            folder.follow(out)

    def settings(self) -> ExportSettings:
        voices = tuple(dict.fromkeys(ln.voice for ln in self.lines if ln.voice))
        meta = Metadata(title=self.title.text().strip(), model=self.model_name, voices=voices)
        fmt = self.format.currentData()
        return ExportSettings(format=fmt, gap_s=self._project.gap_s, normalize=self.normalize.currentData(),
                              metadata=meta,
                              bitrate_kbps=self.bitrate.currentData() if self.bitrate.isEnabled() else None,
                              subtitle_tags=self.keep_tags.isChecked(),
                              stems_format="flac" if self.stems_flac.isChecked() and fmt != "flac" else None,
                              chapter_markers=self.markers.isChecked() and self.markers.isEnabled())

    def outputs(self) -> dict[str, Path | None]:
        out = Path(self.out.text()).expanduser()
        ext = FORMATS[self.format.currentData()][2]
        if out.suffix.lower() != ext:  # "scene" or "scene.txt": the format's suffix is added
            out = out.with_name(out.name + ext)
        markers = self.markers.isChecked() and self.markers.isEnabled() and self.mix.isChecked()
        return {"out": out if self.mix.isChecked() else None,
                "stems_dir": self.stems_dir.path() if self.stems.isChecked() else None,
                "clips_dir": self.clips_dir.path() if self.clips.isChecked() else None,
                "chapters_dir": (self.chapters_dir.path() if self.chapter_files.isChecked()
                                 and self.chapter_files.isEnabled() else None),
                "srt": out.with_suffix(".srt") if self.srt.isChecked() else None,
                "vtt": out.with_suffix(".vtt") if self.vtt.isChecked() else None,
                "cue": out.with_suffix(".cue") if markers else None}

    # -- exporting ---------------------------------------------------------------------------------

    def _problem(self) -> str:
        """What keeps the export from starting, in one line ("" when nothing does)."""
        if not file_name_ok(self.out.text()):
            return "Give the mix a file name (for example …/scene.wav): it names the subtitles and folders too."
        if any(f.box.isChecked() and f.box.isEnabled() and not f.text().strip() for f in self._folders):
            return "Give each ticked folder a name."
        outputs = self.outputs()
        if not any(outputs.values()):
            return "Nothing to write: tick the mix, the stems, the clips, the chapters or a subtitle format."
        return ""

    def start(self) -> None:
        if self._task.running or not self.ready:
            return
        problem = self._problem()
        if problem:
            self.status.setText(problem)
            return
        settings, outputs, lines = self.settings(), self.outputs(), list(self.lines)
        opening = settings.metadata.title or "Opening"
        self._pending = (settings, outputs, lines)
        self._busy("Checking the files…", "prepare")
        self._task.start(lambda _task: [p for p in output_paths(lines, settings.format, **outputs,
                                                               stems_format=settings.stems_format, opening=opening)
                                        if os.path.lexists(p)])

    def _busy(self, text: str, phase: str) -> None:
        self._phase = phase
        self.progress.setValue(0)
        self.export_button.setEnabled(False)
        self.open_button.setEnabled(False)
        self.status.setText(text)
        self._show_progress.start()

    def _progress(self, fraction: float, text: str) -> None:
        self.progress.setValue(round(1000 * fraction))
        self.status.setText(text)

    def _confirm_replacing(self, existing: list[Path]) -> bool:
        if not existing:
            return True
        shown = "\n".join(f"  {p.name}" for p in existing[:MAX_LISTED])
        more = f"\n  … and {len(existing) - MAX_LISTED} more" if len(existing) > MAX_LISTED else ""
        answer = QMessageBox.question(
            self, "Replace files?",
            f"{plural(len(existing), 'file')} already exist{'s' * (len(existing) == 1)} and will be replaced:\n"
            f"{shown}{more}", QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    def done(self, code: int) -> None:  # noqa: D102 - closing stops a running export (it discards its files)
        if self._task.running:
            self._task.cancel.set()
            if self._task.thread is not None:
                self._task.thread.join(timeout=2.0)  # the export stops at its next block
        super().done(code)

    def set_progress_visible(self, visible: bool) -> None:
        self.progress.setVisible(visible)
        self.stop_button.setVisible(visible)

    def _idle(self) -> None:
        self._show_progress.stop()
        self.set_progress_visible(False)
        self.export_button.setEnabled(bool(self.lines) and self.ready)

    def _done(self, result: object, error: str) -> None:
        phase, self._phase = self._phase, ""
        if phase == "prepare" and not error:
            settings, outputs, lines = self._pending
            if self._task.cancel.is_set():  # Stop while the files were being looked for
                self._idle()
                self.status.setText("Stopped: nothing was written.")
                return
            if not self._confirm_replacing(result):  # type: ignore[arg-type]
                self._idle()
                self.status.setText("Nothing written: choose another file name or folder.")
                return
            self._busy("Exporting…", "export")
            self._task.start(lambda task: export(lines, settings, **outputs, cancel=task.cancel,
                                                 progress=lambda f, what: task.progress.emit(f, what)))
            return
        self._idle()
        if error:
            self.status.setText("Stopped: nothing was written." if error == "Cancelled." else f"✗ {error}")
            return
        self.result = result  # type: ignore[assignment]
        self._remember(Path(self.out.text()).expanduser())
        self.open_button.setEnabled(True)
        files = self.result.files
        names = ", ".join(p.name for p in files[:4]) + (" …" if len(files) > 4 else "")
        self.status.setText(f"✓ Wrote {plural(len(files), 'file')}: {names}")

    def open_output_folder(self) -> bool:
        folder = Path(self.out.text()).expanduser().parent
        return open_folder(folder)
