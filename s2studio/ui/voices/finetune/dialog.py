"""Fine-tune voice…: train a LoRA on a voice's clips, watch its loss, and give the result to the voice.

What upstream says about fine-tuning S2 Pro is said up front, in plain words: the model is RL-aligned, a LoRA
learns speaking style more than timbre, it needs a minute or more of clean speech (under 30 s is refused), and
the voice keeps its reference clips. The run itself is `ui.control.finetune.FineTuneRun` (a process of its own);
the window stays responsive, Stop saves a checkpoint that Resume continues from, and the finished LoRA is attached
to the voice (`VoiceLibrary.set_lora`), so the voice's lines render with it from then on.

Before a run, Estimate times one real step of the chosen settings in the training process and shows the time and
memory in plain words; a run that would not fit in the free memory cannot start.

Each saved checkpoint gets a row (step, loss, Play, Use this one) and a preview: the voice's test sentence
spoken with that checkpoint's LoRA on the voice's reference clips, rendered by the studio's engine
(`checkpoint_previews`). Use this one attaches that checkpoint's `lora.safetensors` to the voice. The dialog's
parts: `run_form` (the run's choices), `loss_plot`, `checkpoint_table`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QDialog, QDialogButtonBox, QHBoxLayout, QLabel, QMessageBox, QProgressBar,
                               QPushButton, QVBoxLayout, QWidget)

from s2studio.errors import UserError
from s2studio.state.voices import VoiceLibrary
from s2studio.ui.control.finetune import (FineTuneRun, estimate_key, has_checkpoint, last_run, remember_run,
                                          run_folder, run_losses, set_aside)
from s2studio.ui.control.one_shot import play_file
from s2studio.ui.voices.finetune.checkpoint_previews import CheckpointPreviews
from s2studio.ui.voices.finetune.checkpoint_table import CheckpointRow, CheckpointTable
from s2studio.ui.voices.finetune.loss_plot import LossPlot
from s2studio.ui.voices.finetune.run_form import FIRST_RUN, RunForm

if TYPE_CHECKING:
    from s2studio.train.estimate import Estimate
    from s2studio.ui.control.context import StudioContext
    from s2studio.ui.control.model import ModelController

MIN_SECONDS = 30.0
"""The trainer's own floor (`train.clips.MIN_SECONDS`), repeated so the dialog can say it before importing torch."""
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
                 parent: QWidget | None = None, *, host: object | None = None,
                 model_info: object | None = None) -> None:
        """`host`: the studio's `worker.EngineHost` (checkpoint previews render there; None: no previews),
        `model_info` the model it has loaded."""
        super().__init__(parent)
        self.library = library
        self.voice = library.get(voice_id)
        self.model_dir = model_dir
        self.folder = run_folder(data_dir, voice_id)
        self.run = FineTuneRun(library, self)
        self.run.event.connect(self._on_event)
        self.run.ended.connect(self._on_ended)
        self.run.estimated.connect(self._on_estimated)
        self.estimate_result: Estimate | None = None
        """The `train.estimate.Estimate` for the settings shown (None: not measured yet)."""
        self.total_steps = 0
        self._close_when_done = False
        self.checkpoints = CheckpointPreviews(lambda: self.voice, library, host, model_info, self)
        self.checkpoints.changed.connect(self._fill_table)
        self.setWindowTitle(f"Fine-tune voice: {self.voice.name}")
        self.setAccessibleName("Fine-tune voice")

        layout = QVBoxLayout(self)
        warning = QLabel(WARNING)
        warning.setWordWrap(True)
        warning.setObjectName("fineTuneWarning")
        layout.addWidget(warning)
        seconds = sum(c.duration_s for c in self.voice.clips)
        clips = len(self.voice.clips)
        self.speech_label = QLabel(f"{clips} clip{'s' if clips != 1 else ''}, {seconds:.0f} s of transcribed speech.")
        layout.addWidget(self.speech_label)

        self.form = RunForm()
        layout.addLayout(self.form)
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
        for spin in (self.form.steps, self.form.batch_size, self.form.max_length):
            spin.valueChanged.connect(self._show_estimate)
        for combo in (self.form.preset, self.form.device):
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
        self.table = CheckpointTable()
        self.table.play_requested.connect(self.play)
        self.table.keep_requested.connect(self.keep)
        layout.addWidget(self.table)
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
        remembered = last_run(self.folder)  # the voice's last run, else a short first one
        self.form.choose(remembered)
        self.attach.setChecked({**FIRST_RUN, **remembered}["attach"] is not False)
        self._refresh(seconds)
        self._show_estimate()
        losses = run_losses(self.folder)
        if losses:  # the last run's curve, as it was drawn
            self.plot.clear(self.form.steps.value())
            for step, loss in sorted(losses.items()):
                self.plot.add(step, loss)
        self.checkpoints.add_earlier(self.folder, losses)  # an earlier run's, to choose from

    def choices(self) -> dict:
        """What the dialog remembers of a run for the voice's next one."""
        return {**self.form.choices(), "attach": self.attach.isChecked()}

    def _refresh(self, seconds: float) -> None:
        reason = ""
        if self.model_dir is None:
            reason = "Load a model first (Model ▸ Choose…): the LoRA is trained on the model the studio uses."
        elif seconds < MIN_SECONDS:
            reason = (f"This voice has only {seconds:.0f} s of speech; fine-tuning needs at least {MIN_SECONDS:.0f} s "
                      "(a minute or more is better). Add clips first.")
        self.estimate_button.setEnabled(not reason)
        est = self.estimate_result
        if not reason and est is not None and not est.fits:
            free = (est.free_bytes or 0) / 1e9
            reason = (f"This run needs {est.peak_bytes / 1e9:.1f} GB and only {free:.1f} GB is free: lower the batch "
                      "size or the maximum length, or close other programs.")
        self.start_button.setEnabled(not reason)
        self.start_button.setToolTip(reason)
        self.resume.setEnabled(has_checkpoint(self.folder))
        self.resume.setChecked(has_checkpoint(self.folder))
        if reason:
            self.status.setText(reason)

    # -- the run -----------------------------------------------------------------------------------

    def _estimate_key(self) -> tuple | None:
        if self.model_dir is None:
            return None
        return estimate_key(self.model_dir, self.voice.id, tuple(c.duration_s for c in self.voice.clips),
                            self.form.settings(), self.form.device.currentData())

    def _show_estimate(self) -> None:
        """The estimate for the settings shown: the cached measurement scaled to the steps, or a prompt."""
        key = self._estimate_key()
        self.estimate_result = None if key is None else self.run.cached_estimate(key, self.form.steps.value())
        est = self.estimate_result
        if est is None:
            self.estimate_label.setText("Time and memory: not measured yet for these settings (Estimate times one "
                                        "real step).")
        else:
            how = "measured" if est.measured_memory else "planned"
            warn = "" if est.fits else " Too much for this machine."
            self.estimate_label.setText(f"This run: {est.describe()} ({est.seconds_per_step:.1f} s per step, "
                                        f"memory {how}).{warn}")
        if not self.run.running:
            self._refresh(sum(c.duration_s for c in self.voice.clips))

    def measure(self) -> None:
        """Time one step of the chosen settings in the training process (the window stays responsive)."""
        if self.run.running or self.model_dir is None:
            return
        self.estimate_label.setText("Measuring one training step…")
        self._running(True)
        self.stop_button.setEnabled(False)
        self.run.estimate(self.voice.id, self.model_dir, self.form.settings(), device=self.form.device.currentData())

    def _on_estimated(self, _estimate: object, error: str) -> None:
        self._running(False)
        if self._close_when_done:
            super().reject()
            return
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
            self.checkpoints.clear()  # they moved aside with their run
        self.total_steps = self.form.steps.value()
        self.plot.clear(self.total_steps)
        self.progress.setRange(0, self.total_steps)
        self.progress.setValue(0)
        self.status.setText("Preparing the clips…" + note)
        self._running(True)
        self.run.start(self.voice.id, self.model_dir, self.folder, self.form.settings(),
                       device=self.form.device.currentData(), save_every=self.form.save_every.value(), resume=resume)

    def stop(self) -> None:
        if self.run.running:
            self.status.setText("Stopping after this step and saving a checkpoint…")
            self.stop_button.setEnabled(False)
            self.run.stop()

    def _running(self, on: bool) -> None:
        for w in (*self.form.fields, self.resume, self.attach, self.start_button, self.estimate_button):
            w.setEnabled(not on)
        self.stop_button.setEnabled(on)
        self._fill_table()
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
        elif kind == "checkpoint" and ev.path is not None:  # type: ignore[attr-defined]
            loss = self.plot.points[-1][1] if self.plot.points else None
            name = Path(ev.path).name  # type: ignore[attr-defined]
            step = int(name[5:]) if name[5:].isdigit() else (self.plot.points[-1][0] if self.plot.points else 0)
            self.checkpoints.add(CheckpointRow(step, loss, Path(ev.path)))  # type: ignore[attr-defined]
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
        if self.folder.is_dir():  # the run made its folder: its choices are the voice's next run's
            remember_run(self.folder, self.choices())
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
                                            f"{self.form.preset.currentData()}, {self.total_steps} steps, loss "
                                            f"{self.plot.points[-1][1]:.3f}" if self.plot.points else "")
        except UserError as exc:
            self.status.setText(str(exc))
            return
        self.voice = updated
        self.status.setText(f"Done. {self.voice.name} now speaks with this LoRA; its takes will render again.")
        self.voice_changed.emit(self.voice.id)

    # -- checkpoints -----------------------------------------------------------------------------

    def _fill_table(self) -> None:
        self.table.show_rows(self.checkpoints.rows, self.run.running)

    def play(self, row: CheckpointRow) -> None:
        if row.preview is None:
            return
        reason = play_file(row.preview)
        self.status.setText(reason or f"Playing step {row.step}'s preview.")

    def keep(self, row: CheckpointRow) -> None:
        """Attach this checkpoint's LoRA to the voice."""
        if self.run.running:
            return
        loss = "" if row.loss is None else f", loss {row.loss:.3f}"
        try:
            self.voice = self.library.set_lora(self.voice.id, row.lora,
                                               f"{self.form.preset.currentData()}, {row.step} steps{loss}")
        except UserError as exc:
            self.status.setText(str(exc))
            return
        self.status.setText(f"{self.voice.name} now speaks with the LoRA of step {row.step}; its takes will "
                            "render again.")
        self.voice_changed.emit(self.voice.id)

    def reject(self) -> None:
        """Close: a running run is stopped first (its checkpoint saved); the dialog goes when that step is done,
        so the window never waits on a training step."""
        if self.run.running:
            self._close_when_done = True
            if self.run.estimating:
                return  # an estimate: one step, then the dialog goes
            self.stop()
            return
        super().reject()


def open_fine_tune(parent: QWidget, library: VoiceLibrary, voice_id: str, model: ModelController,
                   ctx: StudioContext, changed: Callable[[], object]) -> None:
    """Open the Fine-tune dialog for the voice, on the model the studio loaded; `changed` when a LoRA is attached.
    A voice that cannot be fine-tuned (too little speech) is one warning."""
    try:
        dialog = FineTuneDialog(library, voice_id, model.folder, ctx.data_dir, parent, host=ctx.host,
                                model_info=model.info)
    except UserError as exc:
        QMessageBox.warning(parent, "Fine-tune voice", str(exc))
        return
    dialog.voice_changed.connect(changed)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.show()
