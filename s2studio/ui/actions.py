"""Every command of the window as a QAction with a shortcut and an accessible name, and the
Help ▸ Shortcuts window that lists them (generated from the same table, so it cannot go stale)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QHeaderView, QStyle, QTableWidget, QTableWidgetItem,
                               QVBoxLayout, QWidget)


@dataclass(frozen=True)
class ActionSpec:
    name: str
    text: str
    shortcut: str
    menu: str
    icon: QStyle.StandardPixmap | None = None
    tip: str = ""
    scope: Literal["window", "keys", "player"] = "window"
    """window: anywhere in the window (and in its menu); keys: anywhere in the window but in no menu (Space:
    text fields, buttons and boxes keep it, `keys.SpaceForPlayback`); player: while the player has the focus
    (the keys a text field needs for itself: Home, End, arrows), listed under "Player"."""
    checkable: bool = False
    label: str = ""
    """A short text for a button without an icon (the player's view buttons)."""


SP = QStyle.StandardPixmap
SPECS: tuple[ActionSpec, ...] = (
    ActionSpec("new_project", "&New Project", "Ctrl+N", "File", SP.SP_FileIcon),
    ActionSpec("open_project", "&Open Project…", "Ctrl+O", "File", SP.SP_DialogOpenButton),
    ActionSpec("save_project", "&Save Project", "Ctrl+S", "File", SP.SP_DialogSaveButton),
    ActionSpec("save_project_as", "Save Project &As…", "Ctrl+Shift+S", "File"),
    ActionSpec("save_with_voices", "Save with &Voices", "Ctrl+Alt+S", "File", None,
               "Pack the cast's voices into the project, so that it opens on another computer", checkable=True),
    ActionSpec("export", "&Export Audio…", "Ctrl+E", "File", SP.SP_DriveHDIcon, "Export the script as audio files"),
    ActionSpec("choose_model", "&Model…", "Ctrl+Shift+M", "File", SP.SP_ComputerIcon),
    ActionSpec("cancel_load", "&Cancel Model Loading", "Ctrl+Shift+.", "File", SP.SP_DialogCancelButton,
               "Stop loading the model"),
    ActionSpec("quit", "&Quit", "Ctrl+Q", "File"),
    ActionSpec("undo", "&Undo", "Ctrl+Z", "Edit"),
    ActionSpec("redo", "&Redo", "Ctrl+Shift+Z", "Edit"),
    ActionSpec("cut", "Cu&t", "Ctrl+X", "Edit"),
    ActionSpec("copy", "&Copy", "Ctrl+C", "Edit"),
    ActionSpec("paste", "&Paste", "Ctrl+V", "Edit"),
    ActionSpec("select_all", "Select &All", "Ctrl+A", "Edit"),
    ActionSpec("find", "&Find…", "Ctrl+F", "Edit", None, "Find text in the script"),
    ActionSpec("replace", "R&eplace…", "Ctrl+H", "Edit", None, "Find and replace text in the script"),
    ActionSpec("find_next", "Find &Next", "F3", "Edit"),
    ActionSpec("find_previous", "Find Pre&vious", "Shift+F3", "Edit"),
    ActionSpec("insert_tag", "Insert &Tag…", "Ctrl+T", "Edit", None, "Move to the tag palette"),
    ActionSpec("find_voice", "Find &Voice", "Ctrl+Alt+F", "Edit", None, "Search the voice library"),
    ActionSpec("render_all", "Render &All", "Ctrl+R", "Render", SP.SP_CommandLink, "Render every line"),
    ActionSpec("render_stale", "Render &Stale Lines", "Ctrl+Shift+R", "Render", SP.SP_BrowserReload,
               "Render lines that are new or changed"),
    ActionSpec("render_line", "Render &Line", "Ctrl+Return", "Render", SP.SP_ArrowRight,
               "Render the line under the cursor"),
    ActionSpec("render_takes", "Render &Takes…", "Ctrl+Shift+Return", "Render", None,
               "Render several takes of the selected lines at once"),
    ActionSpec("render_failing", "Render &Failing Lines Again", "Ctrl+Alt+R", "Render", None,
               "Render again every line whose picked take failed a check"),
    ActionSpec("best_of_n", "&Best of N Takes…", "Ctrl+Alt+B", "Render", None,
               "Render the selected lines several times and keep the take the checks rank best"),
    ActionSpec("retake_until_pass", "Retake &Until It Passes…", "Ctrl+Alt+U", "Render", None,
               "Render the selected lines again until a take passes the checks (at most a number of times)"),
    ActionSpec("next_failed", "Go to Next Failed &Line", "F8", "Render", None,
               "Move to the next line whose picked take failed a check"),
    ActionSpec("only_failed", "Show &Only Failed Lines", "Ctrl+Alt+O", "Render", None,
               "Show only the lines whose picked take failed a check in the script", checkable=True),
    ActionSpec("stop_render", "S&top Rendering", "Ctrl+.", "Render", SP.SP_BrowserStop),
    ActionSpec("play_pause", "&Play / Pause", "Ctrl+Space", "Playback", SP.SP_MediaPlay),
    ActionSpec("play_from_cursor", "Play from &Cursor Line", "Ctrl+Shift+Space", "Playback", SP.SP_MediaSeekForward),
    ActionSpec("loop_line", "&Loop Line", "Ctrl+L", "Playback", None, "Play the selected line round and round",
               checkable=True, label="⟳ Loop"),
    ActionSpec("follow_playhead", "&Follow Playhead", "Ctrl+Shift+F", "Playback", None,
               "Scroll the timeline with the playhead", checkable=True, label="Follow"),
    ActionSpec("zoom_in", "Zoom &In", "Ctrl+=", "Playback", None, "Zoom into the timeline", label="+"),
    ActionSpec("zoom_out", "Zoom &Out", "Ctrl+-", "Playback", None, "Zoom out of the timeline", label="−"),
    ActionSpec("zoom_fit", "&Fit Timeline", "Ctrl+0", "Playback", None, "Show the whole timeline", label="Fit"),
    ActionSpec("player_play_pause", "Play / Pause", "Space", "Playback", scope="keys",
               tip="Play or pause (anywhere but in a text field or on a button)"),
    ActionSpec("player_start", "Go to Start", "Home", "Player", scope="player"),
    ActionSpec("player_end", "Go to End", "End", "Player", scope="player"),
    ActionSpec("player_back", "Back 5 s", "Left", "Player", scope="player"),
    ActionSpec("player_forward", "Forward 5 s", "Right", "Player", scope="player"),
    ActionSpec("player_zoom_in", "Zoom In", "+", "Player", scope="player"),
    ActionSpec("player_zoom_out", "Zoom Out", "-", "Player", scope="player"),
    ActionSpec("player_fit", "Fit Timeline", "0", "Player", scope="player"),
    ActionSpec("player_loop", "Loop Line", "L", "Player", scope="player"),
    ActionSpec("next_take", "&Next Take", "Alt+Right", "Playback", SP.SP_ArrowRight),
    ActionSpec("previous_take", "P&revious Take", "Alt+Left", "Playback", SP.SP_ArrowLeft),
    ActionSpec("ab_take", "&A/B Takes", "Ctrl+B", "Playback"),
    ActionSpec("new_voice", "&New Voice from File…", "Ctrl+Shift+N", "Voices", SP.SP_FileDialogNewFolder),
    ActionSpec("record_voice", "&Record Voice…", "Ctrl+Shift+E", "Voices"),
    ActionSpec("import_voice", "&Import Voice…", "Ctrl+Shift+I", "Voices"),
    ActionSpec("export_voice", "E&xport Voice…", "Ctrl+Shift+X", "Voices"),
    ActionSpec("play_voice_clip", "&Play Voice Clip", "Ctrl+Shift+P", "Voices", SP.SP_MediaPlay,
               "Play the clip selected in the voice details"),
    ActionSpec("settings", "Generation &Settings", "Ctrl+,", "View"),
    ActionSpec("shortcuts", "&Keyboard Shortcuts", "F1", "Help"),
    ActionSpec("open_log_folder", "Open &Log Folder", "Ctrl+Shift+L", "Help", None,
               "Open the folder of the studio's log (to attach it to a bug report)"),
    ActionSpec("about", "&About S2 Studio", "Ctrl+Shift+F1", "Help"),
)


def build_actions(parent: QWidget) -> dict[str, QAction]:
    actions: dict[str, QAction] = {}
    style = parent.style()
    for spec in SPECS:
        act = QAction(spec.text, parent)
        act.setObjectName(spec.name)
        act.setShortcut(QKeySequence(spec.shortcut))
        plain = spec.text.replace("&", "").rstrip("…")
        act.setToolTip(f"{spec.tip or plain} ({spec.shortcut})")
        act.setStatusTip(spec.tip or plain)
        act.setData(plain)  # the accessible name of its buttons
        if spec.icon is not None:
            act.setIcon(style.standardIcon(spec.icon))
        act.setCheckable(spec.checkable)
        if spec.label:
            act.setIconText(spec.label)
        if spec.scope == "player":
            act.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        actions[spec.name] = act
    return actions


def connect_actions(actions: dict[str, QAction], slots: dict[str, Callable[..., object]]) -> None:
    """Each action to what it does: a checkable one passes its state, the others call with no argument."""
    for name, slot in slots.items():
        if actions[name].isCheckable():
            actions[name].toggled.connect(slot)
        else:
            actions[name].triggered.connect(lambda _=False, s=slot: s())


class ShortcutsDialog(QDialog):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Keyboard Shortcuts")
        self.setObjectName("shortcutsDialog")
        self.resize(560, 640)
        table = QTableWidget(len(SPECS), 3, self)
        table.setAccessibleName("Keyboard shortcuts")
        table.setHorizontalHeaderLabels(["Menu", "Action", "Shortcut"])
        table.verticalHeader().hide()
        table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        for row, spec in enumerate(SPECS):
            seq = QKeySequence(spec.shortcut).toString(QKeySequence.SequenceFormat.NativeText)
            for col, text in enumerate((spec.menu, spec.text.replace("&", ""), seq)):
                table.setItem(row, col, QTableWidgetItem(text))
        header = table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        table.setWordWrap(False)
        table.setTextElideMode(Qt.TextElideMode.ElideNone)
        self.table = table
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(table)
        layout.addWidget(buttons)

    def present(self) -> None:
        """Show the list (it stays open beside the window) and bring it to the front."""
        self.show()
        self.raise_()
