"""The Fine-tune dialog's checkpoints and their previews: the rows (`CheckpointRow`) of the run's saved
checkpoints, and the voice's test sentence spoken with each checkpoint's LoRA, rendered one at a time.

The previews are rendered by the studio's engine (`VoicePreview` on the engine host), not in the training process:
the engine has the model loaded already and switches LoRAs by merging them into it, whereas the trainer's model is
a float32 copy in training mode with no codec loaded, so rendering there would need a second codec load and an
inference path through unmerged training layers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from s2studio.state.voices import Voice, VoiceLibrary
from s2studio.ui.voices.finetune.checkpoint_table import CheckpointRow


class CheckpointPreviews(QObject):
    """The rows, each with the state of its preview; `changed` whenever a row or its state changed."""

    changed = Signal()

    def __init__(self, voice_of: Callable[[], Voice], library: VoiceLibrary, host: object | None = None,
                 model_info: object | None = None, parent: QObject | None = None) -> None:
        """`voice_of`: the voice as it is now (its clips speak the previews); `host`: the studio's
        `worker.EngineHost` (None: no previews), `model_info` the model it has loaded."""
        super().__init__(parent)
        self.voice_of = voice_of
        self.rows: list[CheckpointRow] = []
        self._previewing: CheckpointRow | None = None
        self.previews = None
        if host is not None:
            from s2studio.ui.control.preview import VoicePreview  # noqa: PLC0415 - only with an engine

            self.previews = VoicePreview(host, library, self)  # type: ignore[arg-type]
            self.previews.info = model_info  # type: ignore[assignment]
            self.previews.ready.connect(self._ready)
            self.previews.busy_changed.connect(self._busy)

    def add_earlier(self, folder: Path, losses: dict[int, float]) -> None:
        """A row for each checkpoint an earlier run saved in `folder` (`losses`: that run's, by step)."""
        for step_folder in sorted((folder / "checkpoints").glob("step_*")):
            if (step_folder / "lora.safetensors").is_file() and step_folder.name[5:].isdigit():
                step = int(step_folder.name[5:])
                self.add(CheckpointRow(step, losses.get(step), step_folder))

    def add(self, row: CheckpointRow) -> None:
        """A row for a saved checkpoint, its preview queued on the engine."""
        self.rows = [r for r in self.rows if r.folder != row.folder]
        self.rows.append(row)
        self.rows.sort(key=lambda r: r.step)
        if self.previews is None or self.previews.info is None:
            row.state = "no model"
        self.changed.emit()
        self._pump()

    def clear(self) -> None:
        """No rows: their run was set aside."""
        self.rows = []
        self.changed.emit()

    def _pump(self) -> None:
        """Render the next waiting checkpoint's preview (one at a time; a cached one is ready at once)."""
        previews = self.previews
        while previews is not None and self._previewing is None and not previews.busy:
            row = next((r for r in self.rows if r.state == "waiting"), None)
            if row is None:
                return
            row.state = "rendering"
            self._previewing = row
            found = previews.preview(self.voice_of(), lora=row.lora)
            if found is None and not previews.busy:  # refused (no model): said in `message`
                row.state, self._previewing = "failed", None
            self.changed.emit()

    def _ready(self, _voice_id: str, path: Path) -> None:
        row = self._previewing
        if row is not None:
            row.preview, row.state, self._previewing = Path(path), "ready", None
            self.changed.emit()
            QTimer.singleShot(0, self._pump)

    def _busy(self, busy: bool) -> None:
        if not busy and self._previewing is not None:  # ended without a preview: the engine said why
            self._previewing.state, self._previewing = "failed", None
            self.changed.emit()
        if not busy:
            QTimer.singleShot(0, self._pump)
