"""The dialog that names a new voice (1–4 clips, a transcript each) or adds a clip to a voice, and prepares its
clips: each one's silence trimmed (found by the speech detector, the handles on its waveform moved by hand if
need be), a long recording split at its pauses, every clip transcribed automatically (marked "auto" until
edited), the loudness evened out, a bad clip removed, another added.

The work runs on the window's `ClipJobs` worker: the dialog never waits. A file is read once, when it is added
(a 30 s WAV takes milliseconds); what is stored is the kept part of that audio (`ClipDraft.clip_audio`), so the
file itself is never changed. Closing the dialog stops its jobs (a transcript between windows, a download
mid-file) and leaves the worker to the next dialog. Its parts: a `ClipCard` per `ClipDraft`, `CardPlayback`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QCoreApplication, Qt, QTimer
from PySide6.QtWidgets import (QCheckBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QHBoxLayout, QLabel,
                               QLineEdit, QPlainTextEdit, QProgressBar, QPushButton, QScrollArea, QVBoxLayout, QWidget)

from s2studio.audio.asr import AsrSettings, Transcript
from s2studio.audio.asr_models import asr_missing
from s2studio.audio.clip_prep import TARGET_LUFS, Span, cut
from s2studio.errors import UserError
from s2studio.state.clips import ClipAudio
from s2studio.state.voices import MAX_CLIPS
from s2studio.ui.file_places import AUDIO_FILTER, remember, start_in
from s2studio.ui.voices.new_voice.clip_card import ClipCard
from s2studio.ui.voices.new_voice.clip_draft import ClipDraft, Source, draft_of, source_name
from s2studio.ui.voices.new_voice.playback import CardPlayback
from s2studio.ui.control.clips import ClipJobs

RETRANSCRIBE_AFTER_MS = 700
"""A moved trim handle transcribes the clip again once the handle rests this long."""


def suggested_name(clip: Path | str) -> str:
    stem = Path(str(clip)).stem.replace("_", " ").replace("-", " ").strip().title()[:60]
    return stem or "New voice"


class NewVoiceDialog(QDialog):
    """Name a new voice made of 1–4 clips, or add a clip to an existing voice (`add_to`)."""

    def __init__(self, clips: Source | Sequence[Source], transcript: str = "", parent: QWidget | None = None,
                 add_to: str | None = None, asr: AsrSettings | None = None, jobs: ClipJobs | None = None,
                 name: str = "") -> None:
        super().__init__(parent)
        sources = list(clips) if isinstance(clips, (list, tuple)) else [clips]
        self.max_clips = 1 if add_to else MAX_CLIPS
        self.asr = asr or AsrSettings()
        self.asr_reason = asr_missing()
        self.jobs = jobs or ClipJobs(QCoreApplication.instance())
        self.cards: list[ClipCard] = []
        self._next_key = 0
        self.setWindowTitle(f"Add a clip to “{add_to}”" if add_to else "New voice")
        self.setObjectName("newVoiceDialog")
        self.setMinimumWidth(620)
        outer = QVBoxLayout(self)
        form = QFormLayout()
        first = sources[0] if sources else ""
        self.name = QLineEdit(name or suggested_name(first.name if isinstance(first, (ClipAudio, ClipDraft))
                                                     else first))
        self.name.setAccessibleName("Voice name")
        if add_to is None:
            form.addRow("Name", self.name)
        outer.addLayout(form)
        self.list_widget = QWidget()
        self.list_layout = QVBoxLayout(self.list_widget)
        self.list_layout.setContentsMargins(0, 0, 0, 0)
        self.list_layout.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.list_widget)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setMinimumHeight(250)
        outer.addWidget(scroll, 1)
        row = QHBoxLayout()
        self.add_button = QPushButton("+ Add a clip…")
        self.add_button.setAccessibleName("Add another clip")
        self.add_button.setAutoDefault(False)
        self.add_button.clicked.connect(self.browse)
        row.addWidget(self.add_button)
        row.addStretch(1)
        self.normalize = QCheckBox(f"Even out the loudness ({TARGET_LUFS:.0f} LUFS)")
        self.normalize.setChecked(True)
        self.normalize.setAccessibleName("Normalise the loudness of the clips")
        row.addWidget(self.normalize)
        outer.addLayout(row)
        form2 = QFormLayout()
        self.consent = QLineEdit()
        self.consent.setPlaceholderText("Whose voice is this, and did they agree? (optional)")
        self.consent.setAccessibleName("Consent and source note")
        if add_to is None:
            form2.addRow("Source", self.consent)
        outer.addLayout(form2)
        busy = QHBoxLayout()
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setAccessibleName("Transcription progress")
        self.progress.setMaximumHeight(12)
        self.progress.setTextVisible(False)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setAccessibleName("Transcription status")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setAccessibleName("Stop transcribing")
        self.stop_button.setAutoDefault(False)
        self.stop_button.clicked.connect(self.stop_jobs)
        busy.addWidget(self.status, 1)
        busy.addWidget(self.progress)
        busy.addWidget(self.stop_button)
        outer.addLayout(busy)
        self.reason = QLabel("")
        self.reason.setWordWrap(True)
        self.reason.setTextFormat(Qt.TextFormat.PlainText)
        outer.addWidget(self.reason)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Add clip" if add_to else "Create voice")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        self.buttons = buttons
        outer.addWidget(buttons)
        self._timers: dict[int, QTimer] = {}
        self._released = False
        self.jobs.analysed.connect(self._analysed)
        self.jobs.split.connect(self._split_done)
        self.jobs.transcribed.connect(self._transcribed)
        self.jobs.failed.connect(self._failed)
        self.jobs.progress.connect(self._progress)
        self.jobs.busy_changed.connect(self._busy)
        self.playback = CardPlayback(self.card, self)
        self.playback.refused.connect(self.reason.setText)
        self._busy(False)
        if self.asr_reason:
            self.status.setText(f"ⓘ {self.asr_reason}.")
        problems = [p for p in (self.add_source(s, transcript if i == 0 else "") for i, s in enumerate(sources)) if p]
        if problems:
            self.reason.setText("\n".join(problems))
        self.resize(680, min(860, 210 + 215 * max(1, len(self.cards))))

    # -- what the panel and the tests read ------------------------------------------------------------

    @property
    def transcripts(self) -> list[QPlainTextEdit]:
        return [c.transcript for c in self.cards]

    @property
    def transcript(self) -> QPlainTextEdit:
        return self.cards[0].transcript

    @property
    def checks(self) -> list[QLabel]:
        return [c.checks for c in self.cards]

    def pairs(self) -> list[tuple[ClipAudio, str]]:
        """(kept audio, transcript) of each clip, as the voice stores them (`VoiceLibrary.create`)."""
        return [(c.draft.clip_audio(self.normalize.isChecked()), c.transcript.toPlainText()) for c in self.cards]

    def card(self, key: int) -> ClipCard | None:
        return next((c for c in self.cards if c.draft.key == key), None)

    # -- clips --------------------------------------------------------------------------------------

    def add_source(self, source: Source, transcript: str = "", at: int | None = None) -> str:
        """Add a clip (a file is read now) at position `at` (last when None); returns why it was not added
        ("" when it was)."""
        if len(self.cards) >= self.max_clips:
            return f"⚠ A voice takes 1–{MAX_CLIPS} clips: {source_name(source)} was left out."
        try:
            draft = draft_of(source, self._key())
        except UserError as exc:
            return f"✗ {exc}"
        card = ClipCard(draft, len(self.cards) + 1, transcript)
        card.remove_requested.connect(self.remove_clip)
        card.play_requested.connect(lambda key: self.playback.toggle(key, self.normalize.isChecked()))
        card.trim_requested.connect(self.trim_clip)
        card.split_requested.connect(self.split_clip)
        card.transcribe_requested.connect(lambda key: self._transcribe(key, force=True))
        card.span_edited.connect(self._span_edited)
        card.transcribe_button.setVisible(not self.asr_reason)
        at = len(self.cards) if at is None else at
        self.cards.insert(at, card)
        self.list_layout.insertWidget(at, card)
        self._renumber()
        self.jobs.analyse(draft.key, draft.generation, draft.mono, draft.rate)
        if card.wants_transcript and not self.asr_reason:
            card.set_tag("transcribing after the trim…")
        return ""

    def _key(self) -> int:
        self._next_key += 1
        return self._next_key

    def _renumber(self) -> None:
        several = len(self.cards) > 1
        for n, card in enumerate(self.cards, start=1):
            card.set_number(n, several)
            card.remove_button.setEnabled(several)
            card.transcript.setMaximumHeight(56 if several else 84)
        self.add_button.setEnabled(len(self.cards) < self.max_clips)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(bool(self.cards))

    def browse(self) -> None:
        room = self.max_clips - len(self.cards)
        names, _ = QFileDialog.getOpenFileNames(self, f"Add up to {room} more clip{'s' * (room != 1)}",
                                                start_in("clips"), AUDIO_FILTER)
        if names:
            remember("clips", Path(names[0]))
        problems = [p for p in (self.add_source(Path(n)) for n in names) if p]
        self.reason.setText("\n".join(problems))

    def remove_clip(self, key: int) -> None:
        card = self.card(key)
        if card is None or len(self.cards) == 1:
            return
        self.playback.stop_if(key)
        self.jobs.forget(key)
        self.cards.remove(card)
        card.setParent(None)
        card.deleteLater()
        self._renumber()

    def trim_clip(self, key: int) -> None:
        card = self.card(key)
        if card is not None and card.draft.speech is not None:
            card.draft.touched = True
            card.set_span(card.draft.speech)
            self._span_changed(card)

    def split_clip(self, key: int) -> None:
        card = self.card(key)
        if card is None:
            return
        card.split_button.setEnabled(False)
        card.set_tag("finding the pauses…")
        self.jobs.split_long(key, card.draft.generation, card.draft.mono, card.draft.rate)

    # -- trims ----------------------------------------------------------------------------------------

    def _span_edited(self, key: int) -> None:
        card = self.card(key)
        if card is not None:
            card.draft.touched = True
            self._span_changed(card)

    def _span_changed(self, card: ClipCard) -> None:
        """The kept part changed: a pending transcript of the old part is void; the recogniser's transcript
        is made again once the handles rest (a typed one stays)."""
        card.draft.generation += 1
        self.playback.stop_if(card.draft.key)
        if not card.wants_transcript or self.asr_reason:
            return
        timer = self._timers.get(card.draft.key)
        if timer is None:
            timer = self._timers[card.draft.key] = QTimer(self, singleShot=True, interval=RETRANSCRIBE_AFTER_MS)
            timer.timeout.connect(lambda key=card.draft.key: self._transcribe(key))
        timer.start()

    def _analysed(self, key: int, _generation: int, speech: Span | None) -> None:
        card = self.card(key)
        if card is None:
            return
        card.set_speech(speech)
        if speech is not None and not card.draft.touched:
            card.set_span(speech)
            card.draft.generation += 1
        if card.wants_transcript:
            self._transcribe(key)

    def _split_done(self, key: int, generation: int, spans: list[Span]) -> None:
        card = self.card(key)
        if card is None:
            return
        card.split_button.setEnabled(True)
        if len(spans) < 2:
            card.set_tag("no pauses to split at")
            return
        d = card.draft
        at = self.cards.index(card)
        room = self.max_clips - len(self.cards) + 1
        pieces = []
        for n, span in enumerate(spans, start=1):
            margin = Span(max(0.0, span.start - 0.5), min(d.duration, span.end + 0.5))
            data = cut(d.data, d.rate, margin)
            piece = ClipDraft(0, f"{d.name}, part {n}", data, d.rate, d.subtype,
                              Span(span.start - margin.start, span.end - margin.start))
            piece.touched = True
            pieces.append(piece)
        self.jobs.forget(card.draft.key)
        self.cards.remove(card)
        card.setParent(None)
        card.deleteLater()
        kept = pieces[:room]
        for offset, piece in enumerate(kept):  # where the long one was
            self.add_source(piece, at=at + offset)
        note = (f"Split into {len(spans)} clips at the pauses." if len(kept) == len(spans) else
                f"⚠ Split into {len(spans)} clips; a voice takes {MAX_CLIPS}: the first {len(kept)} are kept.")
        self.reason.setText(note)

    # -- transcripts ----------------------------------------------------------------------------------

    def _transcribe(self, key: int, force: bool = False) -> None:
        card = self.card(key)
        if card is None or self.asr_reason:
            return
        if force:
            card.replace_next = True  # "Transcribe" replaces what is there
        d = card.draft
        card.set_tag("waiting to be transcribed…")
        self.jobs.transcribe(key, d.generation, d.kept_mono(), d.rate, self.asr)

    def _transcribed(self, key: int, generation: int, transcript: Transcript) -> None:
        card = self.card(key)
        if card is None or generation != card.draft.generation:
            return
        card.set_auto_transcript(transcript.text, transcript.language_label)

    def _failed(self, key: int, generation: int, kind: str, message: str) -> None:
        card = self.card(key)
        if card is None:
            return
        if kind == "transcribe":
            card.set_tag("type it")
            self.status.setText(f"⚠ {message}.")
        else:
            card.set_tag("")
            self.reason.setText(f"⚠ {message}")

    def _progress(self, key: int, fraction: float, message: str) -> None:
        card = self.card(key)
        if card is None:
            return
        if message == "Transcribing…":
            message = f"Transcribing clip {card.number}…" if len(self.cards) > 1 else "Transcribing the clip…"
            card.set_tag(f"transcribing… {fraction:.0%}")
        self.status.setText(message)
        self.progress.setValue(int(fraction * 1000))
        self.progress.setVisible(True)
        self.stop_button.setVisible(True)

    def _busy(self, busy: bool) -> None:
        transcribing = busy and bool(self.jobs.pending("transcribe"))
        self.progress.setVisible(transcribing)
        self.stop_button.setVisible(transcribing)
        if not busy and self.status.text().startswith(("Transcribing", "Downloading", "Loading")):
            self.status.setText("")

    def stop_jobs(self) -> None:
        self.jobs.cancel()
        for card in self.cards:
            if card.wants_transcript and not card.transcript.toPlainText().strip():
                card.set_tag("stopped: type it")
        self.status.setText("Transcription stopped.")

    # -- closing ---------------------------------------------------------------------------------------

    def accept(self) -> None:
        waiting = [c for c in self.cards if not c.transcript.toPlainText().strip()
                   and c.draft.key in {k for k, _ in self.jobs.pending("transcribe")}]
        if waiting:
            self.reason.setText(f"Clip {waiting[0].number} is still being transcribed; wait a moment or type "
                                "its transcript.")
            return
        super().accept()

    def done(self, code: int) -> None:  # noqa: D102 - what plays stops; a cancelled dialog stops its jobs
        self.playback.stop()
        if code != QDialog.DialogCode.Accepted:
            self.release()
        super().done(code)

    def release(self) -> None:
        """Stop this dialog's work and let go of the shared worker (called when the dialog is finished with; once
        is enough, and a second call does nothing: disconnecting twice made PySide print six warnings)."""
        if self._released:
            return
        self._released = True
        for timer in self._timers.values():
            timer.stop()
        for card in self.cards:
            self.jobs.forget(card.draft.key)
        if self.jobs.busy:
            self.jobs.cancel()
        for signal, slot in ((self.jobs.analysed, self._analysed), (self.jobs.split, self._split_done),
                             (self.jobs.transcribed, self._transcribed), (self.jobs.failed, self._failed),
                             (self.jobs.progress, self._progress), (self.jobs.busy_changed, self._busy)):
            signal.disconnect(slot)
