"""What a fine-tuning run reports, and its one-line JSON form between the training process and the studio.

Torch-free on purpose: the studio's window process reads these (`ui.control.finetune`) while the run itself
happens in a process of its own (`train.job`), which writes one line per event on its stdout.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class StepMetrics:
    step: int
    loss: float
    base_loss: float
    semantic_loss: float
    top_5_accuracy: float
    grad_norm: float
    """The gradients' total norm before clipping."""
    lr: float
    """The learning rate this step used."""
    seconds: float

    def json(self) -> str:
        return json.dumps(asdict(self))


@dataclass(frozen=True)
class RunEvent:
    """What a run reports: a finished step, a saved checkpoint, a status line, or the end."""

    kind: str
    """"status", "step", "checkpoint", "stopped" or "finished"."""
    message: str = ""
    metrics: StepMetrics | None = None
    path: Path | None = None
    eta_seconds: float | None = None


def event_line(event: RunEvent) -> str:
    """`event` as one line of JSON (no newline)."""
    row = asdict(event)
    row["path"] = None if event.path is None else str(event.path)
    return json.dumps(row)


def event_from(row: dict) -> RunEvent:
    """The event a decoded `event_line` describes."""
    metrics = row.get("metrics")
    path = row.get("path")
    return RunEvent(str(row["kind"]), str(row.get("message", "")),
                    None if metrics is None else StepMetrics(**metrics), None if path is None else Path(path),
                    row.get("eta_seconds"))
