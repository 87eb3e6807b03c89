"""The model's lifecycle as the window sees it: loading (with progress), ready, or none; and the configuration
that last loaded, to fall back on. QtCore only.

A load that fails (a GPU that is not there, too little memory for a mode) has already cost the model that
worked: the engine unloads before it loads. So the controller loads the last configuration that worked again at
once and says so (`fell_back`), and a configuration is only `working` once it has loaded: the window saves
that one, never one that failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from s2studio.engine import api
from s2studio.engine.plan import load_request
from s2studio.settings import Loading
from s2studio.worker import EngineHost


@dataclass(frozen=True)
class LoadConfig:
    """A model folder and the settings that decide how it loads."""

    folder: Path
    loading: Loading

    def same_load(self, other: LoadConfig | None) -> bool:
        return other is not None and (self.folder, self.loading) == (other.folder, other.loading)


class ModelController(QObject):
    loading = Signal(float, str)
    """(progress 0..1, what the engine is doing) of the running load."""
    ready = Signal(object)
    """`api.ModelInfo` of the loaded model."""
    unloaded = Signal(str)
    """No model any more: why ("No model (loading cancelled)", or the engine's error)."""
    fell_back = Signal(str, object, object)
    """(the engine's error, the `LoadConfig` that failed, the working `LoadConfig` being loaded again)."""
    busy_changed = Signal(bool)

    def __init__(self, host: EngineHost, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.info: api.ModelInfo | None = None
        self.working: LoadConfig | None = None
        """The configuration of the last load that succeeded."""
        self.attempt: LoadConfig | None = None
        """The configuration of the running (or last) load."""
        self.job_id: str | None = None
        self._falling_back = False
        host.model_loading.connect(self._on_loading)
        host.model_ready.connect(self._on_ready)
        host.job_finished.connect(self._on_finished)
        host.job_failed.connect(self._on_failed)

    @property
    def busy(self) -> bool:
        return self.job_id is not None

    @property
    def folder(self) -> Path | None:
        return self.attempt.folder if self.attempt else None

    def load(self, folder: Path, settings: Loading) -> None:
        """Load (or reload with other settings) the model in `folder`."""
        if self.job_id is not None:  # a newer choice replaces the load still running
            self.host.cancel(self.job_id)
        self.attempt = LoadConfig(Path(folder), settings.loading)
        self.job_id = self.host.new_job_id("load")
        self.host.load(load_request(self.job_id, Path(folder), settings))
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
            self.working = self.attempt
            self._falling_back = False
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
        failed, working = self.attempt, self.working
        if working is not None and failed is not None and not working.same_load(failed) and not self._falling_back:
            self._falling_back = True
            self.fell_back.emit(event.error, failed, working)
            self.load(working.folder, working.loading)
            return
        self._falling_back = False
        self.busy_changed.emit(False)
        self.unloaded.emit(event.error)
