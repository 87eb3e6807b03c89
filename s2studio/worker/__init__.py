"""The engine thread: `EngineHost` (GUI side) and `EngineWorker` (engine side). QtCore only."""

from s2studio.worker.host import EngineHost, EngineWorker

__all__ = ["EngineHost", "EngineWorker"]
