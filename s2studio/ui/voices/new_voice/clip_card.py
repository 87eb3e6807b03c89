"""One clip of the new-voice dialog: its waveform with the trim handles, play, trim to the speech, split (a
long recording), remove, its transcript (filled in automatically and marked "auto" until edited) and its
checks, which follow the trim.

`ClipCard` shows one `ClipDraft` and says what the person asked for through signals; the dialog runs the work
(`ClipJobs`).
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QDoubleSpinBox, QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton,
                               QSizePolicy, QToolButton, QVBoxLayout, QWidget)

from s2studio.audio.clip_prep import SPLIT_ABOVE_S, Span, cut
from s2studio.errors import UserError
from s2studio.state.clips import audio_warnings, check_reference
from s2studio.ui import wheel_guard
from s2studio.ui.voices.new_voice.clip_draft import ClipDraft
from s2studio.ui.voices.new_voice.clip_waveform import ClipWaveform


class ClipCard(QFrame):
    remove_requested = Signal(int)
    play_requested = Signal(int)
    trim_requested = Signal(int)
    split_requested = Signal(int)
    transcribe_requested = Signal(int)
    span_edited = Signal(int)
    """The person moved a trim handle (or typed a time)."""

    def __init__(self, draft: ClipDraft, number: int, transcript: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.draft = draft
        self.auto = False
        """The transcript is the recogniser's, untouched."""
        self.replace_next = False
        """"Transcribe" was pressed: the next transcript replaces even a typed one."""
        self._filling = False
        self.setObjectName("clipCard")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 6)
        layout.setSpacing(4)
        head = QHBoxLayout()
        self.title = QLabel()
        self.title.setTextFormat(Qt.TextFormat.PlainText)
        head.addWidget(self.title, 1)
        self.play_button = self._button("▶ Play", "Play the kept part", lambda: self.play_requested.emit(draft.key))
        self.trim_button = self._button("Trim silence", "Trim the silence before and after the speech",
                                        lambda: self.trim_requested.emit(draft.key))
        self.split_button = self._button("Split at pauses", "Split this long recording at its pauses into clips",
                                         lambda: self.split_requested.emit(draft.key))
        self.remove_button = QToolButton()
        self.remove_button.setText("✕")
        self.remove_button.setAutoRaise(True)
        self.remove_button.clicked.connect(lambda: self.remove_requested.emit(draft.key))
        for b in (self.play_button, self.trim_button, self.split_button, self.remove_button):
            head.addWidget(b)
        layout.addLayout(head)
        self.waveform = ClipWaveform()
        self.waveform.set_audio(draft.mono, draft.rate, draft.span)
        self.waveform.span_changed.connect(self._span_moved)
        self.waveform.edited.connect(lambda: self.span_edited.emit(draft.key))
        layout.addWidget(self.waveform)
        times = QHBoxLayout()
        self.start = self._time("Start")
        self.end = self._time("End")
        times.addWidget(QLabel("Keep from"))
        times.addWidget(self.start)
        times.addWidget(QLabel("to"))
        times.addWidget(self.end)
        times.addStretch(1)
        self.tag = QLabel("")
        self.tag.setObjectName("transcriptTag")
        times.addWidget(self.tag)
        self.transcribe_button = self._button("Transcribe", "Transcribe the kept part again",
                                              lambda: self.transcribe_requested.emit(draft.key))
        times.addWidget(self.transcribe_button)
        layout.addLayout(times)
        self.transcript = QPlainTextEdit(transcript)
        self.transcript.setMaximumHeight(64)
        self.transcript.textChanged.connect(self._typed)
        layout.addWidget(self.transcript)
        self.checks = QLabel("")
        self.checks.setWordWrap(True)
        layout.addWidget(self.checks)
        self.set_number(number, several=False)
        self._show_span()

    @staticmethod
    def _button(text: str, name: str, slot) -> QPushButton:  # noqa: ANN001
        b = QPushButton(text)
        b.setAccessibleName(name)
        b.setToolTip(name)
        b.setAutoDefault(False)
        b.clicked.connect(lambda: slot())
        return b

    def _time(self, name: str) -> QDoubleSpinBox:
        box = QDoubleSpinBox()
        box.setDecimals(2)
        box.setSuffix(" s")
        box.setSingleStep(0.05)
        box.setRange(0.0, self.draft.duration)
        box.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        box.valueChanged.connect(self._time_typed)
        box.setProperty("which", name.lower())
        wheel_guard.guard(box)  # a card is added to a dialog already shown
        return box

    # -- shown state ---------------------------------------------------------------------------

    def set_number(self, number: int, several: bool) -> None:
        self.number = number
        label = f"clip {number}" if several else "the clip"
        self.play_button.setAccessibleName(f"Play {label}")
        self.trim_button.setAccessibleName(f"Trim the silence of {label}")
        self.split_button.setAccessibleName(f"Split {label} at its pauses")
        self.remove_button.setAccessibleName(f"Remove {label}")
        self.remove_button.setToolTip(f"Remove {label} from this voice")
        self.waveform.setAccessibleName(f"Waveform and trim of {label}")
        self.start.setAccessibleName(f"Start of {label} (seconds)")
        self.end.setAccessibleName(f"End of {label} (seconds)")
        self.transcript.setAccessibleName(f"Transcript of {label}")
        self.transcript.setPlaceholderText(f"Type exactly what is said in {self.draft.name}.")
        self.checks.setAccessibleName(f"Checks of {label}")
        self.transcribe_button.setAccessibleName(f"Transcribe {label} again")
        self._title()

    def _title(self) -> None:
        d = self.draft
        kept = "" if d.span.length >= d.duration - 0.005 else f", keeping {d.span.length:.1f} s"
        self.title.setText(f"Clip {self.number} · {d.name} · {d.duration:.1f} s{kept}")
        self.split_button.setVisible(d.duration > SPLIT_ABOVE_S)

    def set_speech(self, speech: Span | None) -> None:
        self.draft.speech, self.draft.analysed = speech, True
        self.waveform.set_speech(speech)
        self.trim_button.setEnabled(speech is not None)
        self.refresh_checks()

    def set_span(self, span: Span) -> None:
        """Move the trim (Trim silence, a split): the handles and times follow."""
        self.waveform.set_span(span)

    def _span_moved(self, span: Span) -> None:
        self.draft.span = span
        self._show_span()

    def _show_span(self) -> None:
        self._filling = True
        try:
            self.start.setValue(self.draft.span.start)
            self.end.setValue(self.draft.span.end)
        finally:
            self._filling = False
        self._title()
        self.refresh_checks()

    def _time_typed(self) -> None:
        if self._filling:
            return
        start, end = self.start.value(), self.end.value()
        span = Span(start, end) if end > start else self.draft.span
        self.waveform.set_span(span)
        self.span_edited.emit(self.draft.key)

    def refresh_checks(self) -> None:
        """The checks of what will be stored: the rule (refused: ✗) and the warnings (⚠) of the kept part."""
        d = self.draft
        kept = cut(d.data, d.rate, d.span)
        try:
            check_reference(d.name, kept, d.rate)
        except UserError as exc:
            self.checks.setText(f"✗ {exc}")
            return
        warnings = audio_warnings(kept, d.rate)
        if d.analysed and d.speech is None:
            warnings.append("no speech found in it; is this the right file?")
        self.checks.setText("\n".join(f"⚠ {w}" for w in warnings) or "✓ Clip looks good.")

    @property
    def refused(self) -> bool:
        return self.checks.text().startswith("✗")

    # -- the transcript ------------------------------------------------------------------------

    def set_auto_transcript(self, text: str, language: str) -> None:
        """The recogniser's transcript, unless the person typed one meanwhile (and did not ask for it)."""
        if not (self.wants_transcript or self.replace_next):
            self.set_tag("")
            return
        self.replace_next = False
        self._filling = True
        try:
            self.transcript.setPlainText(text)
        finally:
            self._filling = False
        self.auto = bool(text)
        self.set_tag(f"auto · {language}" if text else "no speech recognised: type it")
        self.tag.setToolTip("Filled in by speech recognition: check it word for word." if text else "")

    def set_tag(self, text: str) -> None:
        """The note beside the transcript; "auto · …" is drawn as a badge."""
        self.tag.setText(text)
        self.tag.setStyleSheet("#transcriptTag { background: #dbeafe; color: #1e40af; border-radius: 7px; "
                               "padding: 1px 7px; }" if text.startswith("auto") else "")

    @property
    def wants_transcript(self) -> bool:
        """Empty, or still the recogniser's: a new transcript may replace it."""
        return self.auto or not self.transcript.toPlainText().strip()

    def _typed(self) -> None:
        if not self._filling and self.auto:
            self.auto = False
            self.set_tag("edited")
