"""A fine-tuning run driven from the window: the run in a process of its own (`train.job`), its events on the
GUI thread.

Training is not engine work: it loads its own copy of the model (training needs float32 weights, gradients and
the optimiser state, which the engine's inference model has none of) and runs for minutes to hours. It imports
torch, which the window's process never does, so it runs as `s2studio train-job` (`child.ChildJob`), read by a
thread of its own (`Background`) while the engine keeps rendering and previewing. Stopping writes `stop` to the
job: the current step finishes, a checkpoint is saved, and the run can be resumed from it. The estimate before a
run (`train.estimate.measure_step`: one real timed step) is the same kind of job, one job at a time, and is
cached per model and settings for the session. QtCore only.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from s2studio.errors import UserError
from s2studio.state.atomic import write_text_atomic
from s2studio.state.voices import VoiceLibrary
from s2studio.train.estimate import Estimate
from s2studio.train.events import event_from
from s2studio.ui.control.background import Background
from s2studio.ui.control.child import ChildJob

JOB_COMMAND = "train-job"

RUNS = "training"
"""Under the data folder: one run folder per voice id (its checkpoints, tokens and final LoRA)."""

logger = logging.getLogger(__name__)


def run_folder(data_dir: Path, voice_id: str) -> Path:
    return Path(data_dir) / RUNS / voice_id


def set_aside(folder: Path) -> Path:
    """Rename an earlier run folder to `<name>.earlier-N` (a new run starts clean; the old one's work is kept)."""
    n = 1
    while (aside := folder.with_name(f"{folder.name}.earlier-{n}")).exists():
        n += 1
    folder.rename(aside)
    return aside


SETTINGS_FILE = "dialog.json"
"""In a run folder: the dialog's choices for that run, shown again when the dialog reopens for the voice."""
METRICS_FILE = "metrics.jsonl"
"""In a run folder: one line per step (`train.run.MetricsLog`), the loss of every step of the run."""


def remember_run(folder: Path, choices: dict) -> None:
    """Keep the dialog's choices for this run (a folder that cannot be written costs only the memory of them)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(folder / SETTINGS_FILE, json.dumps(choices, indent=2) + "\n")
    except (OSError, UserError) as exc:
        logger.warning("cannot remember the fine-tuning settings in %s: %s", folder, exc)


def last_run(folder: Path) -> dict:
    """The choices of the voice's last run ({} when none could be read)."""
    try:
        found = json.loads((folder / SETTINGS_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def run_losses(folder: Path) -> dict[int, float]:
    """Step -> loss of the voice's last run, from its metrics log ({} without one; damaged lines are skipped)."""
    losses: dict[int, float] = {}
    try:
        lines = (folder / METRICS_FILE).read_text("utf-8").splitlines()
    except OSError:
        return losses
    for line in lines:
        try:
            row = json.loads(line)
            losses[int(row["step"])] = float(row["loss"])
        except (ValueError, KeyError, TypeError):
            continue
    return losses


def has_checkpoint(folder: Path) -> bool:
    return any((folder / "checkpoints").glob("step_*/lora.safetensors")) if folder.is_dir() else False


def estimate_key(model_dir: Path, voice_id: str, durations: tuple[float, ...], settings: dict,
                 device: str) -> tuple:
    """What a step's cost depends on: the model (its folder and config file's time), the clips' lengths, the
    preset, batch size, maximum length and device; not the number of steps (the estimate scales with it)."""
    config = Path(model_dir) / "config.json"
    stamp = config.stat().st_mtime_ns if config.is_file() else 0
    return (str(Path(model_dir).resolve()), stamp, voice_id, durations, settings.get("preset"),
            settings.get("batch_size"), settings.get("max_length"), device)


ESTIMATES: dict[tuple, Estimate] = {}
"""`estimate_key` -> `train.estimate.Estimate`, for this session (a dialog opened again shows it at once)."""


class FineTuneRun(QObject):
    """One job at a time; `event` carries each `train.events.RunEvent` (step, checkpoint, status, stopped,
    finished), `ended` the final LoRA's path ("" when stopped or failed) and the error message ("" if none);
    `estimated` an estimate (`train.estimate.Estimate`, or None) and its error message."""

    event = Signal(object)
    ended = Signal(str, str)
    estimated = Signal(object, str)

    def __init__(self, library: VoiceLibrary, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.library = library
        self._task = Background("fine-tune", self)
        self._task.done.connect(self._done)
        self._job: ChildJob | None = None
        self._estimating: tuple | None = None
        self._run: tuple[str, float] = ("", 0.0)
        """The voice's name and when the running training began (for the log)."""

    @property
    def running(self) -> bool:
        return self._task.running

    def start(self, voice_id: str, model_dir: Path, out_dir: Path, settings: dict, *, device: str = "auto",
              save_every: int = 0, resume: bool = False) -> None:
        """Train on the voice's clips; `settings`: `TrainSettings` fields (preset, steps, batch_size, ...)."""
        if self.running:
            return
        library = self.library
        self._run = (library.get(voice_id).name, time.monotonic())
        logger.info("fine-tuning “%s” started%s: %s on %s", self._run[0], " (resumed)" * resume,
                    ", ".join(f"{k}={v}" for k, v in sorted(settings.items())), device)

        job = ChildJob(JOB_COMMAND, {"job": "train", "voices": str(library.root), "voice_id": voice_id,
                                     "model_dir": str(model_dir), "out_dir": str(out_dir), "settings": settings,
                                     "device": device, "save_every": save_every, "resume": resume,
                                     "metrics_out": str(Path(out_dir) / METRICS_FILE)})
        self._job = job

        def work(_task: Background) -> object:
            final = ""
            for row in job.rows():
                ev = event_from(row["event"])
                self.event.emit(ev)
                if ev.kind == "finished":
                    final = str(ev.path)
            return final

        self._task.start(work)

    @property
    def estimating(self) -> bool:
        return self._estimating is not None

    def cached_estimate(self, key: tuple, steps: int) -> Estimate | None:
        found = ESTIMATES.get(key)
        return None if found is None else dataclasses.replace(found, steps=steps)

    def estimate(self, voice_id: str, model_dir: Path, settings: dict, *, device: str = "auto") -> None:
        """Time one real step of `settings` in a job of its own; `estimated` follows (cached by key)."""
        if self.running:
            return
        library = self.library
        voice = library.get(voice_id)
        self._estimating = estimate_key(model_dir, voice_id, tuple(c.duration_s for c in voice.clips), settings,
                                        device)

        job = ChildJob(JOB_COMMAND, {"job": "estimate", "voices": str(library.root), "voice_id": voice_id,
                                     "model_dir": str(model_dir), "settings": settings, "device": device})

        def work(_task: Background) -> object:
            return Estimate(**list(job.rows())[-1]["estimate"])

        self._task.start(work)

    def stop(self) -> None:
        """Finish the current step, save a checkpoint, end the run (resumable)."""
        self._task.cancel.set()
        if self._job is not None:
            self._job.stop()

    def wait(self) -> None:
        self._task.wait()

    def _done(self, result: object, error: str) -> None:
        if self._estimating is not None:
            key, self._estimating = self._estimating, None
            if result is not None:
                ESTIMATES[key] = result
            self.estimated.emit(result, error)
            return
        self._job = None
        name, started = self._run
        took = time.monotonic() - started
        if error:
            logger.warning("fine-tuning “%s” failed after %.0f s: %s", name, took, error)
        else:
            logger.info("fine-tuning “%s” %s after %.0f s", name, f"finished: {result}" if result else "stopped",
                        took)
        self.ended.emit(str(result or ""), error)
