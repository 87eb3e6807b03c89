"""The studio window (design.md §8): voices left, cast bar + script centre, tags/takes/settings right,
player bottom, status bar. It composes panels and wires signals; the panels do the work."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path

from PySide6.QtCore import QMimeData, Qt, QTimer
from PySide6.QtGui import QCloseEvent, QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (QLabel, QMainWindow, QMessageBox, QSplitter, QTabWidget, QToolBar, QVBoxLayout,
                               QWidget)

from s2studio.engine import api
from s2studio.errors import UserError
from s2studio.state.project import GenerationSettings, Project
from s2studio.state.script import NARRATOR, Line, Script, parse_script
from s2studio.state.voices import VoiceLibrary
from s2studio.ui.actions import SPECS, ShortcutsDialog, build_actions
from s2studio.ui.cast_bar import CastBar
from s2studio.ui.context import StudioContext
from s2studio.ui.editor import InlineWarning, ScriptEditor
from s2studio.ui.player import PlaybackBuffer, Player
from s2studio.ui.player_bar import PlayerBar
from s2studio.ui.projects import ProjectStore
from s2studio.ui.render_flow import RenderFlow
from s2studio.ui.session import RenderSession
from s2studio.ui.render_on import RenderOnBox
from s2studio.ui.settings_panel import SettingsPanel
from s2studio.ui.status import StatusPanel
from s2studio.ui.tag_palette import TagPalette
from s2studio.ui.takes_panel import TakesPanel
from s2studio.ui.voices_panel import VoicesPanel
from s2studio.ui.window_playback import PlaybackMixin
from s2studio.ui.window_projects import ProjectsMixin

logger = logging.getLogger(__name__)

AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".mp3", ".aiff", ".aif"}


class MainWindow(PlaybackMixin, ProjectsMixin, QMainWindow):
    def __init__(self, ctx: StudioContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.setObjectName("mainWindow")
        self.setWindowTitle("S2 Studio")
        self.setAcceptDrops(True)
        self.resize(1280, 800)
        self.model_info: api.ModelInfo | None = None
        self.ask_on_close = True
        self.autoplay = True
        """Play while rendering (the live player)."""
        self._last_rtf = 0.0
        self._load_job: str | None = None
        """Ask to save unsaved changes on close (tests and the screenshot tool turn it off)."""
        self.project = Project(settings=self._remembered_settings())
        self.script: Script = parse_script("")
        self.library = VoiceLibrary(ctx.voices_dir)
        self.buffer = PlaybackBuffer()
        self.player = Player(self.buffer, self)
        self.session = RenderSession(ctx.host, self.project, self.buffer, builder=lambda *_: None, parent=self)
        self.flow = RenderFlow(ctx.host, self.library, self.session, self)
        self.store = ProjectStore(ctx.autosave_dir, ctx.settings, self)
        self.actions_by_name = build_actions(self, self._slots())
        self._build_ui()
        self._build_menus()
        self._wire()
        self._parse_timer = QTimer(self, singleShot=True, interval=150)
        self._parse_timer.timeout.connect(self.reparse)
        self.reparse()
        self._update_enabled()

    # -- construction ----------------------------------------------------------------------------

    def _slots(self) -> dict:
        return {
            "new_project": self.new_project, "open_project": self.open_project, "save_project": self.save_project,
            "save_project_as": self.save_project_as, "export": self.open_export, "choose_model": self.open_model_page,
            "quit": self.close, "undo": lambda: self.editor.undo(), "redo": lambda: self.editor.redo(),
            "insert_tag": lambda: (self.inspector.setCurrentWidget(self.tag_palette), self.tag_palette.filter.setFocus()),
            "find_voice": lambda: self.voices.search.setFocus(),
            "render_all": lambda: self.render(list(self.script.lines)),
            "render_stale": lambda: self.render(self.session.stale_lines()),
            "render_line": self.render_cursor_line, "stop_render": self.stop,
            "play_pause": self.play_pause, "play_from_cursor": self.play_from_cursor,
            "next_take": lambda: self.takes.step(1), "previous_take": lambda: self.takes.step(-1),
            "ab_take": lambda: self.takes.toggle_ab(),
            "new_voice": lambda: self.voices.browse(), "record_voice": self.record_voice,
            "import_voice": lambda: self.voices.import_file(), "export_voice": lambda: self.voices.export_file(),
            "play_voice_clip": lambda: self.voices.play_clip(),
            "settings": lambda: self.inspector.setCurrentWidget(self.settings_panel),
            "shortcuts": self.show_shortcuts,
        }

    def _build_ui(self) -> None:
        a = self.actions_by_name
        toolbar = QToolBar("Main", self)
        toolbar.setObjectName("mainToolbar")
        toolbar.setMovable(False)
        toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        for name in ("render_all", "render_stale", "render_line", "stop_render", None, "play_pause",
                     "play_from_cursor", None, "export"):
            if name is None:
                toolbar.addSeparator()
            else:
                toolbar.addAction(a[name])
        self.addToolBar(toolbar)
        self.voices = VoicesPanel(self.library)
        self.voices.record_requested = self.record_voice
        self.cast_bar = CastBar()
        self.editor = ScriptEditor()
        self.tag_palette = TagPalette()
        self.editor.set_tag_names(self.tag_palette.names())
        centre = QWidget()
        cl = QVBoxLayout(centre)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.setSpacing(0)
        cl.addWidget(self.cast_bar)
        cl.addWidget(self.editor, 1)
        self.warning_bar = QLabel("")
        self.warning_bar.setObjectName("warningBar")
        self.warning_bar.setAccessibleName("Script warnings")
        self.warning_bar.setWordWrap(True)
        self.warning_bar.setContentsMargins(10, 4, 10, 4)
        self.warning_bar.setStyleSheet("#warningBar { color: #c2410c; }")
        self.warning_bar.setVisible(False)
        cl.addWidget(self.warning_bar)
        self.takes = TakesPanel()
        self.settings_panel = SettingsPanel()
        self.settings_panel.set_settings(self.project.settings)
        self.render_on = RenderOnBox(self.ctx.settings)
        self.settings_panel.layout().addRow(self.render_on)
        self.render_on.target_chosen.connect(self.render_on_target)
        self.inspector = QTabWidget()
        self.inspector.setObjectName("inspector")
        self.inspector.setAccessibleName("Inspector")
        self.inspector.addTab(self.tag_palette, "Tags")
        self.inspector.addTab(self.takes, "Takes")
        self.inspector.addTab(self.settings_panel, "Settings")
        top = QSplitter(Qt.Orientation.Horizontal)
        top.addWidget(self.voices)
        top.addWidget(centre)
        top.addWidget(self.inspector)
        top.setSizes([260, 720, 300])
        top.setStretchFactor(1, 1)
        self.player_bar = PlayerBar(self.buffer, a)
        self.waveform = self.player_bar.waveform
        outer = QSplitter(Qt.Orientation.Vertical)
        outer.addWidget(top)
        outer.addWidget(self.player_bar)
        outer.setSizes([600, 150])
        outer.setStretchFactor(0, 1)
        self.setCentralWidget(outer)
        self.status = StatusPanel(self.statusBar())
        if not self.player.available:
            self.player_bar.set_notice(self.player.unavailable_reason)

    def _build_menus(self) -> None:
        menus: dict[str, object] = {}
        for spec in SPECS:
            menu = menus.get(spec.menu)
            if menu is None:
                menu = menus[spec.menu] = self.menuBar().addMenu("&" + spec.menu)
            if spec.name in ("quit", "undo", "render_all", "play_pause", "new_voice"):
                if menu.actions():
                    menu.addSeparator()
            menu.addAction(self.actions_by_name[spec.name])
            if spec.name == "open_project":
                self.recent_menu = menu.addMenu("Open &Recent")
        self.store.recent_changed.connect(self._fill_recent)
        self._fill_recent()

    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        for path in self.store.recent():
            self.recent_menu.addAction(path.name, lambda p=path: self.open_project(p))
        self.recent_menu.setEnabled(bool(self.recent_menu.actions()))

    def _wire(self) -> None:
        h = self.ctx.host
        h.model_loading.connect(self._on_model_loading)
        h.model_ready.connect(self._on_model_ready)
        h.job_failed.connect(self._on_job_failed)
        h.job_finished.connect(self._on_job_finished)
        self.editor.textChanged.connect(lambda: self._parse_timer.start())
        self.editor.cursor_line_changed.connect(lambda _: self._show_takes())
        self.tag_palette.tag_chosen.connect(self.editor.insert_tag)
        self.cast_bar.cast_changed.connect(self._cast_changed)
        self.voices.voices_changed.connect(self._voices_changed)
        self.voices.message.connect(lambda m: self.statusBar().showMessage(m, 5000))
        self.settings_panel.settings_changed.connect(self._settings_changed)
        self.takes.pick_requested.connect(self._pick)
        self.takes.audition_requested.connect(self.play_line)
        self.session.timeline_changed.connect(self._timeline_changed)
        self.session.audio_grew.connect(self._audio_grew)
        self.session.takes_changed.connect(self._take_added)
        self.session.busy_changed.connect(self._busy_changed)
        self.session.stats.connect(self._on_progress)
        self.session.failed.connect(self._render_failed)
        self.session.finished.connect(self._render_finished)
        self.flow.failed.connect(self._render_failed)
        self.flow.encoding.connect(lambda on: self.status.stop("Encoding reference clips…" if on else ""))
        self.player.position_changed.connect(self._position)
        self.player.state_changed.connect(self._play_state)
        self.waveform.seek_requested.connect(self.player.seek)
        self._voices_changed()

    # -- model -----------------------------------------------------------------------------------

    def load_model(self, model_dir: Path) -> None:
        s = self.project.settings
        self.ctx.model_dir = model_dir
        self.status.set_model(None, "Loading model…")
        self.status.progress.setRange(0, 100)
        self.status.progress.setValue(0)
        self.status.progress.setVisible(True)
        self._load_job = self.ctx.host.new_job_id("load")
        self.ctx.host.load(api.LoadRequest(self._load_job, model_dir, s.device, s.precision,
                                           fast=s.speed == "fast", quantize=s.quantize))
        self._update_enabled()

    def render_on_target(self, target: object) -> None:
        """Settings ▸ Render on: load through the engine switch on a server (`RemoteSettings`) or on this
        computer (None: the remembered model folder, else the model page). The fake engine has no switch."""
        switch = self.ctx.engine_switch
        if switch is None:
            self.statusBar().showMessage("Rendering on a server needs the real engine (not S2STUDIO_ENGINE=fake).",
                                         10000)
            return
        switch.choose(target)  # type: ignore[arg-type]
        model_dir = self.ctx.model_dir
        if target is None and model_dir is None:
            self.open_model_page()
            return
        self.load_model(model_dir or Path("server"))
        self.ctx.model_dir = model_dir

    def stop(self) -> None:
        """Stop whatever runs: a render, the encoding before it, or a model load."""
        self.flow.cancel()
        if self._load_job is not None:
            self.ctx.host.cancel(self._load_job)

    def _on_model_loading(self, event: api.ModelLoading) -> None:
        self.status.set_model(None, f"Loading model… {event.message}".rstrip())
        self.status.progress.setValue(int(event.progress * 100))

    def _on_model_ready(self, event: api.ModelReady) -> None:
        self._load_job = None
        self.status.progress.setVisible(False)
        self.model_info = event.info
        self.flow.codec_fingerprint = event.info.codec_fingerprint
        self.status.set_model(event.info)
        from s2studio.ui.model_page import is_demo  # noqa: PLC0415

        if self.ctx.model_dir is not None and is_demo(self.ctx.model_dir):
            self.status.model.setText(f"Model: {event.info.name} (demo: random weights, produces noise)")
        self._update_enabled()

    def _on_job_finished(self, event: api.JobFinished) -> None:
        if event.job_id == self._load_job:  # ended without ModelReady: cancelled
            self._load_job = None
            self.status.progress.setVisible(False)
            if self.model_info is None:
                self.status.set_model(None, "No model (loading cancelled)")
            self._update_enabled()

    def _on_job_failed(self, event: api.JobFailed) -> None:
        if event.job_id.startswith("load"):
            self._load_job = None
            self.status.progress.setVisible(False)
            self.model_info = None
            self.status.set_model(None, "No model")
            self.statusBar().showMessage(event.error, 10000)
            self._update_enabled()

    def open_model_page(self) -> None:
        from s2studio.ui.model_page import ModelPage  # noqa: PLC0415 - rarely opened

        page = ModelPage(self.ctx.data_dir / "models", self)
        accepted = page.exec()
        chosen = page.chosen
        page.deleteLater()
        if accepted and chosen is not None:
            self.ctx.settings.setValue("model/dir", str(chosen))
            self.load_model(chosen)

    # -- script and cast -------------------------------------------------------------------------

    def reparse(self) -> None:
        text = self.editor.toPlainText()
        if text != self.project.script:
            self.project.script = text
            self.store.changed(self.project)
        # With no voices yet every name would be "unknown": warn only once there is something to pick.
        voiced = {s for s, v in self.project.cast.items() if v} | {NARRATOR}
        self.script = parse_script(text, known_speakers=voiced if self.cast_bar.has_voices else None)
        self.editor.set_warnings([InlineWarning(w.start, w.end, w.message) for w in self.script.warnings])
        self._show_warning_summary()
        self.cast_bar.set_speakers(self.script.speakers, self.project.cast)
        self.session.set_script(self.script)
        self._show_takes()
        self._update_enabled()

    def _show_warning_summary(self) -> None:
        warnings = self.script.warnings
        if not warnings:
            self.warning_bar.setVisible(False)
            return
        first = min(warnings, key=lambda w: w.start)
        line = self.script.source.count("\n", 0, first.start) + 1
        more = f"  (+{len(warnings) - 1} more: hover the underlines)" if len(warnings) > 1 else ""
        self.warning_bar.setText(f"⚠ Line {line}: {first.message}{more}")
        self.warning_bar.setVisible(True)

    def _cast_changed(self, speaker: str, voice_id: str) -> None:
        self.project.cast[speaker] = voice_id
        self.store.changed(self.project)
        self.reparse()

    def _voices_changed(self) -> None:
        self.cast_bar.set_voices([(v.id, v.name) for v in self.voices.voices()])
        self.reparse()

    def _settings_changed(self, settings: GenerationSettings) -> None:
        reload = settings.load_key != self.project.settings.load_key
        self.project.settings = settings
        if reload and self.ctx.model_dir is not None and not self.flow.busy:
            self.load_model(self.ctx.model_dir)
        self.ctx.settings.setValue("generation", json.dumps(asdict(settings)))
        self.store.changed(self.project)
        self._show_takes()

    def _remembered_settings(self) -> GenerationSettings:
        try:
            return GenerationSettings.from_dict(json.loads(self.ctx.settings.value("generation", "{}") or "{}"))
        except ValueError:
            return GenerationSettings()

    def cursor_line(self) -> Line | None:
        pos = self.editor.textCursor().position()
        block = self.editor.textCursor().blockNumber() + 1
        on_block = [ln for ln in self.script.lines if ln.source_line == block]
        for ln in on_block:
            if ln.start <= pos <= ln.end:
                return ln
        return on_block[0] if on_block else None

    # -- rendering -------------------------------------------------------------------------------

    def render(self, lines: list[Line]) -> None:
        if not lines:
            self.statusBar().showMessage("Nothing to render: every line is up to date.", 5000)
            return
        if self.model_info is None:
            self.statusBar().showMessage("Load a model first (File ▸ Model…).", 8000)
            return
        try:
            self.flow.render(lines)
        except (UserError, ValueError) as exc:  # ValueError: sampling settings the engine refuses
            self._render_failed(str(exc))
            return
        self.status.start(len(lines))
        self._autoplay_from = lines[0].line_id
        self._last_rtf = 0.0

    def _on_progress(self, event: api.Progress) -> None:
        self._last_rtf = event.rtf
        self.status.on_progress(event, self.session.done_lines)

    def render_cursor_line(self) -> None:
        line = self.cursor_line()
        if line is not None:
            self.render([line])

    def _busy_changed(self, busy: bool) -> None:
        self._update_enabled()
        if not busy:
            self.store.changed(self.project, soon=True)

    def _render_finished(self, cancelled: bool) -> None:
        self.status.stop("Render cancelled." if cancelled else "Render finished.")
        line_id, self._autoplay_from = getattr(self, "_autoplay_from", None), None
        if line_id is not None and not cancelled and self.autoplay and not self.player.playing:
            self.play_line(line_id)  # the render ended before enough audio was ahead to start earlier

    def _render_failed(self, message: str) -> None:
        self._autoplay_from = None
        self.status.stop("Render failed.")
        QMessageBox.warning(self, "Render failed", message)

    def _take_added(self, line_id: str) -> None:
        self.store.changed(self.project, soon=True)
        self._show_takes()

    def _pick(self, line_id: str, index: int) -> None:
        self.session.pick(line_id, index)
        self.store.changed(self.project)
        self._show_takes()

    def _show_takes(self) -> None:
        line = self.cursor_line()
        if line is None:
            self.takes.show_line(None, "", None, False)
            return
        label = f"{line.speaker}: {line.text[:60]}"
        self.takes.show_line(line.line_id, label, self.project.lines.get(line.line_id), self.session.is_stale(line))

    # -- voices ----------------------------------------------------------------------------------

    def record_voice(self) -> None:
        from s2studio.ui.record_dialog import RecordDialog  # noqa: PLC0415

        dialog = RecordDialog(self)
        accepted = dialog.exec()
        path, transcript = dialog.path, dialog.transcript.toPlainText().strip()
        dialog.deleteLater()  # modal dialogs are deleted explicitly: a parented, unreferenced one crashed PySide at exit
        if accepted and path is not None:
            self.voices.new_voice_from(path, transcript)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt override
        if self._dropped_paths(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt override
        paths = self._dropped_paths(event.mimeData())
        event.acceptProposedAction()
        QTimer.singleShot(0, lambda: self.open_paths(paths))

    @staticmethod
    def _dropped_paths(mime: QMimeData) -> list[Path]:
        return [Path(u.toLocalFile()) for u in mime.urls() if u.isLocalFile()]

    def open_paths(self, paths: list[Path]) -> None:
        """What a drop does: the audio files together make one voice (1–4 clips), .s2voice imports,
        .s2proj opens."""
        audio = [p for p in paths if p.suffix.lower() in AUDIO_SUFFIXES]
        if audio:
            self.voices.new_voice_from(audio)
        for path in paths:
            try:
                if path.suffix == ".s2voice":
                    voice = self.library.import_voice(path)
                    self.voices.refresh()
                    self.voices.select(voice.id)
                    self._voices_changed()
                elif path.suffix == ".s2proj" or (path / "project.json").is_file():
                    self.open_project(path)
            except UserError as exc:
                QMessageBox.warning(self, "Cannot open", str(exc))

    # -- dialogs ---------------------------------------------------------------------------------

    def open_export(self) -> None:
        from s2studio.ui.export_dialog import ExportDialog  # noqa: PLC0415

        dialog = ExportDialog(self.project, self.script, self.model_info, self)
        dialog.gap_changed.connect(self._gap_changed)
        dialog.exec()
        dialog.deleteLater()

    def _gap_changed(self, _gap_s: float) -> None:
        """The project's gap changed (export dialog): lay the player's timeline out again with it."""
        self.session.rebuild()
        self.store.changed(self.project)

    def show_shortcuts(self) -> None:
        if getattr(self, "shortcuts_dialog", None) is None:
            self.shortcuts_dialog = ShortcutsDialog(self)
        self.shortcuts_dialog.show()
        self.shortcuts_dialog.raise_()

    def _update_enabled(self) -> None:
        a = self.actions_by_name
        busy = self.flow.busy
        ready = self.model_info is not None
        has_lines = bool(self.script.lines)
        for name in ("render_all", "render_stale", "render_line"):
            a[name].setEnabled(ready and has_lines and not busy)
        a["stop_render"].setEnabled(busy or self._load_job is not None)
        a["export"].setEnabled(bool(self.project.lines))
        a["play_pause"].setEnabled(self.player.available)
        a["play_from_cursor"].setEnabled(self.player.available)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        if self.ask_on_close and self.store.dirty and (self.project.script.strip() or self.project.lines):
            answer = QMessageBox.question(
                self, "Save changes?", "Save the project before closing?",
                QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Discard
                | QMessageBox.StandardButton.Cancel)
            if answer == QMessageBox.StandardButton.Cancel:
                event.ignore()
                return
            if answer == QMessageBox.StandardButton.Save:
                self.save_project()
                if self.store.dirty:
                    event.ignore()
                    return
        self.player.close()
        self.flow.cancel()
        self.store.end_session()
        super().closeEvent(event)
