"""A fine-tuning run driven from the window: `train.run.train` on its own thread, its events on the GUI thread.

Training is not engine work: it loads its own copy of the model (training needs float32 weights, gradients and
the optimiser state, which the engine's inference model has none of) and runs for minutes to hours, so it gets a
thread of its own (`Background`) rather than the engine thread, which keeps rendering and previewing. Torch and
the trainer are imported on that thread, never by the window. Stopping sets the run's `StopFlag`: the current
step finishes, a checkpoint is saved, and the run can be resumed from it. The estimate before a run
(`train.estimate.measure_step`: one real timed step) runs on the same thread, one job at a time, and is cached
per model and settings for the session. QtCore only.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from s2studio.errors import UserError
from s2studio.state.atomic import write_text_atomic
from s2studio.state.voices import VoiceLibrary
from s2studio.ui.control.background import Background

if TYPE_CHECKING:
    from s2studio.train.estimate import Estimate

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
    """One job at a time; `event` carries each `train.run.RunEvent` (step, checkpoint, status, stopped,
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
        self._stop: object | None = None
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

        def work(task: Background) -> object:
            from s2studio.train.clips import clips_from_voice
            from s2studio.train.loop import TrainSettings
            from s2studio.train.run import RunRequest, StopFlag, train

            stop = StopFlag()
            self._stop = stop
            clips = tuple(clips_from_voice(library, voice_id))
            request = RunRequest(Path(model_dir), Path(out_dir), clips, TrainSettings(**settings), device=device,
                                 save_every=save_every, resume=Path(out_dir) if resume else None,
                                 metrics_out=Path(out_dir) / METRICS_FILE)
            final = ""
            for ev in train(request, stop):
                if task.cancel.is_set():
                    stop.set()
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
        """Time one real step of `settings` on the training thread; `estimated` follows (cached by key)."""
        if self.running:
            return
        library = self.library
        voice = library.get(voice_id)
        self._estimating = estimate_key(model_dir, voice_id, tuple(c.duration_s for c in voice.clips), settings,
                                        device)

        def work(_task: Background) -> object:
            from s2studio.train.clips import check_enough, clips_from_voice
            from s2studio.train.estimate import measure_step
            from s2studio.train.loop import TrainSettings

            clips = tuple(clips_from_voice(library, voice_id))
            check_enough(list(clips))
            return measure_step(Path(model_dir), clips, TrainSettings(**settings), device)

        self._task.start(work)

    def stop(self) -> None:
        """Finish the current step, save a checkpoint, end the run (resumable)."""
        self._task.cancel.set()
        if self._stop is not None:
            self._stop.set()  # type: ignore[attr-defined]

    def wait(self) -> None:
        self._task.wait()

    def _done(self, result: object, error: str) -> None:
        if self._estimating is not None:
            key, self._estimating = self._estimating, None
            if result is not None:
                ESTIMATES[key] = result
            self.estimated.emit(result, error)
            return
        self._stop = None
        name, started = self._run
        took = time.monotonic() - started
        if error:
            logger.warning("fine-tuning “%s” failed after %.0f s: %s", name, took, error)
        else:
            logger.info("fine-tuning “%s” %s after %.0f s", name, f"finished: {result}" if result else "stopped",
                        took)
        self.ended.emit(str(result or ""), error)
