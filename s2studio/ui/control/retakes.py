"""Best of N and Retake until it passes: render lines again and again, keep the take the checks rank best.
QtCore only.

A run renders its lines (one ordinary render job each round, through `RenderFlow`), waits until the round's
takes are made and checked (`TakeChecks.checked`), then decides per line: *best of N* renders a line until the
run has made N takes of it; *until it passes* renders a line until one of its takes passes (warnings pass) or
K takes are made. A line that is done gets its best take of the run picked (`state.take_check.best`); every
other take stays in its take list. A run ends when every line is done, or at once when a render fails, is
cancelled or cannot start (`message` says which lines ended how).

Where the engine has batch slots (`RenderFlow.max_batch` above 1), best of N renders a line's missing takes in
one round, side by side (as Render Takes… does: N takes cost little more than one); on an engine that runs one
request at a time, and for *until it passes* (which stops at the first take that passes), a round makes one take.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from PySide6.QtCore import QObject, QTimer, Signal

from s2studio.errors import UserError
from s2studio.state.project import Take
from s2studio.state.script import Line
from s2studio.state.take_check import best
from s2studio.ui.control.document import Document
from s2studio.ui.control.render import RenderFlow
from s2studio.ui.control.session import RenderSession
from s2studio.ui.control.take_checks import TakeChecks

log = logging.getLogger(__name__)

Mode = Literal["best_of", "until_pass"]


@dataclass
class _Run:
    mode: Mode
    limit: int
    lines: dict[str, Line]
    before: dict[str, set[str]]
    """Each line's take ids when the run began: the run's takes are the others."""
    rendering: bool = False
    done: dict[str, str] = field(default_factory=dict)
    """line id -> how it ended, in words."""


class Retakes(QObject):
    message = Signal(str)
    finished = Signal()

    def __init__(self, document: Document, checks: TakeChecks, flow: RenderFlow, session: RenderSession,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.document, self.checks, self.flow, self.session = document, checks, flow, session
        self.run: _Run | None = None
        self.rounds = 0
        checks.checked.connect(lambda _line, _take: self._next())
        session.finished.connect(self._rendered)
        session.failed.connect(lambda error: self._stop(f"stopped: the render failed ({error})"))

    @property
    def busy(self) -> bool:
        return self.run is not None

    def best_of(self, lines: Sequence[Line], n: int) -> None:
        """Render each line until the run has made `n` takes of it; keep the best."""
        self._begin("best_of", lines, n)

    def until_pass(self, lines: Sequence[Line], k: int) -> None:
        """Render each line until a take passes the checks, at most `k` takes; keep the best."""
        self._begin("until_pass", lines, k)

    def cancel(self) -> None:
        self._stop("stopped")

    # -- a run -----------------------------------------------------------------------------------

    def _begin(self, mode: Mode, lines: Sequence[Line], limit: int) -> None:
        if self.run is not None or limit < 1:
            return
        if not lines:
            self.message.emit("Put the cursor on a line, or select lines, first.")
            return
        entries = self.document.project.lines
        self.run = _Run(mode, limit, {ln.line_id: ln for ln in lines},
                        {ln.line_id: {t.take_id for t in entries[ln.line_id].takes} if ln.line_id in entries else set()
                         for ln in lines})
        self.rounds = 0
        self._round(list(lines), self._takes_per_round(limit))

    def takes_of(self, line_id: str) -> list[Take]:
        """The takes the run made of a line, oldest first."""
        assert self.run is not None
        entry = self.document.project.lines.get(line_id)
        before = self.run.before[line_id]
        return [t for t in entry.takes if t.take_id not in before] if entry is not None else []

    def _takes_per_round(self, missing: int) -> int:
        """Takes of each line the next round renders, when each line still needs `missing` takes."""
        assert self.run is not None
        return max(1, missing) if self.run.mode == "best_of" and self.flow.max_batch > 1 else 1

    def _round(self, lines: list[Line], takes: int = 1) -> None:
        if self.run is None:
            return
        if self.flow.busy:  # the last job is still winding down: start when it has
            QTimer.singleShot(100, lambda: self._round(lines, takes))
            return
        self.rounds += 1
        self.run.rendering = True
        try:
            self.flow.render(lines, takes=takes)
        except UserError as exc:
            self._stop(f"stopped: {exc}")
            return
        if not self.flow.busy:
            self._stop("stopped: the lines could not be rendered (is each speaker cast?)")

    def _rendered(self, cancelled: bool) -> None:
        if self.run is None:
            return
        if cancelled:
            self._stop("stopped: the render was cancelled")
            return
        self.run.rendering = False
        self._next()

    def _next(self) -> None:
        run = self.run
        if run is None or run.rendering:
            return
        if self.flow.busy:  # the job's last signals are still on their way: look again when they have arrived
            QTimer.singleShot(50, self._next)
            return
        again, missing = [], run.limit
        for line_id, line in run.lines.items():
            if line_id in run.done:
                continue
            takes = self.takes_of(line_id)
            if any(t.check is None and self.checks.waiting(t) for t in takes):
                log.debug("retakes: line %s waits for its checks", line_id)
                return  # the round's takes are not all checked yet
            passed = [t for t in takes if t.check is not None and t.check.verdict in ("passed", "warning")]
            if run.mode == "until_pass" and passed:
                run.done[line_id] = f"passed at take {len(takes)}"
            elif len(takes) >= run.limit or not takes:
                run.done[line_id] = (f"best of {len(takes)}" if run.mode == "best_of" else
                                     f"none of {len(takes)} takes passed; kept the best")
            else:
                again.append(line)
                missing = min(missing, run.limit - len(takes))
                continue
            self._keep_best(line_id, takes)
        log.info("retakes round %d: %d line(s) again, %d done", self.rounds, len(again), len(run.done))
        if again:
            self._round(again, self._takes_per_round(missing))
        else:
            self._stop(None)

    def _keep_best(self, line_id: str, takes: list[Take]) -> None:
        entry = self.document.project.lines.get(line_id)
        if entry is None or not takes:
            return
        index = best((i, t.check) for i, t in enumerate(takes))
        keep = takes[index if index is not None else -1]
        self.document.pick(line_id, entry.takes.index(keep))

    def _stop(self, why: str | None) -> None:
        run, self.run = self.run, None
        if run is None:
            return
        numbers = {ln.line_id: i for i, ln in enumerate(self.document.script.lines, 1)}
        ended = "; ".join(f"line {numbers.get(k, '?')}: {v}" for k, v in run.done.items())
        failed = sum("none of" in v for v in run.done.values())
        head = "Best of N" if run.mode == "best_of" else "Retake until it passes"
        if why is not None:
            self.message.emit(f"{head} {why}" + (f" ({ended})" if ended else ""))
        elif failed:
            self.message.emit(f"{head}: {failed} line{'s' * (failed != 1)} never passed in {run.limit} takes, "
                              f"the best kept ({ended})")
        else:
            self.message.emit(f"{head}: done ({ended})")
        self.finished.emit()
