"""The export dialog's choices of what to write: format and bitrate, the mix's file, the stems (FLAC when the mix's
format would make them huge, with a note that says why), the clips, the chapters, the subtitles, normalisation and
title. They are rows of the dialog's own form (one column of labels); `settings()` and `outputs()` turn them into
what `audio.export.export` takes, and `problem()` says what keeps them from being written. The folder, format and
bitrate of the last export are remembered. The dialog that runs the export is `export_dialog.py`."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, QSettings
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QHBoxLayout, QLabel, QLineEdit,
                               QSizePolicy, QWidget)

from s2studio.audio.disk_space import human_size
from s2studio.audio.export import (BITRATES_KBPS, DEFAULT_KBPS, FORMATS, ExportSettings, Metadata, format_for,
                                   stems_bytes, stems_format_for)
from s2studio.errors import UserError
from s2studio.state.project import Project
from s2studio.ui.dialogs.export_fields import FolderField, browse_file, file_name_ok
from s2studio.ui.dialogs.export_lines import plural

FORMAT_LABELS = {"wav": "WAV (16-bit)", "flac": "FLAC (24-bit, lossless)", "ogg": "OGG Vorbis", "opus": "OGG Opus",
                 "mp3": "MP3"}


class ExportOptions(QObject):
    """The option rows, added to `form` of the dialog `parent`; `lines` are the rendered lines to export (the
    dialog counts them: `set_lines`)."""

    def __init__(self, form: QFormLayout, project: Project, model_name: str, settings: QSettings | None,
                 name: str, parent: QWidget) -> None:
        super().__init__(parent)
        self._project, self._settings, self.model_name = project, settings, model_name
        self._stems_flac_chosen = False
        self.lines: list = []
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
        form.addRow("", browse_file(parent, self.out))

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

        self.format.currentIndexChanged.connect(self._format_changed)
        self.out.textChanged.connect(self._follow_out)
        self.stems.toggled.connect(self._update_stems_format)
        self._fill_bitrates(remembered["bitrate"])
        self._follow_out()

    def set_lines(self, lines: list, sound: Sound) -> None:
        """The rendered lines to export and the audio they hold (`sound_of`): the chapters are offered when they
        have headings, and the stems' format follows their length."""
        self.lines, self._sound = lines, sound
        has_chapters = any(ln.chapter for ln in lines)
        for box in (self.markers, self.chapter_files):
            box.setEnabled(has_chapters)
            box.setToolTip("" if has_chapters else "The script has no # headings among these lines")
        self._update_stems_format()

    def _remembered(self) -> dict:
        s = self._settings
        folder = Path(str(s.value("export/folder", ""))) if s is not None and s.value("export/folder") else Path.home()
        return {"folder": folder if folder.is_dir() else Path.home(),
                "format": str(s.value("export/format", "wav")) if s is not None else "wav",
                "bitrate": int(s.value("export/bitrate", 0) or 0) if s is not None else 0}

    def remember(self, out: Path) -> None:
        """An export to `out` is done: its folder, format and bitrate are the next export's."""
        if self._settings is not None:
            self._settings.setValue("export/folder", str(out.parent))
            self._settings.setValue("export/format", self.format.currentData())
            if self.bitrate.isEnabled():
                self._settings.setValue("export/bitrate", self.bitrate.currentData())

    def _stems_flac_clicked(self) -> None:
        self._stems_flac_chosen = True
        self._update_stems_format()

    def _update_stems_format(self) -> None:
        """FLAC stems by default when the stems in the mix's format would be huge, and the note says why."""
        fmt, kbps = self.format.currentData(), self.bitrate.currentData() if self.bitrate.isEnabled() else None
        self.stems_flac.setVisible(fmt != "flac")
        big = stems_format_for(self._sound, fmt, self._project.gap_s, kbps) == "flac"
        if not self._stems_flac_chosen:
            self.stems_flac.setChecked(big)
        self.stems_note.setVisible(big and self.stems.isChecked())
        if big:
            speakers = len(self._sound.by_speaker)
            as_is = stems_bytes(self._sound, fmt, self._project.gap_s, kbps)
            flac = stems_bytes(self._sound, "flac", self._project.gap_s)
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

    def problem(self) -> str:
        """What keeps the export from starting, in one line ("" when nothing does)."""
        if not file_name_ok(self.out.text()):
            return "Give the mix a file name (for example …/scene.wav): it names the subtitles and folders too."
        if any(f.box.isChecked() and f.box.isEnabled() and not f.text().strip() for f in self._folders):
            return "Give each ticked folder a name."
        outputs = self.outputs()
        if not any(outputs.values()):
            return "Nothing to write: tick the mix, the stems, the clips, the chapters or a subtitle format."
        return ""
