"""The voice library panel: search, the list of voices, the buttons that act on them (new voice by browsing or
recording, add or remove a clip, rename, delete with undo, export/import `.s2voice`, fine-tune), and the selected
voice's details (`VoiceDetails`: clips, checks, preview).

The panel is the view: it lists the voices, asks the person the small questions (a name, a file, which clip) and
shows what went wrong; the library's changes are the commands' (`ui.control.voices`), and a new voice or clip is
asked for by `new_voice.asking`. Files dragged over it light it up and go to the window's one drop router
(`ui.control.drops`). The clip jobs and the voice preview are the window's controllers."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QSettings, QSize, Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDragLeaveEvent, QDropEvent
from PySide6.QtWidgets import (QFileDialog, QHBoxLayout, QInputDialog, QLabel, QLineEdit, QListWidget,
                               QListWidgetItem, QMessageBox, QPushButton, QStyle, QToolButton, QVBoxLayout, QWidget)

from s2studio.errors import UserError
from s2studio.state.file_names import portable_name
from s2studio.state.voices import MAX_CLIPS, Voice
from s2studio.ui.colors import is_dark
from s2studio.ui.control.clips import ClipJobs
from s2studio.ui.control.drops import dropped_paths, is_audio, voice_files
from s2studio.ui.control.voices import VoiceCommands
from s2studio.ui.file_places import remember, start_in
from s2studio.ui.voices.new_voice.asking import NewVoiceAsking
from s2studio.ui.voices.voice_details import VoiceDetails
from s2studio.ui.voices.voice_icons import add_voice_icon, avatar

if TYPE_CHECKING:
    from s2studio.ui.control.preview import VoicePreview

DROP_HINT = "Drop to make a voice of these clips"
LIST_ROWS = 4
"""Voices the list always shows: the selected voice's details take only the height left below them."""


class VoicesPanel(QWidget):
    finetune_requested = Signal(str)
    """Voice id: the window opens the Fine-tune dialog (it knows the model folder)."""
    message = Signal(str)
    """A one-line notice for the status bar."""
    dropped = Signal(list)
    """Audio and `.s2voice` files dropped on the list (for the window's drop router)."""

    def __init__(self, commands: VoiceCommands, jobs: ClipJobs, preview: VoicePreview | None = None,
                 settings: QSettings | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("voicesPanel")
        self.setAccessibleName("Voice library")
        self.setAcceptDrops(True)
        self.commands = commands
        self.library = commands.library
        stop = jobs.stop_event
        self.destroyed.connect(lambda *_: stop.set())  # a transcript running when the window closes ends soon
        self.asking = NewVoiceAsking(self, commands, jobs, settings)
        commands.changed.connect(self._library_changed)
        commands.message.connect(self.message)
        commands.undo_offered.connect(self._offer_undo)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 4, 8)
        layout.setSpacing(6)
        title = QLabel("<b>Voices</b>")
        layout.addWidget(title)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search voices…")
        self.search.setAccessibleName("Search voices")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self.refresh)
        layout.addWidget(self.search)
        self.list = QListWidget()
        self.list.setAccessibleName("Voices")
        self.list.setIconSize(QSize(30, 30))
        self.list.setSpacing(3)
        self.list.currentItemChanged.connect(lambda *_: self._show_details())
        # four voices stay in view whatever the details below need (a voice's clip list scrolls instead)
        row_height = (max(self.list.iconSize().height(), 2 * self.fontMetrics().lineSpacing())
                      + 2 * self.list.spacing() + 4)
        self.list.setMinimumHeight(LIST_ROWS * row_height + 2 * self.list.frameWidth())
        layout.addWidget(self.list, 1)
        self.drop_hint = QLabel(DROP_HINT, self.list)
        self.drop_hint.setObjectName("dropHint")
        self.drop_hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.drop_hint.setWordWrap(True)
        self.drop_hint.setVisible(False)
        style = self.style()
        row = QHBoxLayout()
        self.add_button = self._tool("Add voice from a file", add_voice_icon(self.palette().text().color()),
                                     self.asking.browse)
        self.record_button = self._tool("Record a voice", None, self.asking.record, "●")
        self.import_button = self._tool("Import a .s2voice file",
                                        style.standardIcon(QStyle.StandardPixmap.SP_DialogOpenButton), self.import_file)
        self.export_button = self._tool("Export the selected voice",
                                        style.standardIcon(QStyle.StandardPixmap.SP_DialogSaveButton), self.export_file)
        self.add_clip_button = self._tool("Add a clip to the selected voice", None, self.add_clip, "+")
        self.remove_clip_button = self._tool("Remove a clip from the selected voice", None, self.remove_clip, "−")
        self.rename_button = self._tool("Rename the selected voice", None, self.rename, "✎")
        self.delete_button = self._tool("Delete the selected voice",
                                        style.standardIcon(QStyle.StandardPixmap.SP_TrashIcon), self.delete)
        self.finetune_button = self._tool("Fine-tune the selected voice…", None, self.fine_tune, "✦")
        for b in (self.add_button, self.record_button, self.import_button, self.export_button, self.add_clip_button,
                  self.remove_clip_button, self.rename_button, self.delete_button, self.finetune_button):
            row.addWidget(b)
        row.addStretch(1)
        layout.addLayout(row)
        self.undo_button = QPushButton("Undo delete")
        self.undo_button.setAccessibleName("Undo deleting the voice")
        self.undo_button.setVisible(False)
        self.undo_button.clicked.connect(commands.undo_delete)
        layout.addWidget(self.undo_button)
        self.details = VoiceDetails(self.library, preview)
        self.details.message.connect(self.message)
        layout.addWidget(self.details)
        self.refresh()

    def _tool(self, name: str, icon, slot, text: str = "") -> QToolButton:  # noqa: ANN001
        b = QToolButton()
        if icon is not None:
            b.setIcon(icon)
        if text:
            b.setText(text)
        b.setToolTip(name)
        b.setAccessibleName(name)
        b.setAutoRaise(True)
        b.clicked.connect(lambda: slot())
        return b

    # -- list ------------------------------------------------------------------------------------

    def refresh(self) -> None:
        selected = self.selected_id()
        needle = self.search.text().strip().casefold()
        self.list.clear()
        for voice in self.library.list():
            if needle and needle not in voice.name.casefold() and needle not in voice.notes.casefold():
                continue
            secs = sum(c.duration_s for c in voice.clips)
            item = QListWidgetItem(f"{voice.name}\n{len(voice.clips)} clip{'s' * (len(voice.clips) != 1)} · "
                                   f"{secs:.0f} s")
            item.setData(Qt.ItemDataRole.UserRole, voice.id)
            item.setIcon(avatar(voice.name, is_dark(self.palette())))
            item.setToolTip(voice.notes or voice.name)
            self.list.addItem(item)
            if voice.id == selected:
                self.list.setCurrentItem(item)
        has = self.list.currentItem() is not None
        for b in self._selection_buttons():
            b.setEnabled(has)
        self._show_details()

    def _selection_buttons(self) -> tuple[QWidget, ...]:
        return (self.export_button, self.add_clip_button, self.remove_clip_button, self.rename_button,
                self.delete_button, self.finetune_button)

    def selected_id(self) -> str | None:
        item = self.list.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item is not None else None

    def select(self, voice_id: str) -> None:
        for i in range(self.list.count()):
            if self.list.item(i).data(Qt.ItemDataRole.UserRole) == voice_id:
                self.list.setCurrentRow(i)

    def _show_details(self) -> None:
        vid = self.selected_id()
        for b in self._selection_buttons():
            b.setEnabled(vid is not None)
        if vid is None:
            self.details.show_voice(None)
            return
        try:
            voice = self.library.get(vid)
        except UserError as exc:
            self.details.show_voice(None, str(exc))
            return
        self.remove_clip_button.setEnabled(len(voice.clips) > 1)  # a voice keeps at least one clip
        self.details.show_voice(voice)

    def _library_changed(self, voice_id: str) -> None:
        self.refresh()
        if voice_id:
            self.select(voice_id)

    # -- commands --------------------------------------------------------------------------------

    def add_clip(self, clip: Path | None = None, transcript: str = "") -> Voice | None:
        """One more reference clip for the selected voice (chosen with a file dialog when not given)."""
        vid = self.selected_id()
        if vid is None:
            return None
        voice = self.library.get(vid)
        if len(voice.clips) >= MAX_CLIPS:
            self.message.emit(f"“{voice.name}” has {MAX_CLIPS} clips already; a voice takes at most {MAX_CLIPS}.")
            return None
        return self.asking.add_clip(voice, clip, transcript)

    def remove_clip(self) -> Voice | None:
        """Pick one of the selected voice's clips and remove it (the voice keeps at least one)."""
        vid = self.selected_id()
        if vid is None:
            return None
        voice = self.library.get(vid)
        labels = [f"Clip {c.id.lstrip('c')} · {c.duration_s:.1f} s · “{c.transcript[:50]}”" for c in voice.clips]
        label, ok = QInputDialog.getItem(self, "Remove clip", f"Remove which clip of “{voice.name}”?", labels,
                                         0, False)
        if not ok:
            return None
        clip = voice.clips[labels.index(label)]
        try:
            return self.commands.remove_clip(vid, clip.id)
        except UserError as exc:
            QMessageBox.warning(self, "Remove clip", str(exc))
            return None

    def rename(self) -> None:
        vid = self.selected_id()
        if vid is None:
            return
        voice = self.library.get(vid)
        name, ok = QInputDialog.getText(self, "Rename voice", "New name:", text=voice.name)
        if ok and name.strip():
            try:
                self.commands.rename(vid, name)
            except UserError as exc:
                QMessageBox.warning(self, "Rename voice", str(exc))

    def delete(self) -> None:
        """Delete at once (no question); Undo brings it back with the same id."""
        vid = self.selected_id()
        if vid is None:
            return
        try:
            self.commands.delete(vid)
        except UserError as exc:
            QMessageBox.warning(self, "Delete voice", str(exc))

    def _offer_undo(self, name: str) -> None:
        if name:
            self.undo_button.setText(f"Undo delete of “{name}”")
        self.undo_button.setVisible(bool(name))

    def fine_tune(self) -> None:
        vid = self.selected_id()
        if vid is not None:
            self.finetune_requested.emit(vid)

    def export_file(self) -> None:
        vid = self.selected_id()
        if vid is None:
            return
        voice = self.library.get(vid)
        suggested = portable_name(voice.name, ".s2voice", fallback="voice")  # a voice's name may be "CON" or hold ":"
        name, _ = QFileDialog.getSaveFileName(self, "Export voice", start_in("voice", suggested),
                                              "S2 voice (*.s2voice)")
        if name:
            remember("voice", Path(name))
            try:
                self.commands.export(vid, Path(name))
            except UserError as exc:
                QMessageBox.warning(self, "Export voice", str(exc))

    def import_file(self) -> None:
        name, _ = QFileDialog.getOpenFileName(self, "Import voice", start_in("voice"), "S2 voice (*.s2voice)")
        if name:
            remember("voice", Path(name))
            self.import_voice(Path(name))

    def import_voice(self, path: Path) -> None:
        """Import one `.s2voice` file and select it; a refusal is one warning naming what is wrong."""
        try:
            self.commands.import_file(path)
        except UserError as exc:
            QMessageBox.warning(self, "Import voice", str(exc))

    # -- drops -----------------------------------------------------------------------------------

    def _highlight(self, on: bool, count: int = 0) -> None:
        self.setProperty("dropTarget", on)
        self.list.setStyleSheet("QListWidget { border: 2px dashed palette(highlight); "
                                "background: palette(alternate-base); }" if on else "")
        self.drop_hint.setText(DROP_HINT if count != 1 else "Drop to make a voice of this clip")
        self.drop_hint.setGeometry(self.list.viewport().rect().adjusted(12, 12, -12, -12))
        self.drop_hint.setVisible(on)

    @property
    def highlighted(self) -> bool:
        return bool(self.property("dropTarget"))

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt override
        paths = voice_files(dropped_paths(event.mimeData()))
        if paths:
            event.acceptProposedAction()
            self._highlight(True, len([p for p in paths if is_audio(p)]))
        else:
            event.ignore()  # a project file goes on to the window

    def dragLeaveEvent(self, event: QDragLeaveEvent) -> None:  # noqa: N802 - Qt override
        self._highlight(False)

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt override
        self._highlight(False)
        paths = voice_files(dropped_paths(event.mimeData()))
        if not paths:
            event.ignore()
            return
        event.acceptProposedAction()
        self.dropped.emit(paths)
