"""Export: every rendered line or the selected ones, the mix, one track per speaker, one clip per line, one file
per chapter, chapter markers and a CUE sheet, SRT/VTT, format and bitrate, gap, normalisation, title; with
progress and Stop, a question before files are replaced, and Open Folder when done.

The picked take of each line goes to `audio.export.export` (the same layout code as the player's timeline,
and the same code as `s2studio synth`), tagged with the names of the voices that speak it and the chapter
(heading) it opens. Everything slow runs off the GUI thread (`control.background`): looking for files that
would be replaced (thousands of clips), and the export itself, which streams a book of many hours to disk
with a progress bar that appears when it takes longer than a second. The option rows (what to write, where,
in which format) are `export_options.py`; this dialog counts the lines and runs the export.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from PySide6.QtCore import QSettings, QTimer, Signal
from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFormLayout, QHBoxLayout, QLabel, QMessageBox,
                               QProgressBar, QPushButton, QWidget)

from s2studio.audio.export import ExportResult, export, output_paths
from s2studio.engine import api
from s2studio.state.project import Project
from s2studio.state.script import Script
from s2studio.ui.control.background import Background
from s2studio.ui.desktop import open_folder
from s2studio.ui.dialogs.export_lines import counted, duration, plural
from s2studio.ui.dialogs.export_options import ExportOptions

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
        self.result: ExportResult | None = None
        self._task = Background("export", self)
        self._task.done.connect(self._done)
        self._task.progress.connect(self._progress)
        self._phase = ""
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

        self.options = ExportOptions(form, project, info.name if info else "Fish Audio S2 Pro", settings, name, self)
        self.options.gap.valueChanged.connect(self._gap_changed)
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

        self.which.currentIndexChanged.connect(self._lines_changed)
        self._lines_changed()

    # -- what is exported --------------------------------------------------------------------------

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
        self._counting.start(lambda _task: (generation, *counted(project, script, names, only)))

    def _counted(self, result: object, error: str) -> None:
        if error:
            self.summary.setText(f"✗ {error}")
            return
        generation, lines, missing, sound = result  # type: ignore[misc]
        if generation != self._count_generation:  # the choice changed meanwhile: a later count is coming
            return
        self.lines, self._counted_generation = lines, generation
        text = f"{plural(len(lines), 'rendered line')} to export"
        if lines:
            text += f" ({duration(sound.samples)})"
        if missing:
            text += f"; {missing:,} not rendered yet will be left out"
        self.summary.setText(text)
        self.options.set_lines(lines, sound)
        self.export_button.setEnabled(bool(lines) and not self._task.running)

    def _gap_changed(self, value: float) -> None:
        self._project.gap_s = round(value, 3)
        self.gap_changed.emit(self._project.gap_s)

    # -- exporting ---------------------------------------------------------------------------------

    def start(self) -> None:
        if self._task.running or not self.ready:
            return
        problem = self.options.problem()
        if problem:
            self.status.setText(problem)
            return
        settings, outputs, lines = self.options.settings(), self.options.outputs(), list(self.lines)
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
        self.options.remember(Path(self.options.out.text()).expanduser())
        self.open_button.setEnabled(True)
        files = self.result.files
        names = ", ".join(p.name for p in files[:4]) + (" …" if len(files) > 4 else "")
        self.status.setText(f"✓ Wrote {plural(len(files), 'file')}: {names}")

    def open_output_folder(self) -> bool:
        folder = Path(self.options.out.text()).expanduser().parent
        return open_folder(folder)
