"""The studio window (design.md §8): voices left, cast + script centre, tags/takes/settings right, the
player bottom, the status bar.

It composes the controllers of `ui/control` (the document, the timeline's session, the render flow,
the player, the model, the project store) and the widgets of each region, and connects their signals.
The work is theirs: a slot here only passes what one part says to the parts that show it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QCloseEvent, QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (QApplication, QInputDialog, QLabel, QMainWindow, QMessageBox, QSplitter, QToolBar,
                               QVBoxLayout, QWidget)

from s2studio.audio.timeline import Timeline
from s2studio.engine import api
from s2studio.engine.plan import MAX_TAKES
from s2studio.errors import UserError
from s2studio.state.project import GenerationSettings, Project
from s2studio.state.script import Line, Script
from s2studio.state.staleness import take_settings
from s2studio.state.voices import VoiceLibrary
from s2studio.ui.actions import SPECS, ShortcutsDialog, build_actions
from s2studio.ui.check_commands import CheckCommands
from s2studio.ui.colors import is_dark, speaker_colors
from s2studio.ui.control.activity import ActivityLog
from s2studio.ui.control.clips import ClipJobs
from s2studio.ui.control.context import StudioContext
from s2studio.ui.control.document import Document
from s2studio.ui.control.drops import DropRouter, dropped_paths
from s2studio.ui.control.live import LivePlayback
from s2studio.ui.control.model import ModelController
from s2studio.ui.control.player import Player
from s2studio.ui.control.projects import ProjectStore
from s2studio.ui.control.render import RenderFlow
from s2studio.ui.control.session import RenderSession
from s2studio.ui.control.voices import VoiceCommands
from s2studio.ui.desktop import reveal_folder
from s2studio.ui.dialogs.about import show_about
from s2studio.ui.dialogs.model_commands import ModelCommands, remembered_settings
from s2studio.ui.dialogs.project_commands import ProjectCommands
from s2studio.ui.inspector.inspector import Inspector
from s2studio.ui.keys import SpaceForPlayback, run_edit
from s2studio.ui.player.player_bar import PlayerBar
from s2studio.ui.script.cast_panel import CastPanel
from s2studio.ui.script.chapters import ChapterNavigation, ChapterPanel
from s2studio.ui.script.editor import InlineWarning, ScriptEditor
from s2studio.ui.script.find_bar import FindBar
from s2studio.ui.status import StatusPanel
from s2studio.ui.voices.voices_panel import VoicesPanel
from s2studio.ui.window.line_states import LineStates
from s2studio.ui.window.transport import Transport
from s2studio.ui.window_memory import WindowMemory

logger = logging.getLogger(__name__)

SEEK_STEP_S = 5.0


class MainWindow(QMainWindow):
    def __init__(self, ctx: StudioContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.setObjectName("mainWindow")
        self.setWindowTitle("S2 Studio")
        self.setAcceptDrops(True)
        self.resize(1280, 800)
        self.library = VoiceLibrary(ctx.voices_dir)
        self.voice_commands = VoiceCommands(self.library, self)
        self.clip_jobs = ClipJobs(self)
        self.document = Document(Project(settings=remembered_settings(ctx.settings)), self)
        self.timeline = Timeline(gap_s=self.document.project.gap_s)
        self.player = Player(self.timeline, self)
        self.session = RenderSession(ctx.host, self.document, self.timeline, self)
        self.flow = RenderFlow(ctx.host, self.library, self.document, self.session, self)
        self._takes = 2
        """What Render Takes… offered last (it offers the same again)."""
        self.live = LivePlayback(self.session, self.player, self)
        self.model = ModelController(ctx.host, self)
        self.store = ProjectStore(ctx.autosave_dir, ctx.settings, self)
        self.projects = ProjectCommands(self, self.store, self.document, self.library)
        self.shortcuts_dialog = ShortcutsDialog(self)
        self.actions_by_name = build_actions(self, self._slots())
        self._build_ui()
        self.check_commands = CheckCommands(self, self.document, self.library, self.flow, self.session, self.lines,
                                            ctx.settings, self.inspector, self.editor,
                                            lambda: self.editor.lines_in_selection(self.script),
                                            lambda text: self.statusBar().showMessage(text, 15000))
        self._build_menus()
        self._parse_timer = QTimer(self, singleShot=True, interval=150)
        self._parse_timer.timeout.connect(lambda: self.document.set_text_soon(self.editor.toPlainText()))
        self._wire()
        self.refresh_voices()
        self._update_enabled()
        self._update_title()
        self.memory = WindowMemory(self, ctx.settings, {"splitter_top": self.top_splitter,
                                                        "splitter_outer": self.outer_splitter,
                                                        "splitter_script": self.script_splitter})
        self.memory.restore()
        self.activity = ActivityLog(self.session, self)  # what the log says of the person's work
        ctx.host.devices_found.connect(lambda event: self.settings_panel.set_devices(event.devices))
        ctx.host.devices_found.connect(lambda event: self.activity.devices(event.devices))
        self.space = SpaceForPlayback(self)
        QApplication.instance().installEventFilter(self.space)

    # -- what tests and the composition root read --------------------------------------------------

    @property
    def project(self) -> Project:
        return self.document.project

    @property
    def script(self) -> Script:
        return self.document.script

    @property
    def model_info(self) -> api.ModelInfo | None:
        return self.model.info

    @property
    def ask_on_close(self) -> bool:
        """Ask to save unsaved changes before closing, New and Open (tests and the screenshot tool turn it off)."""
        return self.projects.ask

    @ask_on_close.setter
    def ask_on_close(self, ask: bool) -> None:
        self.projects.ask = ask

    # -- construction ----------------------------------------------------------------------------

    def _slots(self) -> dict:
        return {
            "new_project": self.new_project, "open_project": self.open_project, "save_project": self.save_project,
            "save_project_as": self.save_project_as, "save_with_voices": self.projects.save_with_voices,
            "export": self.open_export, "choose_model": self.open_model_page,
            "quit": self.close, "undo": lambda: self.editor.undo(), "redo": lambda: self.editor.redo(),
            "cut": lambda: run_edit("cut", self.editor), "copy": lambda: run_edit("copy", self.editor),
            "paste": lambda: run_edit("paste", self.editor), "select_all": lambda: run_edit("selectAll", self.editor),
            "find": lambda: self.find_bar.open_find(), "replace": lambda: self.find_bar.open_find(replace=True),
            "find_next": lambda: self.find_bar.find_next(), "find_previous": lambda: self.find_bar.find_previous(),
            "insert_tag": lambda: self.inspector.show_tags(),
            "find_voice": lambda: self.voices.search.setFocus(),
            "render_all": lambda: self.render(list(self.script.lines)),
            "render_stale": lambda: self.render(self.document.stale_lines()),
            "render_line": self.render_cursor_line, "render_takes": self.render_takes, "stop_render": self.stop,
            "render_failing": lambda: self.check_commands.render_failing(),
            "best_of_n": lambda: self.check_commands.best_of_n(),
            "retake_until_pass": lambda: self.check_commands.retake_until_pass(),
            "next_failed": lambda: self.check_commands.next_failed(),
            "only_failed": lambda on: self.check_commands.show_only_failed(on), "cancel_load": lambda: self.model.cancel(),
            "play_pause": lambda: self.transport.play_pause(),
            "play_from_cursor": lambda: self.transport.play_from_cursor(),
            "loop_line": lambda on: self.transport.set_looping(on),
            "follow_playhead": lambda on: self.waveform.set_follow(on),
            "zoom_in": lambda: self.waveform.zoom_in(), "zoom_out": lambda: self.waveform.zoom_out(),
            "zoom_fit": lambda: self.waveform.fit(),
            "player_play_pause": lambda: self.transport.play_pause(), "player_start": lambda: self.player.seek(0),
            "player_end": lambda: self.player.seek(self.timeline.layout.end),
            "player_back": lambda: self.transport.step(-SEEK_STEP_S),
            "player_forward": lambda: self.transport.step(SEEK_STEP_S),
            "player_zoom_in": lambda: self.waveform.zoom_in(), "player_zoom_out": lambda: self.waveform.zoom_out(),
            "player_fit": lambda: self.waveform.fit(),
            "player_loop": lambda: self.actions_by_name["loop_line"].toggle(),
            "next_take": lambda: self.takes.step(1), "previous_take": lambda: self.takes.step(-1),
            "ab_take": lambda: self.takes.toggle_ab(),
            "new_voice": lambda: self.voices.browse(), "record_voice": lambda: self.voices.record(),
            "import_voice": lambda: self.voices.import_file(), "export_voice": lambda: self.voices.export_file(),
            "play_voice_clip": lambda: self.voices.play_clip(),
            "settings": lambda: self.inspector.show_settings(),
            "shortcuts": self.show_shortcuts,
            "about": lambda: show_about(self, self.model.info.name if self.model.info else None),
            "open_log_folder": lambda: reveal_folder(self.ctx.data_dir / "logs", "The log", self),
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
        preview = None
        if self.ctx.host is not None:
            from s2studio.ui.control.preview import VoicePreview  # noqa: PLC0415 - only with an engine

            preview = VoicePreview(self.ctx.host, self.library, self)
        self.voices = VoicesPanel(self.voice_commands, self.clip_jobs, preview, settings=self.ctx.settings)
        self.drops = DropRouter(self.voices.new_voice_from, self.voices.import_voice, self.open_project, self)
        self.cast_panel = CastPanel()
        self.editor = ScriptEditor()
        centre = QWidget()
        cl = QVBoxLayout(centre)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.setSpacing(0)
        cl.addWidget(self.cast_panel)
        self.chapter_panel = ChapterPanel()
        self.script_splitter = QSplitter(Qt.Orientation.Horizontal)
        self.script_splitter.addWidget(self.chapter_panel)
        self.script_splitter.addWidget(self.editor)
        self.script_splitter.setStretchFactor(1, 1)
        self.script_splitter.setSizes([170, 550])
        cl.addWidget(self.script_splitter, 1)
        self.find_bar = FindBar(self.editor)
        cl.addWidget(self.find_bar)
        self.warning_bar = QLabel("")
        self.warning_bar.setObjectName("warningBar")
        self.warning_bar.setAccessibleName("Script warnings")
        self.warning_bar.setWordWrap(True)
        self.warning_bar.setContentsMargins(10, 4, 10, 4)
        self.warning_bar.setStyleSheet("#warningBar { color: #c2410c; }")
        self.warning_bar.setVisible(False)
        cl.addWidget(self.warning_bar)
        self.inspector = ins = Inspector(self.ctx.settings)
        # the inspector's parts under the window's names (controllers, tests and screenshots reach them here)
        self.tag_palette, self.takes, self.settings_panel = ins.tag_palette, ins.takes, ins.settings_panel
        self.settings_scroll, self.render_on = ins.settings_scroll, ins.render_on
        self.transcripts_box = ins.transcripts_box
        self.render_on.target_chosen.connect(self.render_on_target)
        if self.ctx.engine_switch is not None:  # the fleet's live line per engine (plain strings, read each second)
            self._engines_timer = QTimer(self, interval=1000)
            self._engines_timer.timeout.connect(
                lambda: self.render_on.show_engines(self.ctx.engine_switch.status_lines()))
            self._engines_timer.start()
        self.editor.set_tag_names(self.tag_palette.names())
        top = QSplitter(Qt.Orientation.Horizontal)
        top.addWidget(self.voices)
        top.addWidget(centre)
        top.addWidget(self.inspector)
        top.setSizes([260, 720, 300])
        top.setStretchFactor(1, 1)
        self.top_splitter = top
        self.player_bar = PlayerBar(self.timeline, a)
        self.player_bar.addActions([a[s.name] for s in SPECS if s.scope == "player"])
        self.waveform = self.player_bar.waveform
        a["follow_playhead"].setChecked(self.waveform.follow)
        self.transport = Transport(self.player, self.timeline, self.player_bar, self.editor, self.document, a, self)
        self.lines = LineStates(self.document, self.session, self.player, self.editor, self.waveform, self.takes,
                                self.inspector, self)
        self.chapters = ChapterNavigation(self.chapter_panel, self.document, self.editor, self.waveform, self.render,
                                          self)
        outer = QSplitter(Qt.Orientation.Vertical)
        outer.addWidget(top)
        outer.addWidget(self.player_bar)
        outer.setSizes([600, 170])
        outer.setStretchFactor(0, 1)
        self.outer_splitter = outer
        self.setCentralWidget(outer)
        self.addActions([a[s.name] for s in SPECS if s.scope == "keys"])
        self.status = StatusPanel(self.statusBar(), a["cancel_load"])
        if self.ctx.engine_switch is not None:  # a render plan's live line per engine, in the status bar too
            self.status.engine_lines = lambda: self.ctx.engine_switch.status_lines(notices=False)
        self.models = ModelCommands(self, self.ctx, self.model, self.document, self.settings_panel, self.status)
        if not self.player.available:
            self.player_bar.set_notice(self.player.unavailable_reason)

    def _build_menus(self) -> None:
        menus: dict[str, object] = {}
        for spec in SPECS:
            if spec.scope != "window":
                continue
            menu = menus.get(spec.menu)
            if menu is None:
                menu = menus[spec.menu] = self.menuBar().addMenu("&" + spec.menu)
            if spec.name in ("quit", "undo", "cut", "find", "insert_tag", "render_all", "play_pause", "loop_line",
                             "next_take", "new_voice", "open_log_folder"):
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
        d, s = self.document, self.session
        self.model.loading.connect(self.status.model_loading)
        self.model.ready.connect(self._model_ready)
        self.model.unloaded.connect(self._model_unloaded)
        self.model.busy_changed.connect(lambda _busy: self._update_enabled())
        d.script_changed.connect(lambda _order: self._show_script())
        d.takes_changed.connect(self._takes_changed)
        d.replaced.connect(self._project_replaced)
        d.modified.connect(lambda soon: self.store.changed(self.project, soon=soon))
        d.cast_changed.connect(lambda: self.cast_panel.set_speakers(self.script.speakers, self.project.cast,
                                                                    self.project.speaker_colors))
        self.editor.edited.connect(self._parse_timer.start)
        self.tag_palette.tag_chosen.connect(self.editor.insert_tag)
        self.cast_panel.cast_changed.connect(d.set_cast)
        self.voice_commands.changed.connect(lambda _vid: self.refresh_voices())
        self.voices.dropped.connect(self.drops.route)
        self.drops.refused.connect(lambda text: QMessageBox.warning(self, "Cannot open", text))
        self.voices.finetune_requested.connect(self.fine_tune_voice)
        self.voices.message.connect(lambda m: self.statusBar().showMessage(m, 5000))
        self.settings_panel.settings_changed.connect(self._settings_changed)
        self.takes.pick_requested.connect(d.pick)
        self.takes.play_requested.connect(self.transport.play_line)
        self.takes.loop_requested.connect(lambda _line, on: self.transport.request_loop(on))
        self.takes.ab_requested.connect(self.transport.compare)
        self.transport.loop_changed.connect(self.lines.show_takes)
        s.timeline_changed.connect(self.transport.timeline_changed)
        self.player.buffering_changed.connect(lambda on: self.player_bar.show_buffering(on, self.live.waiting_for()))
        s.audio_grew.connect(lambda _start: self.transport.timeline_changed(lines_moved=False))
        s.busy_changed.connect(self._busy_changed)
        s.progress.connect(lambda _event: self.status.on_progress(s.pace))
        s.failed.connect(self._render_failed)
        s.lora_switched.connect(lambda text: self.statusBar().showMessage(text, 8000))
        s.finished.connect(lambda cancelled: self.status.stop("Render cancelled." if cancelled else "Render finished."))
        self.flow.notice.connect(lambda text: self.statusBar().showMessage(text, 15000))
        self.projects.about_to_switch.connect(self._before_switch)
        self.projects.message.connect(lambda text, ms: self.statusBar().showMessage(text, ms))
        self.models.message.connect(lambda text, ms: self.statusBar().showMessage(text, ms))
        self.projects.voices_added.connect(self.voice_commands.reread)
        self.store.path_changed.connect(lambda _path: self._update_title())
        self.store.unsaved_changed.connect(lambda _unsaved: self._update_title())

    def _update_title(self) -> None:
        """"scene.s2proj — S2 Studio", with "*" after the name while there are unsaved changes."""
        path = self.store.path
        self.setWindowTitle(f"{path.name if path else 'Untitled'}[*] — S2 Studio")
        self.setWindowModified(self.store.unsaved_work)

    # -- model -----------------------------------------------------------------------------------

    def ask_devices(self) -> None:
        """Ask the engine thread which devices this computer has (the settings grey out the others). The first
        job imports torch there: the composition root asks once the window is on screen."""
        self.ctx.host.find_devices()

    def load_model(self, model_dir: Path) -> None:
        self.models.load(model_dir)

    def render_on_target(self, target: object) -> None:
        self.models.render_on_target(target)

    def open_model_page(self) -> None:
        self.models.open_model_page()

    def stop(self) -> None:
        """Stop the render, or the request being built for it (a model load has its own Cancel Loading)."""
        self.flow.cancel()

    def _model_ready(self, info: api.ModelInfo) -> None:
        self.flow.set_codec(info.codec_fingerprint)
        self.flow.max_batch = info.max_batch
        switch = self.ctx.engine_switch
        self.flow.on_server = switch is not None and switch.remote is not None
        self.models.ready(info)
        self._update_enabled()

    def _model_unloaded(self, reason: str) -> None:
        self.status.model_unloaded(reason, still_loaded=self.model.info is not None)
        self.models.failed_without_fallback(reason)
        self._update_enabled()

    # -- the script ------------------------------------------------------------------------------

    def reparse(self) -> None:
        """Parse the editor's text now (edits are parsed 150 ms after the last keystroke)."""
        self._parse_timer.stop()
        self.document.set_text(self.editor.toPlainText())

    def fine_tune_voice(self, voice_id: str) -> None:
        """Open the Fine-tune dialog for the voice, on the model the studio loaded (ui/voices/finetune_dialog.py)."""
        from s2studio.ui.voices.finetune_dialog import FineTuneDialog  # noqa: PLC0415 - opened rarely

        try:
            dialog = FineTuneDialog(self.library, voice_id, self.model.folder, self.ctx.data_dir, self,
                                    host=self.ctx.host, model_info=self.model.info)
        except UserError as exc:
            QMessageBox.warning(self, "Fine-tune voice", str(exc))
            return

        dialog.voice_changed.connect(self.voice_commands.reread)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.show()

    def refresh_voices(self) -> None:
        voices = self.library.list()
        self.cast_panel.set_voices([(v.id, v.name) for v in voices])
        self.document.set_voices(voices)

    def _show_script(self) -> None:
        script = self.script
        self.editor.set_warnings([InlineWarning(w.start, w.end, w.message) for w in script.warnings])
        self._show_warning_summary()
        places = self.project.speaker_colors
        self.cast_panel.set_speakers(script.speakers, self.project.cast, places)
        colors = speaker_colors(places, is_dark(self.palette()))
        self.editor.highlighter.set_places(places)
        change = self.document.change
        self.waveform.set_labels(script, colors, None if change is None else change.touched)
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

    def cursor_line(self) -> Line | None:
        """The selected line: the one under the editor's cursor."""
        return self.lines.selected()

    def select_line(self, line_id: str) -> None:
        self.lines.select(line_id)

    # -- cast and settings -----------------------------------------------------------------------

    def _settings_changed(self, settings: GenerationSettings) -> None:
        asked = take_settings(self.project.settings)
        self.models.settings_changed(settings, rendering=self.flow.busy)
        if take_settings(self.project.settings) != asked:  # what takes record changed: lines may be stale now
            self.lines.show()

    # -- rendering -------------------------------------------------------------------------------

    def render_takes(self) -> None:
        """Ask how many takes, then render that many of the selected lines (or the cursor's line) side by side;
        each joins its line's takes."""
        lines = self.editor.lines_in_selection(self.script)
        if not lines:
            self.statusBar().showMessage("Put the cursor on a line (or select lines) to render takes of.", 5000)
            return
        dialog = QInputDialog(self)
        dialog.setObjectName("takesDialog")
        dialog.setWindowTitle("Render takes")
        dialog.setInputMode(QInputDialog.InputMode.IntInput)
        dialog.setIntRange(1, MAX_TAKES)
        dialog.setIntValue(self._takes)
        which = "this line" if len(lines) == 1 else f"each of the {len(lines)} selected lines"
        dialog.setLabelText(f"Takes of {which}, rendered at once (1–{MAX_TAKES}):")
        if dialog.exec() != QInputDialog.DialogCode.Accepted:
            return
        self._takes = dialog.intValue()
        self.render(lines, takes=self._takes)

    def render(self, lines: list[Line], takes: int = 1) -> None:
        if not lines:
            self.statusBar().showMessage("Nothing to render: every line is up to date.", 5000)
            return
        if self.model.info is None:
            self.statusBar().showMessage("Load a model first (File ▸ Model…).", 8000)
            return
        if not self._engines_accepted(lines):
            return
        try:
            self.flow.render(lines, takes)
        except UserError as exc:
            self._render_failed(str(exc))

    def _engines_accepted(self, lines: list[Line]) -> bool:
        """Before rendering on engines that cannot do all this computer does (a server that ignores seeds, a voice's
        LoRA), say so per server and voice and ask; once per set of notes."""
        switch = self.ctx.engine_switch
        voices = (self.document.voice_of(s) for s in dict.fromkeys(ln.speaker for ln in lines))
        lora = [v.name for v in voices if v is not None and v.lora is not None]
        notes = tuple(switch.travel_notes(lora)) if switch is not None else ()
        if not notes or notes == getattr(self, "_accepted_notes", None):
            return True
        box = QMessageBox(QMessageBox.Icon.Question, "Render on these engines?",
                          "Some engines of this render cannot do all that this computer does:\n\n"
                          + "\n".join(f"• {n}" for n in notes) + "\n\nRender anyway?",
                          QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel, self)
        box.setObjectName("travel_question")
        if box.exec() != QMessageBox.StandardButton.Yes:
            return False
        self._accepted_notes = notes
        return True

    def render_cursor_line(self) -> None:
        line = self.cursor_line()
        if line is not None:
            self.render([line])

    def _busy_changed(self, busy: bool) -> None:
        if busy:
            self.status.start()
        else:
            self.models.render_ended()
        self._update_enabled()

    def _render_failed(self, message: str) -> None:
        self.status.stop("")  # said for a while, not kept after the cause is fixed
        self.statusBar().showMessage("Render failed.", 15000)
        QMessageBox.warning(self, "Render failed", message[:1].upper() + message[1:])

    def _takes_changed(self, _line_id: str) -> None:
        self._update_enabled()

    # -- projects --------------------------------------------------------------------------------

    def new_project(self) -> bool:
        return self.projects.new()

    def open_project(self, path: Path | None = None) -> bool:
        return self.projects.open(path)

    def save_project(self) -> bool:
        return self.projects.save()

    def save_project_as(self, path: Path | None = None) -> bool:
        return self.projects.save_as(path)

    def offer_restore(self) -> bool:
        return self.projects.offer_restore()

    def restore_autosave(self) -> bool:
        return self.projects.restore_autosave()

    def _before_switch(self) -> None:
        self.flow.cancel()
        self.player.pause()

    def _project_replaced(self) -> None:
        project = self.project
        pack_voices = self.actions_by_name["save_with_voices"]
        pack_voices.blockSignals(True)  # showing the project's choice is not making it
        pack_voices.setChecked(project.with_voices)
        pack_voices.blockSignals(False)
        self.editor.blockSignals(True)  # the document has parsed this text already
        self.editor.setPlainText(project.script)
        self.editor.blockSignals(False)
        self.editor.document().setModified(False)
        self._show_script()
        self.lines.show()
        self.player.seek(0)
        self.waveform.fit()

    # -- voices ----------------------------------------------------------------------------------

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt override
        if dropped_paths(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt override
        event.acceptProposedAction()
        self.drops.route(dropped_paths(event.mimeData()))

    # -- dialogs ---------------------------------------------------------------------------------

    def open_export(self) -> None:
        from s2studio.ui.dialogs.export_dialog import ExportDialog  # noqa: PLC0415

        if not self.check_commands.confirm_export():
            return
        names = {v.id: v.name for v in self.library.list()}
        selected = [ln.line_id for ln in self.editor.lines_in_selection(self.script)]
        name = self.store.path.stem if self.store.path is not None else ""
        dialog = ExportDialog(self.project, self.script, self.model.info, names, selected, self.ctx.settings, self,
                              name=name)
        dialog.gap_changed.connect(self.set_gap)
        dialog.exec()
        dialog.deleteLater()

    def set_gap(self, gap_s: float) -> None:
        """The project's gap changed (export dialog): the player's timeline is laid out with it."""
        self.document.set_gap(gap_s)
        self.session.relayout()

    def show_shortcuts(self) -> None:
        self.shortcuts_dialog.show()
        self.shortcuts_dialog.raise_()

    def _update_enabled(self) -> None:
        a = self.actions_by_name
        busy = self.flow.busy
        ready = self.model.info is not None
        has_lines = bool(self.script.lines)
        loading = self.model.busy
        for name in ("render_all", "render_stale", "render_line", "render_takes", "render_failing", "best_of_n",
                     "retake_until_pass"):
            a[name].setEnabled(ready and has_lines and not busy and not loading)
        a["stop_render"].setEnabled(busy)
        a["cancel_load"].setEnabled(loading)
        a["export"].setEnabled(bool(self.project.lines))
        for name in ("play_pause", "play_from_cursor", "loop_line", "player_play_pause"):
            a[name].setEnabled(self.player.available)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        if self._parse_timer.isActive():  # the last keystrokes, parsed before anything is written
            self.reparse()
        self.document.finish_parsing()
        answer = self.projects.confirm_discard("closing")
        if answer is False:
            event.ignore()
            return
        self.player.close()
        self.flow.cancel()
        self.check_commands.checks.shutdown()
        self.memory.save()
        self.store.remember_last()
        self.store.end_session(discard=answer is None)
        self.voice_commands.forget_undo()
        QApplication.instance().removeEventFilter(self.space)
        super().closeEvent(event)
