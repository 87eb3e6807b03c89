"""What each action of the window does (`ui.actions.SPECS` names them): a method of the part that does it, found
here by the action's name. The window connects them once it has built its parts.

`WindowParts` says which parts those are; `MainWindow` has them (it imports this module, so naming it here
would make an import circle)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Protocol

from s2studio.ui.desktop import reveal_folder
from s2studio.ui.dialogs.about import show_about
from s2studio.ui.keys import run_edit

if TYPE_CHECKING:
    from PySide6.QtGui import QAction
    from PySide6.QtWidgets import QWidget

    from s2studio.ui.actions import ShortcutsDialog
    from s2studio.ui.check_commands import CheckCommands
    from s2studio.ui.control.context import StudioContext
    from s2studio.ui.control.model import ModelController
    from s2studio.ui.control.player import Player
    from s2studio.ui.control.render import RenderFlow
    from s2studio.ui.dialogs.model_commands import ModelCommands
    from s2studio.ui.dialogs.project_commands import ProjectCommands
    from s2studio.ui.inspector.inspector import Inspector
    from s2studio.ui.player.player_bar import PlayerBar
    from s2studio.ui.script.editor import ScriptEditor
    from s2studio.ui.script.find_bar import FindBar
    from s2studio.ui.voices.voices_panel import VoicesPanel
    from s2studio.ui.window.render_commands import RenderCommands
    from s2studio.ui.window.transport import Transport

SEEK_STEP_S = 5.0
"""What the player's back and forward keys step by."""


class WindowParts(Protocol):
    """The parts of the window that the actions' slots belong to."""

    ctx: StudioContext
    actions_by_name: dict[str, QAction]
    editor: ScriptEditor
    find_bar: FindBar
    inspector: Inspector
    voices: VoicesPanel
    player: Player
    player_bar: PlayerBar
    transport: Transport
    flow: RenderFlow
    model: ModelController
    models: ModelCommands
    projects: ProjectCommands
    renders: RenderCommands
    check_commands: CheckCommands
    shortcuts_dialog: ShortcutsDialog

    def window(self) -> QWidget:
        """The window itself, as the parent of the dialogs the slots open (`QWidget.window`)."""

    def close(self) -> bool:
        """Close the window (Quit)."""


def action_slots(w: WindowParts) -> dict[str, Callable[..., object]]:
    """The slot of each action of `w`, the window, once its parts are built."""
    editor, find, transport, waveform = w.editor, w.find_bar, w.transport, w.player_bar.waveform
    takes, voices, projects, renders, checks = w.inspector.takes, w.voices, w.projects, w.renders, w.check_commands

    def about() -> None:
        show_about(w.window(), w.model.info.name if w.model.info else None)

    return {
        # File
        "new_project": projects.new, "open_project": projects.open, "save_project": projects.save,
        "save_project_as": projects.save_as, "save_with_voices": projects.save_with_voices,
        "export": renders.export, "choose_model": w.models.open_model_page, "quit": w.close,
        # Edit
        "undo": editor.undo, "redo": editor.redo, "cut": partial(run_edit, "cut", editor),
        "copy": partial(run_edit, "copy", editor), "paste": partial(run_edit, "paste", editor),
        "select_all": partial(run_edit, "selectAll", editor),
        "find": find.open_find, "replace": partial(find.open_find, replace=True), "find_next": find.find_next,
        "find_previous": find.find_previous, "insert_tag": w.inspector.show_tags, "find_voice": voices.search.setFocus,
        "settings": w.inspector.show_settings,
        # Render
        "render_all": renders.all, "render_stale": renders.stale, "render_line": renders.cursor_line,
        "render_takes": renders.render_takes, "stop_render": w.flow.cancel, "cancel_load": w.model.cancel,
        "render_failing": checks.render_failing, "best_of_n": checks.best_of_n,
        "retake_until_pass": checks.retake_until_pass, "next_failed": checks.next_failed,
        "only_failed": checks.show_only_failed,
        # Playback and the player's keys
        "play_pause": transport.play_pause, "play_from_cursor": transport.play_from_cursor,
        "loop_line": transport.set_looping, "follow_playhead": waveform.set_follow,
        "zoom_in": waveform.zoom_in, "zoom_out": waveform.zoom_out, "zoom_fit": waveform.fit,
        "player_play_pause": transport.play_pause, "player_start": partial(w.player.seek, 0),
        "player_end": transport.to_end, "player_back": partial(transport.step, -SEEK_STEP_S),
        "player_forward": partial(transport.step, SEEK_STEP_S), "player_zoom_in": waveform.zoom_in,
        "player_zoom_out": waveform.zoom_out, "player_fit": waveform.fit,
        "player_loop": w.actions_by_name["loop_line"].toggle,
        # Takes
        "next_take": partial(takes.step, 1), "previous_take": partial(takes.step, -1), "ab_take": takes.toggle_ab,
        # Voices
        "new_voice": voices.asking.browse, "record_voice": voices.asking.record, "import_voice": voices.import_file,
        "export_voice": voices.export_file, "play_voice_clip": voices.details.play,
        # Help
        "shortcuts": w.shortcuts_dialog.present, "about": about,
        "open_log_folder": partial(reveal_folder, w.ctx.data_dir / "logs", "The log", w.window()),
    }
