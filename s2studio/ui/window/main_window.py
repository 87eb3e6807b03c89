"""The studio window (design.md §8): voices left, cast + script centre, tags/takes/settings right, the
player bottom, the status bar.

It composes the controllers of `ui/control` and the widgets of each region, and connects their signals. The work
is theirs: a slot here only passes what one part says to the parts that show it. Tests and the composition root
reach the parts by their names (`window.projects.open`, `window.inspector.takes`)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QMainWindow, QMessageBox, QSplitter

from s2studio.audio.timeline import Timeline
from s2studio.engine import api
from s2studio.state.project import GenerationSettings, Project
from s2studio.state.staleness import take_settings
from s2studio.state.voices import VoiceLibrary
from s2studio.ui.actions import SPECS, ShortcutsDialog, build_actions, connect_actions
from s2studio.ui.check_commands import CheckCommands
from s2studio.ui.colors import is_dark, speaker_colors
from s2studio.ui.control import heap
from s2studio.ui.control.activity import ActivityLog
from s2studio.ui.control.clips import ClipJobs
from s2studio.ui.control.context import StudioContext
from s2studio.ui.control.document import Document
from s2studio.ui.control.drops import DropRouter
from s2studio.ui.control.live import LivePlayback
from s2studio.ui.control.model import ModelController
from s2studio.ui.control.player import Player
from s2studio.ui.control.preview import VoicePreview
from s2studio.ui.control.projects import ProjectStore
from s2studio.ui.control.render import RenderFlow
from s2studio.ui.control.session import RenderSession
from s2studio.ui.control.slices import Slices
from s2studio.ui.control.voices import VoiceCommands
from s2studio.ui.dialogs.model_commands import ModelCommands, remembered_settings
from s2studio.ui.dialogs.project_commands import ProjectCommands
from s2studio.ui.inspector.inspector import Inspector
from s2studio.ui.keys import SpaceForPlayback
from s2studio.ui.player.player_bar import PlayerBar
from s2studio.ui import wheel_guard
from s2studio.ui.script.cast_panel import CastPanel
from s2studio.ui.script.chapters import ChapterNavigation, ChapterPanel
from s2studio.ui.script.editor import InlineWarning, ScriptEditor
from s2studio.ui.script.find_bar import FindBar
from s2studio.ui.script.script_column import script_column
from s2studio.ui.script.warning_bar import WarningBar
from s2studio.ui.status import StatusPanel
from s2studio.ui.voices.finetune.dialog import open_fine_tune
from s2studio.ui.voices.voices_panel import VoicesPanel
from s2studio.ui.window.action_slots import action_slots
from s2studio.ui.window.line_states import LineStates
from s2studio.ui.window.menus import Menus, add_toolbar
from s2studio.ui.window.render_commands import RenderCommands
from s2studio.ui.window.transport import Transport
from s2studio.ui.window_memory import WindowMemory


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
        self.preview = VoicePreview(ctx.host, self.library, self)
        self.document = Document(Project(settings=remembered_settings(ctx.settings)), self)
        self.timeline = Timeline(gap_s=self.document.project.gap_s)
        self.player = Player(self.timeline, self)
        self.session = RenderSession(ctx.host, self.document, self.timeline, self)
        self.player.before_play = self.session.lay_out_now
        self.flow = RenderFlow(ctx.host, self.library, self.document, self.session, self)
        self.live = LivePlayback(self.session, self.player, self)
        self.model = ModelController(ctx.host, self)
        self.store = ProjectStore(ctx.autosave_dir, ctx.settings, self, hold_engine=ctx.host.hold)
        self.projects = ProjectCommands(self, self.store, self.document, self.library, self.settle_edits)
        self.shortcuts_dialog = ShortcutsDialog(self)
        self.actions_by_name = build_actions(self)
        self._build_ui()
        self.menus = Menus(self, self.actions_by_name, self.store, self.projects.open)
        self.showing: Slices[Callable[[], object]] = Slices(lambda show: show(), parent=self)
        """Another project shown a part a pass, from the pass after its text (a book's timeline, its lines' states,
        its cast: each tens of ms); an edit, a click or a render meanwhile finds the document already replaced."""
        self._parse_timer = QTimer(self, singleShot=True, interval=150)
        self._parse_timer.timeout.connect(lambda: self.document.set_text_soon(self.editor.toPlainText()))
        connect_actions(self.actions_by_name, action_slots(self))
        self._wire()
        self._voices_changed()
        self._update_enabled()
        self._update_title()
        self.memory = WindowMemory(self, ctx.settings, {"splitter_top": self.top_splitter,
                                                        "splitter_outer": self.outer_splitter,
                                                        "splitter_script": self.script_splitter})
        self.memory.restore()
        self.activity = ActivityLog(self.session, self)  # what the log says of the person's work
        ctx.host.devices_found.connect(lambda event: self.inspector.settings_panel.set_devices(event.devices))
        ctx.host.devices_found.connect(lambda event: self.activity.devices(event.devices))
        self.space = SpaceForPlayback(self)
        wheel_guard.guard(self)  # its fields as built; the cast's rows are guarded as they come

    def _build_ui(self) -> None:
        a = self.actions_by_name
        add_toolbar(self, a)
        self.voices = VoicesPanel(self.voice_commands, self.clip_jobs, self.preview, settings=self.ctx.settings)
        self.drops = DropRouter(self.voices.asking.new_voice_from, self.voices.import_voice, self.projects.open, self)
        self.drops.watch(self)
        self.cast_panel, self.chapter_panel, self.editor = CastPanel(), ChapterPanel(), ScriptEditor()
        self.find_bar, self.warning_bar = FindBar(self.editor), WarningBar()
        centre, self.script_splitter = script_column(self.cast_panel, self.chapter_panel, self.editor,
                                                     [self.find_bar, self.warning_bar])
        self.inspector = Inspector(self.ctx.settings)
        self.editor.set_tag_names(self.inspector.tag_palette.names())
        top = self.top_splitter = QSplitter(Qt.Orientation.Horizontal)
        for part in (self.voices, centre, self.inspector):
            top.addWidget(part)
        top.setSizes([260, 720, 300])
        top.setStretchFactor(1, 1)
        self.player_bar = PlayerBar(self.timeline, a)
        self.player_bar.addActions([a[s.name] for s in SPECS if s.scope == "player"])
        a["follow_playhead"].setChecked(self.player_bar.waveform.follow)
        self.transport = Transport(self.player, self.timeline, self.player_bar, self.editor, self.document, a, self)
        self.lines = LineStates(self.document, self.session, self.player, self.editor, self.player_bar.waveform,
                                self.inspector.takes, self.inspector, self)
        outer = self.outer_splitter = QSplitter(Qt.Orientation.Vertical)
        outer.addWidget(top)
        outer.addWidget(self.player_bar)
        outer.setSizes([600, 170])
        outer.setStretchFactor(0, 1)
        self.setCentralWidget(outer)
        self.addActions([a[s.name] for s in SPECS if s.scope == "keys"])
        self.status = StatusPanel(self.statusBar(), a["cancel_load"])
        if self.ctx.engine_switch is not None:  # a render plan's live line per engine: its panel, the status bar
            self.inspector.render_on.follow_engines(self.ctx.engine_switch.status_lines)
            self.status.engine_lines = lambda: self.ctx.engine_switch.status_lines(notices=False)
        self.models = ModelCommands(self, self.ctx, self.model, self.document, self.inspector.settings_panel,
                                    self.status)
        self.check_commands = CheckCommands(self, self.document, self.library, self.flow, self.session, self.lines,
                                            self.ctx.settings, self.inspector, self.editor,
                                            lambda: self.editor.lines_in_selection(self.document.script),
                                            lambda text: self.statusBar().showMessage(text, 15000))
        self.renders = RenderCommands(self, self.ctx, self.library, self.document, self.editor, self.model,
                                      self.flow, self.session, self.store, self.status, self.check_commands)
        self.chapters = ChapterNavigation(self.chapter_panel, self.document, self.editor, self.player_bar.waveform,
                                          self.renders.render, self)
        if not self.player.available:
            self.player_bar.set_notice(self.player.unavailable_reason)

    def _wire(self) -> None:
        d, s, ins, say = self.document, self.session, self.inspector, self.statusBar().showMessage
        self.model.loading.connect(self.status.model_loading)
        self.model.ready.connect(self._model_ready)
        self.model.unloaded.connect(self._model_unloaded)
        self.model.busy_changed.connect(lambda _busy: self._update_enabled())
        d.script_changed.connect(lambda _order: self._show_script())
        d.takes_changed.connect(lambda _line_id: self._update_enabled())
        d.replaced.connect(self._project_replaced)
        d.modified.connect(lambda soon: self.store.changed(d.project, soon=soon))
        d.cast_changed.connect(lambda: self.cast_panel.set_speakers(d.script.speakers, d.project.cast,
                                                                    d.project.speaker_colors))
        self.editor.edited.connect(self._parse_timer.start)
        ins.tag_palette.tag_chosen.connect(self.editor.insert_tag)
        ins.render_on.target_chosen.connect(self.models.render_on_target)
        self.cast_panel.cast_changed.connect(d.set_cast)
        self.voice_commands.changed.connect(self._voices_changed)
        self.voices.finetune_requested.connect(lambda vid: open_fine_tune(self, self.library, vid, self.model, self.ctx,
                                                                          self.voice_commands.reread))
        self.voices.message.connect(lambda m: say(m, 5000))
        self.voices.dropped.connect(self.drops.route)
        self.drops.refused.connect(lambda text: QMessageBox.warning(self, "Cannot open", text))
        ins.settings_panel.settings_changed.connect(self._settings_changed)
        ins.takes.pick_requested.connect(d.pick)
        ins.takes.play_requested.connect(self.transport.play_line)
        ins.takes.loop_requested.connect(lambda _line, on: self.transport.request_loop(on))
        ins.takes.ab_requested.connect(self.transport.compare)
        self.transport.loop_changed.connect(self.lines.show_takes)
        s.timeline_changed.connect(self.transport.timeline_changed)
        self.player.buffering_changed.connect(lambda on: self.player_bar.show_buffering(on, self.live.waiting_for()))
        s.audio_grew.connect(lambda _start: self.transport.timeline_changed(lines_moved=False))
        s.busy_changed.connect(self._busy_changed)
        s.progress.connect(lambda _event: self.status.on_progress(s.pace))
        s.lora_switched.connect(lambda text: say(text, 8000))
        s.finished.connect(lambda cancelled: self.status.stop("Render cancelled." if cancelled else "Render finished."))
        self.flow.notice.connect(lambda text: say(text, 15000))
        self.projects.about_to_switch.connect(self.flow.cancel)
        self.projects.about_to_switch.connect(self.player.pause)
        self.projects.message.connect(say)
        self.models.message.connect(say)
        self.projects.voices_added.connect(self.voice_commands.reread)
        self.store.path_changed.connect(lambda _path: self._update_title())
        self.store.unsaved_changed.connect(lambda _unsaved: self._update_title())

    def _update_title(self) -> None:
        """"scene.s2proj — S2 Studio", with "*" after the name while there are unsaved changes."""
        path = self.store.path
        self.setWindowTitle(f"{path.name if path else 'Untitled'}[*] — S2 Studio")
        self.setWindowModified(self.store.unsaved_work)

    def settle_edits(self) -> None:
        """The editor's text whole in the document now (a long paste going in, the last keystrokes, a parse)."""
        self.editor.pasting.finish()
        (self.reparse if self._parse_timer.isActive() else self.document.finish_parsing)()

    def reparse(self) -> None:
        """Parse the editor's text now (edits are parsed 150 ms after the last keystroke)."""
        self._parse_timer.stop()
        self.document.set_text(self.editor.toPlainText())

    # -- what one part says, shown by the others ---------------------------------------------------

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

    def _voices_changed(self) -> None:
        voices = self.library.list()
        self.cast_panel.set_voices([(v.id, v.name) for v in voices])
        self.document.set_voices(voices)

    def _show_script(self) -> None:
        script, project = self.document.script, self.document.project
        self.editor.set_warnings([InlineWarning(w.start, w.end, w.message) for w in script.warnings])
        self.warning_bar.show_warnings(script)
        self.cast_panel.set_speakers(script.speakers, project.cast, project.speaker_colors)
        colors = speaker_colors(project.speaker_colors, is_dark(self.palette()))
        self.editor.highlighter.set_places(project.speaker_colors)
        change = self.document.change
        self.player_bar.waveform.set_labels(script, colors, None if change is None else change.touched)
        self._update_enabled()

    def _settings_changed(self, settings: GenerationSettings) -> None:
        asked = take_settings(self.document.project.settings)
        self.models.settings_changed(settings, rendering=self.flow.busy)
        if take_settings(self.document.project.settings) != asked:  # what takes record changed: lines may be stale
            self.lines.show()

    def _busy_changed(self, busy: bool) -> None:
        if busy:
            self.status.start()
        else:
            self.models.render_ended()
        self._update_enabled()

    def _project_replaced(self) -> None:
        project = self.document.project
        pack_voices = self.actions_by_name["save_with_voices"]
        pack_voices.blockSignals(True)  # showing the project's choice is not making it
        pack_voices.setChecked(project.with_voices)
        pack_voices.blockSignals(False)
        self.editor.blockSignals(True)  # the document has parsed this text already
        self.editor.setPlainText(project.script)
        self.editor.blockSignals(False)
        self.editor.document().setModified(False)
        self.player.seek(0)  # now: a Play pressed before the passes below plays the project from its start
        self.showing.start((self.session.lay_out_if_due, self._show_script, self.lines.show,
                            self.player_bar.waveform.fit, heap.keep), now=False)

    def _update_enabled(self) -> None:
        a = self.actions_by_name
        busy, loading = self.flow.busy, self.model.busy
        ready = self.model.info is not None and bool(self.document.script.lines) and not busy and not loading
        for name in ("render_all", "render_stale", "render_line", "render_takes", "render_failing", "best_of_n",
                     "retake_until_pass"):
            a[name].setEnabled(ready)
        a["stop_render"].setEnabled(busy)
        a["cancel_load"].setEnabled(loading)
        a["export"].setEnabled(bool(self.document.project.lines))
        for name in ("play_pause", "play_from_cursor", "loop_line", "player_play_pause"):
            a[name].setEnabled(self.player.available)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        answer = self.projects.confirm_discard("closing")  # settles the editor's text first
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
        self.space.stop()
        super().closeEvent(event)
