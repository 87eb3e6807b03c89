"""A fine-tuning run driven from the window: `train.run.train` on its own thread, its events on the GUI thread.

Training is not engine work: it loads its own copy of the model (training needs float32 weights, gradients and
the optimiser state, which the engine's inference model has none of) and runs for minutes to hours, so it gets a
thread of its own (`Background`) rather than the engine thread, which keeps rendering and previewing. Torch and
the trainer are imported on that thread, never by the window. Stopping sets the run's `StopFlag`: the current
step finishes, a checkpoint is saved, and the run can be resumed from it. QtCore only.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal

from s2studio.state.voices import VoiceLibrary
from s2studio.ui.control.background import Background

RUNS = "training"
"""Under the data folder: one run folder per voice id (its checkpoints, tokens and final LoRA)."""


def run_folder(data_dir: Path, voice_id: str) -> Path:
    return Path(data_dir) / RUNS / voice_id


def set_aside(folder: Path) -> Path:
    """Rename an earlier run folder to `<name>.earlier-N` (a new run starts clean; the old one's work is kept)."""
    n = 1
    while (aside := folder.with_name(f"{folder.name}.earlier-{n}")).exists():
        n += 1
    folder.rename(aside)
    return aside


def has_checkpoint(folder: Path) -> bool:
    return any((folder / "checkpoints").glob("step_*/lora.safetensors")) if folder.is_dir() else False


class FineTuneRun(QObject):
    """One run at a time; `event` carries each `train.run.RunEvent` (step, checkpoint, status, stopped,
    finished), `ended` the final LoRA's path ("" when stopped or failed) and the error message ("" if none)."""

    event = Signal(object)
    ended = Signal(str, str)

    def __init__(self, library: VoiceLibrary, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.library = library
        self._task = Background("fine-tune", self)
        self._task.done.connect(self._done)
        self._stop: object | None = None

    @property
    def running(self) -> bool:
        return self._task.running

    def start(self, voice_id: str, model_dir: Path, out_dir: Path, settings: dict, *, device: str = "auto",
              save_every: int = 0, resume: bool = False) -> None:
        """Train on the voice's clips; `settings`: `TrainSettings` fields (preset, steps, batch_size, ...)."""
        if self.running:
            return
        library = self.library

        def work(task: Background) -> object:
            from s2studio.train.clips import clips_from_voice
            from s2studio.train.loop import TrainSettings
            from s2studio.train.run import RunRequest, StopFlag, train

            stop = StopFlag()
            self._stop = stop
            clips = tuple(clips_from_voice(library, voice_id))
            request = RunRequest(Path(model_dir), Path(out_dir), clips, TrainSettings(**settings), device=device,
                                 save_every=save_every, resume=Path(out_dir) if resume else None)
            final = ""
            for ev in train(request, stop):
                if task.cancel.is_set():
                    stop.set()
                self.event.emit(ev)
                if ev.kind == "finished":
                    final = str(ev.path)
            return final

        self._task.start(work)

    def stop(self) -> None:
        """Finish the current step, save a checkpoint, end the run (resumable)."""
        self._task.cancel.set()
        if self._stop is not None:
            self._stop.set()  # type: ignore[attr-defined]

    def wait(self) -> None:
        self._task.wait()

    def _done(self, result: object, error: str) -> None:
        self._stop = None
        self.ended.emit(str(result or ""), error)
