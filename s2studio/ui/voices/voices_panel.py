"""The voice library panel: search, new voice (drop, browse or record), clips with transcripts and
checks, a preview of the voice, rename, delete with undo, export/import `.s2voice`.

Files dragged over the panel light it up (audio makes a new voice, a `.s2voice` is imported). The panel owns
the worker that prepares and transcribes clips (`ClipJobs`, shared by its dialogs, so a loaded speech
model stays loaded) and the voice preview (`VoicePreview`, on the engine host when there is one)."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QPointF, QSettings, QSize, Qt, QTimer, Signal
from PySide6.QtGui import (QColor, QDragEnterEvent, QDragLeaveEvent, QDropEvent, QFont, QIcon, QPainter, QPainterPath,
                           QPen, QPixmap)
from PySide6.QtWidgets import (QDialog, QFileDialog, QHBoxLayout, QInputDialog, QLabel, QLineEdit, QListWidget,
                               QListWidgetItem, QMessageBox, QPushButton, QStyle, QToolButton, QVBoxLayout, QWidget)

from s2studio.errors import UserError
from s2studio.state.file_names import portable_name
from s2studio.state.voices import MAX_CLIPS, Voice, VoiceLibrary
from s2studio.ui.colors import is_dark, speaker_color
from s2studio.ui.file_places import remember, start_in
from s2studio.ui.voices.clip_card import ClipDraft
from s2studio.ui.voices.clip_jobs import ClipJobs
from s2studio.ui.voices.new_voice_dialog import NewVoiceDialog
from s2studio.ui.voices.transcripts_box import asr_settings
from s2studio.ui.voices.voice_details import VoiceDetails, play_file

logger = logging.getLogger(__name__)

AUDIO_FILTER = "Audio (*.wav *.flac *.ogg *.mp3 *.aiff *.aif);;All files (*)"
AUDIO_SUFFIXES = frozenset({".wav", ".flac", ".ogg", ".mp3", ".aiff", ".aif"})
DROP_HINT = "Drop to make a voice of these clips"
LIST_ROWS = 4
"""Voices the list always shows: the selected voice's details take only the height left below them."""


def add_voice_icon(color: QColor, size: int = 32) -> QIcon:
    """"Add voice from a file": a sound wave with a plus, drawn so it reads at 16–32 px on any theme."""
    icon = QIcon()
    for px in (16, 24, size):
        pix = QPixmap(px, px)
        pix.fill(Qt.GlobalColor.transparent)
        p = QPainter(pix)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.scale(px / 32, px / 32)
        p.setPen(QPen(color, 2.6, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap))
        for x, h in ((4, 6), (9, 14), (14, 22), (19, 12), (24, 7)):
            p.drawLine(QPointF(x, 16 - h / 2), QPointF(x, 16 + h / 2))
        plus = QPainterPath()
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QColor("#2f9e44"))
        p.drawEllipse(QPointF(25, 25), 6.5, 6.5)
        p.setPen(QPen(QColor("#ffffff"), 2.2, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap))
        plus.moveTo(25, 21.5)
        plus.lineTo(25, 28.5)
        plus.moveTo(21.5, 25)
        plus.lineTo(28.5, 25)
        p.drawPath(plus)
        p.end()
        icon.addPixmap(pix)
    return icon


def avatar(name: str, dark: bool, size: int = 60) -> QIcon:
    """A round badge with the voice's initials, in a colour that stays the same for the name."""
    pix = QPixmap(size, size)
    pix.fill(Qt.GlobalColor.transparent)
    p = QPainter(pix)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    color = speaker_color(name, dark)
    p.setBrush(color)
    p.setPen(Qt.PenStyle.NoPen)
    p.drawEllipse(0, 0, size, size)
    font = QFont()
    font.setPixelSize(int(size * 0.42))
    font.setBold(True)
    p.setFont(font)
    p.setPen(QColor("#ffffff") if color.lightness() < 150 else QColor("#1b1b1b"))
    initials = "".join(w[0] for w in name.split()[:2] if w[:1].isalnum()).upper() or "?"
    p.drawText(pix.rect(), Qt.AlignmentFlag.AlignCenter, initials)
    p.end()
    return QIcon(pix)


class VoicesPanel(QWidget):
    voices_changed = Signal()
    finetune_requested = Signal(str)
    """Voice id: the window opens the Fine-tune dialog (it knows the model folder)."""
    """The library changed (created, renamed, deleted, imported)."""
    message = Signal(str)
    """A one-line notice for the status bar."""

    def __init__(self, library: VoiceLibrary, parent: QWidget | None = None, settings: QSettings | None = None,
                 host=None) -> None:  # noqa: ANN001 - an EngineHost (None: no preview)
        super().__init__(parent)
        self.setObjectName("voicesPanel")
        self.setAccessibleName("Voice library")
        self.setAcceptDrops(True)
        self.library = library
        self.settings = settings
        self.jobs = ClipJobs(self)
        stop = self.jobs.stop_event
        self.destroyed.connect(lambda *_: stop.set())  # a transcript running when the window closes ends soon
        self.preview = None
        if host is not None:
            from s2studio.ui.voices.voice_preview import VoicePreview  # noqa: PLC0415

            self.preview = VoicePreview(host, library, self)
            self.preview.message.connect(self.message)
            self.preview.ready.connect(self._preview_ready)
        self._undo_file: Path | None = None
        # Made at the first delete; removed when the window closes (`forget_undo`) or at exit.
        self._undo_dir: tempfile.TemporaryDirectory[str] | None = None
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
                                     self.browse)
        self.record_button = self._tool("Record a voice", None, self.record, "●")
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
        self.undo_button.clicked.connect(self.undo_delete)
        layout.addWidget(self.undo_button)
        self.details = VoiceDetails(library)
        self.details.message.connect(self.message)
        self.details.preview_button.setVisible(self.preview is not None)
        self.details.preview_requested.connect(self.preview_voice)
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

    def voices(self) -> list[Voice]:
        return self.library.list()

    def refresh(self) -> None:
        selected = self.selected_id()
        needle = self.search.text().strip().casefold()
        self.list.clear()
        for voice in self.voices():
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

    # -- commands --------------------------------------------------------------------------------

    def record(self) -> None:
        """Record a clip from the microphone, then name the voice made of it."""
        from s2studio.ui.voices.record_dialog import RecordDialog  # noqa: PLC0415 - opened rarely

        dialog = RecordDialog(self, [v.name for v in self.voices()])
        accepted = dialog.exec()
        take = dialog.take() if accepted else None
        transcript, name = dialog.transcript.toPlainText().strip(), dialog.suggested_name
        dialog.deleteLater()  # modal dialogs are deleted explicitly: a parented, unreferenced one crashed PySide at exit
        if take is not None:
            self.new_voice_from([take], transcript, name=name)

    def browse(self) -> None:
        names, _ = QFileDialog.getOpenFileNames(self, f"Choose 1–{MAX_CLIPS} reference clips of one voice",
                                                start_in("clips"), AUDIO_FILTER)
        if names:
            remember("clips", Path(names[0]))
            self.new_voice_from([Path(n) for n in names])

    def new_voice_from(self, clips: Path | Sequence[Path | ClipDraft], transcript: str = "",
                       name: str = "") -> Voice | None:
        """Ask for the name and each clip's transcript (filled in automatically when there is none), then
        create one voice of those clips (the first MAX_CLIPS of them). Returns it (None when cancelled)."""
        clips = [clips] if isinstance(clips, Path) else list(clips)
        dialog = self._dialog(clips[:MAX_CLIPS], transcript, name=name)
        if len(clips) > MAX_CLIPS:
            dialog.reason.setText(f"⚠ A voice takes 1–{MAX_CLIPS} clips: only the first {MAX_CLIPS} of the "
                                  f"{len(clips)} files are used.")
        voice = self._until_accepted(dialog, lambda: self.library.create(dialog.name.text(), dialog.pairs(),
                                                                         consent=dialog.consent.text()))
        if voice is not None:
            self._changed(voice, f"Voice “{voice.name}” created.")
        return voice

    @staticmethod
    def _until_accepted(dialog: NewVoiceDialog, apply: Callable[[], Voice]) -> Voice | None:
        """Run the dialog until `apply` succeeds or the person cancels: a refusal is shown in the dialog, which
        stays open with everything typed in it. The dialog is released (its jobs, its players) either way."""
        try:
            while dialog.exec() == QDialog.DialogCode.Accepted:
                try:
                    return apply()
                except UserError as exc:
                    dialog.reason.setText(f"⚠ {exc}")
            return None
        finally:
            dialog.release()
            dialog.deleteLater()

    def _dialog(self, clips: list, transcript: str, add_to: str | None = None, name: str = "") -> NewVoiceDialog:
        return NewVoiceDialog(clips, transcript, self, add_to=add_to, asr=asr_settings(self.settings), jobs=self.jobs,
                              name=name)

    def add_clip(self, clip: Path | None = None, transcript: str = "") -> Voice | None:
        """One more reference clip for the selected voice (chosen with a file dialog when not given)."""
        vid = self.selected_id()
        if vid is None:
            return None
        voice = self.library.get(vid)
        if len(voice.clips) >= MAX_CLIPS:
            self.message.emit(f"“{voice.name}” has {MAX_CLIPS} clips already; a voice takes at most {MAX_CLIPS}.")
            return None
        if clip is None:
            name, _ = QFileDialog.getOpenFileName(self, f"Add a clip to “{voice.name}”", start_in("clips"),
                                                  AUDIO_FILTER)
            if not name:
                return None
            clip = Path(name)
            remember("clips", clip)
        dialog = self._dialog([clip], transcript, add_to=voice.name)

        def add() -> Voice:
            pairs = dialog.pairs()
            if not pairs:
                raise UserError("Add a clip first.")
            return self.library.add_clip(vid, *pairs[0])

        added = self._until_accepted(dialog, add)
        if added is not None:
            self._changed(added, f"Clip added to “{added.name}”.")
        return added

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
            voice = self.library.remove_clip(vid, clip.id)
        except UserError as exc:
            QMessageBox.warning(self, "Remove clip", str(exc))
            return None
        self._changed(voice, f"Clip removed from “{voice.name}”.")
        return voice

    def _changed(self, voice: Voice, message: str) -> None:
        self.refresh()
        self.select(voice.id)
        self.voices_changed.emit()
        self.message.emit(message)

    def rename(self) -> None:
        vid = self.selected_id()
        if vid is None:
            return
        voice = self.library.get(vid)
        name, ok = QInputDialog.getText(self, "Rename voice", "New name:", text=voice.name)
        if ok and name.strip():
            try:
                self.library.rename(vid, name)
            except UserError as exc:
                QMessageBox.warning(self, "Rename voice", str(exc))
                return
            self.refresh()
            self.voices_changed.emit()

    def delete(self) -> None:
        """Delete at once (no question), keeping a copy so that Undo brings it back with the same id."""
        vid = self.selected_id()
        if vid is None:
            return
        voice = self.library.get(vid)
        if self._undo_file is not None:  # one level of undo: the copy before it goes
            self._undo_file.unlink(missing_ok=True)
            self._undo_file = None
        try:
            if self._undo_dir is None:
                self._undo_dir = tempfile.TemporaryDirectory(prefix="s2studio-undo-")
            self._undo_file = self.library.export(vid, Path(self._undo_dir.name) / f"{vid}.s2voice")
        except (UserError, OSError) as exc:  # no undo copy, no delete: the voice stays as it was
            self.undo_button.setVisible(False)
            reason = exc if isinstance(exc, UserError) else (
                f"The temp folder cannot hold the undo copy ({exc.strerror or exc}); free some space there.")
            QMessageBox.warning(self, "Delete voice", f"{reason}\n“{voice.name}” was not deleted.")
            return
        self.library.delete(vid)
        self.undo_button.setText(f"Undo delete of “{voice.name}”")
        self.undo_button.setVisible(True)
        self.refresh()
        self.voices_changed.emit()
        self.message.emit(f"Voice “{voice.name}” deleted.")

    def forget_undo(self) -> None:
        """Drop the deleted voice's copy and its folder: nothing of the studio stays in the temp folder."""
        self._undo_file = None
        self.undo_button.setVisible(False)
        if self._undo_dir is not None:
            self._undo_dir.cleanup()
            self._undo_dir = None

    def undo_delete(self) -> None:
        if self._undo_file is None:
            return
        voice = self.library.import_voice(self._undo_file)
        self._undo_file.unlink(missing_ok=True)
        self._undo_file = None
        self.undo_button.setVisible(False)
        self.refresh()
        self.select(voice.id)
        self.voices_changed.emit()
        self.message.emit(f"Voice “{voice.name}” restored.")

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
                path = self.library.export(vid, Path(name))
            except UserError as exc:
                QMessageBox.warning(self, "Export voice", str(exc))
                return
            self.message.emit(f"Exported to {path}.")

    def import_file(self) -> None:
        name, _ = QFileDialog.getOpenFileName(self, "Import voice", start_in("voice"), "S2 voice (*.s2voice)")
        if name:
            remember("voice", Path(name))
            self._import(Path(name))

    def _import(self, path: Path) -> None:
        """Import one `.s2voice` file and select it; a refusal is one warning naming what is wrong."""
        try:
            voice = self.library.import_voice(path)
        except UserError as exc:
            QMessageBox.warning(self, "Import voice", str(exc))
            return
        self.refresh()
        self.select(voice.id)
        self.voices_changed.emit()

    def play_clip(self) -> None:
        """Play the clip selected in the details (the first one until another is chosen)."""
        self.details.play()

    # -- preview ---------------------------------------------------------------------------------

    def preview_voice(self) -> None:
        """Hear the selected voice say the test sentence (rendered once per voice and model, then cached)."""
        vid = self.selected_id()
        if vid is None or self.preview is None:
            return
        try:
            voice = self.library.get(vid)
        except UserError as exc:
            self.message.emit(str(exc))
            return
        self.preview.preview(voice)

    def _preview_ready(self, voice_id: str, path: Path) -> None:
        reason = play_file(path)
        if reason:
            self.message.emit(reason)
        elif voice_id == self.selected_id():
            self.message.emit("Playing the preview.")

    # -- drops -----------------------------------------------------------------------------------

    @staticmethod
    def droppable(paths: Sequence[Path]) -> list[Path]:
        """What a drop on the panel takes: audio files and .s2voice files."""
        return [p for p in paths if p.suffix.lower() in AUDIO_SUFFIXES or p.suffix == ".s2voice"]

    @staticmethod
    def _paths(event: QDragEnterEvent | QDropEvent) -> list[Path]:
        return [Path(u.toLocalFile()) for u in event.mimeData().urls() if u.isLocalFile()]

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
        paths = self.droppable(self._paths(event))
        if paths:
            event.acceptProposedAction()
            self._highlight(True, len([p for p in paths if p.suffix != ".s2voice"]))
        else:
            event.ignore()  # a project file goes on to the window

    def dragLeaveEvent(self, event: QDragLeaveEvent) -> None:  # noqa: N802 - Qt override
        self._highlight(False)

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt override
        self._highlight(False)
        paths = self.droppable(self._paths(event))
        if not paths:
            event.ignore()
            return
        event.acceptProposedAction()
        QTimer.singleShot(0, lambda: self.open_dropped(paths))

    def open_dropped(self, paths: Sequence[Path]) -> None:
        """Audio files together make one voice; each .s2voice is imported."""
        audio = [p for p in paths if p.suffix.lower() in AUDIO_SUFFIXES]
        if audio:
            self.new_voice_from(audio)
        for path in paths:
            if path.suffix == ".s2voice":
                self._import(path)
