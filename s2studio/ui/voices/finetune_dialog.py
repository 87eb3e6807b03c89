"""Fine-tune voice…: train a LoRA on a voice's clips, watch its loss, and give the result to the voice.

What upstream says about fine-tuning S2 Pro is said up front, in plain words: the model is RL-aligned, a LoRA
learns speaking style more than timbre, it needs a minute or more of clean speech (under 30 s is refused), and
the voice keeps its reference clips. The run itself is `ui.control.finetune.FineTuneRun` (its own thread); the
window stays responsive, Stop saves a checkpoint that Resume continues from, and the finished LoRA is attached
to the voice (`VoiceLibrary.set_lora`), so the voice's lines render with it from then on.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QFormLayout, QHBoxLayout, QLabel,
                               QProgressBar, QPushButton, QSpinBox, QVBoxLayout, QWidget)

from s2studio.errors import UserError
from s2studio.state.voices import VoiceLibrary
from s2studio.ui.control.finetune import FineTuneRun, estimate_key, has_checkpoint, run_folder, set_aside
from s2studio.ui.voices.loss_plot import LossPlot

MIN_SECONDS = 30.0
"""The trainer's own floor (`train.clips.MIN_SECONDS`), repeated so the dialog can say it before importing torch."""
PRESETS = (("r_8_alpha_16", "Full (r 8, α 16): every layer, upstream's default"),
           ("r_32_alpha_16_fast", "Fast transformer only (r 32, α 16): smaller, quicker"))
WARNING = ("<b>Before you start.</b> S2 Pro is RL-aligned: a LoRA learns a speaking style (pace, delivery, "
           "accent) more than a new timbre. It needs a minute or more of clean speech with exact transcripts; "
           "under 30 s is refused. The voice keeps its reference clips, which still carry its timbre.")


def eta_text(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class FineTuneDialog(QDialog):
    """One voice's fine-tuning; `voice_changed(voice id)` when its LoRA was attached."""

    voice_changed = Signal(str)

    def __init__(self, library: VoiceLibrary, voice_id: str, model_dir: Path | None, data_dir: Path,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.library = library
        self.voice = library.get(voice_id)
        self.model_dir = model_dir
        self.folder = run_folder(data_dir, voice_id)
        self.run = FineTuneRun(library, self)
        self.run.event.connect(self._on_event)
        self.run.ended.connect(self._on_ended)
        self.run.estimated.connect(self._on_estimated)
        self.estimate_result: object | None = None
        """The `train.estimate.Estimate` for the settings shown (None: not measured yet)."""
        self.total_steps = 0
        self._close_when_done = False
        self.setWindowTitle(f"Fine-tune voice: {self.voice.name}")
        self.setAccessibleName("Fine-tune voice")

        layout = QVBoxLayout(self)
        warning = QLabel(WARNING)
        warning.setWordWrap(True)
        warning.setObjectName("fineTuneWarning")
        layout.addWidget(warning)
        seconds = sum(c.duration_s for c in self.voice.clips)
        self.speech_label = QLabel(f"{len(self.voice.clips)} clip(s), {seconds:.0f} s of transcribed speech.")
        layout.addWidget(self.speech_label)

        form = QFormLayout()
        self.preset = QComboBox()
        for key, label in PRESETS:
            self.preset.addItem(label, key)
        self.preset.setAccessibleName("LoRA preset")
        form.addRow("Preset", self.preset)
        self.steps = self._spin(1, 100_000, 200, "Training steps")
        form.addRow("Steps", self.steps)
        self.device = QComboBox()
        for key, label in (("auto", "Automatic (the GPU if there is one)"), ("cpu", "CPU"), ("cuda", "GPU (CUDA)")):
            self.device.addItem(label, key)
        self.device.setAccessibleName("Device")
        form.addRow("Device", self.device)
        self.save_every = self._spin(0, 100_000, 50, "Save a checkpoint every N steps")
        self.save_every.setSpecialValueText("only at the end")
        form.addRow("Checkpoint every", self.save_every)
        self.batch_size = self._spin(1, 64, 4, "Batch size")
        form.addRow("Batch size", self.batch_size)
        self.max_length = self._spin(64, 8192, 4096, "Maximum tokens per sample")
        self.max_length.setSingleStep(256)
        form.addRow("Max length", self.max_length)
        layout.addLayout(form)
        estimate_row = QHBoxLayout()
        self.estimate_label = QLabel("")
        self.estimate_label.setWordWrap(True)
        self.estimate_label.setAccessibleName("Estimate")
        self.estimate_button = QPushButton("Estimate")
        self.estimate_button.setToolTip("Time one real training step of these settings on this machine")
        self.estimate_button.clicked.connect(self.measure)
        estimate_row.addWidget(self.estimate_label, 1)
        estimate_row.addWidget(self.estimate_button)
        layout.addLayout(estimate_row)
        for spin in (self.steps, self.batch_size, self.max_length):
            spin.valueChanged.connect(self._show_estimate)
        for combo in (self.preset, self.device):
            combo.currentIndexChanged.connect(self._show_estimate)
        self.resume = QCheckBox("Resume from the last checkpoint")
        self.resume.setAccessibleName("Resume")
        layout.addWidget(self.resume)
        self.attach = QCheckBox("Use the result for this voice")
        self.attach.setChecked(True)
        self.attach.setAccessibleName("Use the result for this voice")
        layout.addWidget(self.attach)

        self.plot = LossPlot()
        layout.addWidget(self.plot, 1)
        self.progress = QProgressBar()
        self.progress.setAccessibleName("Training progress")
        layout.addWidget(self.progress)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setAccessibleName("Training status")
        layout.addWidget(self.status)

        row = QHBoxLayout()
        self.start_button = QPushButton("Start training")
        self.start_button.clicked.connect(self.start)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Finish the current step, save a checkpoint and stop (Resume continues it)")
        self.stop_button.clicked.connect(self.stop)
        self.stop_button.setEnabled(False)
        row.addWidget(self.start_button)
        row.addWidget(self.stop_button)
        row.addStretch(1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        self.close_button = buttons.button(QDialogButtonBox.StandardButton.Close)
        row.addWidget(buttons)
        layout.addLayout(row)
        self._refresh(seconds)
        self._show_estimate()

    def _spin(self, lo: int, hi: int, value: int, name: str) -> QSpinBox:
        s = QSpinBox()
        s.setRange(lo, hi)
        s.setValue(value)
        s.setAccessibleName(name)
        return s

    def _refresh(self, seconds: float) -> None:
        reason = ""
        if self.model_dir is None:
            reason = "Load a model first (Model ▸ Choose…): the LoRA is trained on the model the studio uses."
        elif seconds < MIN_SECONDS:
            reason = (f"This voice has only {seconds:.0f} s of speech; fine-tuning needs at least {MIN_SECONDS:.0f} s "
                      "(a minute or more is better). Add clips first.")
        self.estimate_button.setEnabled(not reason)
        est = self.estimate_result
        if not reason and est is not None and not est.fits:  # type: ignore[attr-defined]
            reason = (f"This run needs {est.peak_bytes / 1e9:.1f} GB and only {est.free_bytes / 1e9:.1f} GB is "  # type: ignore[attr-defined]
                      "free: lower the batch size or the maximum length, or close other programs.")
        self.start_button.setEnabled(not reason)
        self.start_button.setToolTip(reason)
        self.resume.setEnabled(has_checkpoint(self.folder))
        self.resume.setChecked(has_checkpoint(self.folder))
        if reason:
            self.status.setText(reason)

    # -- the run -----------------------------------------------------------------------------------

    def settings(self) -> dict:
        return {"preset": self.preset.currentData(), "steps": self.steps.value(),
                "batch_size": self.batch_size.value(), "max_length": self.max_length.value()}

    def _estimate_key(self) -> tuple | None:
        if self.model_dir is None:
            return None
        return estimate_key(self.model_dir, self.voice.id, tuple(c.duration_s for c in self.voice.clips),
                            self.settings(), self.device.currentData())

    def _show_estimate(self) -> None:
        """The estimate for the settings shown: the cached measurement scaled to the steps, or a prompt."""
        key = self._estimate_key()
        self.estimate_result = None if key is None else self.run.cached_estimate(key, self.steps.value())
        est = self.estimate_result
        if est is None:
            self.estimate_label.setText("Time and memory: not measured yet for these settings (Estimate times one "
                                        "real step).")
        else:
            how = "measured" if est.measured_memory else "planned"  # type: ignore[attr-defined]
            warn = "" if est.fits else " Too much for this machine."  # type: ignore[attr-defined]
            self.estimate_label.setText(f"This run: {est.describe()} ({est.seconds_per_step:.1f} s per step, "  # type: ignore[attr-defined]
                                        f"memory {how}).{warn}")
        if not self.run.running:
            self._refresh(sum(c.duration_s for c in self.voice.clips))

    def measure(self) -> None:
        """Time one step of the chosen settings on the training thread (the window stays responsive)."""
        if self.run.running or self.model_dir is None:
            return
        self.estimate_label.setText("Measuring one training step…")
        self._running(True)
        self.stop_button.setEnabled(False)
        self.run.estimate(self.voice.id, self.model_dir, self.settings(), device=self.device.currentData())

    def _on_estimated(self, _estimate: object, error: str) -> None:
        self._running(False)
        self._show_estimate()
        if error:
            self.estimate_label.setText(f"Cannot estimate: {error}")

    def start(self) -> None:
        if self.run.running or self.model_dir is None:
            return
        resume = self.resume.isChecked() and self.resume.isEnabled()
        note = ""
        if not resume and self.folder.exists():
            try:  # a new run: the earlier one is kept aside, never deleted
                aside = set_aside(self.folder)
            except OSError as exc:
                self.status.setText(f"Cannot move the earlier run in {self.folder} aside ({exc.strerror or exc}); "
                                    "tick Resume to continue it instead.")
                return
            note = f" (the earlier run is kept in {aside.name})"
        self.total_steps = self.steps.value()
        self.plot.clear(self.total_steps)
        self.progress.setRange(0, self.total_steps)
        self.progress.setValue(0)
        self.status.setText("Preparing the clips…" + note)
        self._running(True)
        self.run.start(self.voice.id, self.model_dir, self.folder, self.settings(),
                       device=self.device.currentData(), save_every=self.save_every.value(), resume=resume)

    def stop(self) -> None:
        if self.run.running:
            self.status.setText("Stopping after this step and saving a checkpoint…")
            self.stop_button.setEnabled(False)
            self.run.stop()

    def _running(self, on: bool) -> None:
        for w in (self.preset, self.steps, self.device, self.save_every, self.batch_size, self.max_length,
                  self.resume, self.attach, self.start_button, self.estimate_button):
            w.setEnabled(not on)
        self.stop_button.setEnabled(on)
        if not on:
            self._refresh(sum(c.duration_s for c in self.voice.clips))

    def _on_event(self, ev: object) -> None:
        kind = getattr(ev, "kind", "")
        if kind == "step":
            m = ev.metrics  # type: ignore[attr-defined]
            self.plot.add(m.step, m.loss)
            self.progress.setValue(m.step)
            self.status.setText(f"Step {m.step} of {self.total_steps}: loss {m.loss:.4f}, {m.seconds:.1f} s per "
                                f"step, about {eta_text(ev.eta_seconds or 0)} left")  # type: ignore[attr-defined]
        elif kind == "status":
            self.status.setText(ev.message[:1].upper() + ev.message[1:] + "…")  # type: ignore[attr-defined]
        elif kind == "stopped":
            if ev.path is None:  # type: ignore[attr-defined]
                self.status.setText("Stopped before the first step finished: nothing to keep.")
            else:
                self.status.setText(f"Stopped after step {self.plot.points[-1][0] if self.plot.points else 0}; the "
                                    "checkpoint is saved. Start again with Resume ticked to continue.")

    def _on_ended(self, lora: str, error: str) -> None:
        self._running(False)
        if self._close_when_done:
            super().reject()
        if error:
            self.status.setText(error)
            return
        if not lora:
            return
        if not self.attach.isChecked():
            self.status.setText(f"Done. The LoRA is in {lora}.")
            return
        try:
            updated = self.library.set_lora(self.voice.id, Path(lora),
                                            f"{self.preset.currentData()}, {self.total_steps} steps, loss "
                                            f"{self.plot.points[-1][1]:.3f}" if self.plot.points else "")
        except UserError as exc:
            self.status.setText(str(exc))
            return
        self.voice = updated
        self.status.setText(f"Done. {self.voice.name} now speaks with this LoRA; its takes will render again.")
        self.voice_changed.emit(self.voice.id)

    def reject(self) -> None:
        """Close: a running run is stopped first (its checkpoint saved); the dialog goes when that step is done,
        so the window never waits on a training step."""
        if self.run.running:
            self._close_when_done = True
            self.stop()
            return
        super().reject()
