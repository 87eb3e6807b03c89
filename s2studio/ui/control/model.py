"""The model's lifecycle as the window sees it: loading (with progress), ready, or none. QtCore only."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal

from s2studio.engine import api
from s2studio.engine.plan import load_request
from s2studio.state.project import GenerationSettings
from s2studio.worker import EngineHost


class ModelController(QObject):
    loading = Signal(float, str)
    """(progress 0..1, what the engine is doing) of the running load."""
    ready = Signal(object)
    """`api.ModelInfo` of the loaded model."""
    unloaded = Signal(str)
    """No model any more: why ("No model (loading cancelled)", or the engine's error)."""
    busy_changed = Signal(bool)

    def __init__(self, host: EngineHost, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.info: api.ModelInfo | None = None
        self.folder: Path | None = None
        self.job_id: str | None = None
        host.model_loading.connect(self._on_loading)
        host.model_ready.connect(self._on_ready)
        host.job_finished.connect(self._on_finished)
        host.job_failed.connect(self._on_failed)

    @property
    def busy(self) -> bool:
        return self.job_id is not None

    def load(self, folder: Path, settings: GenerationSettings) -> None:
        """Load (or reload with other settings) the model in `folder`."""
        self.folder = folder
        self.job_id = self.host.new_job_id("load")
        self.host.load(load_request(self.job_id, folder, settings))
        self.busy_changed.emit(True)

    def cancel(self) -> None:
        if self.job_id is not None:
            self.host.cancel(self.job_id)

    def _on_loading(self, event: api.ModelLoading) -> None:
        if event.job_id == self.job_id:
            self.loading.emit(event.progress, event.message)

    def _on_ready(self, event: api.ModelReady) -> None:
        if event.job_id == self.job_id:
            self.info = event.info
            self.ready.emit(event.info)

    def _on_finished(self, event: api.JobFinished) -> None:
        if event.job_id != self.job_id:
            return
        self.job_id = None
        self.busy_changed.emit(False)
        if event.cancelled and self.info is None:
            self.unloaded.emit("No model (loading cancelled)")

    def _on_failed(self, event: api.JobFailed) -> None:
        if event.job_id != self.job_id:
            return
        self.job_id = None
        self.info = None
        self.busy_changed.emit(False)
        self.unloaded.emit(event.error)
