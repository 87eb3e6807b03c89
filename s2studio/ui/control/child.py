"""Work the window hands to a process of its own: anything that imports torch (design.md §1 keeps torch out of
the window's process), run as a command of the studio's own command line.

`studio_command` is how the studio starts itself (the installed bundle or `python -m s2studio`); `ChildJob`
speaks the JSON-lines protocol of such a job: one request line in, one line per result out, `stop` in to end
it early. QtCore-free: it runs on a `Background` thread, which turns its `UserError`s into the task's message.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator

from s2studio.errors import UserError

logger = logging.getLogger(__name__)


def studio_command(*args: str) -> list[str]:
    """The command line of `s2studio ARGS...` from this process's interpreter (or the frozen bundle)."""
    command = [sys.executable] if getattr(sys, "frozen", False) else [sys.executable, "-m", "s2studio"]
    return [*command, *args]


class ChildJob:
    """`s2studio COMMAND` in its own process, fed `request` as one JSON line; `rows()` yields its JSON lines."""

    def __init__(self, command: str, request: dict) -> None:
        self.command = command
        self.request = request
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._stopped = False

    def rows(self) -> Iterator[dict]:
        """Start the process and yield each line it writes, decoded; an `{"error": ...}` line, or an exit without
        one, raises `UserError` once the process has ended."""
        error = ""
        with tempfile.TemporaryFile() as err:
            with self._lock:
                self._proc = subprocess.Popen(studio_command("-v", self.command), stdin=subprocess.PIPE,
                                              stdout=subprocess.PIPE, stderr=err, text=True, encoding="utf-8")
                assert self._proc.stdin is not None and self._proc.stdout is not None
                self._proc.stdin.write(json.dumps(self.request) + "\n")
                self._proc.stdin.flush()
                if self._stopped:
                    self._send_stop()
            try:
                for line in self._proc.stdout:
                    try:
                        row = json.loads(line)
                    except ValueError:
                        logger.warning("%s wrote a line that is not JSON: %r", self.command, line[:200])
                        continue
                    if "error" in row:
                        error = str(row["error"])
                    else:
                        yield row
            finally:  # stdin closing stops a run the consumer left early; its checkpoint is saved first
                self._close_stdin()
                code = self._proc.wait()
            err.seek(0)
            said = err.read().decode("utf-8", "replace").strip()
        if said:
            logger.log(logging.WARNING if code else logging.INFO, "%s said:\n%s", self.command, said)
        if error:
            raise UserError(error)
        if code:
            last = said.splitlines()[-1] if said else f"exit status {code}"
            raise UserError(f"The {self.command} process ended unexpectedly: {last}")

    def stop(self) -> None:
        """Ask the job to end early (safe from any thread, before or after it started)."""
        with self._lock:
            self._stopped = True
            if self._proc is not None:
                self._send_stop()

    def _send_stop(self) -> None:
        try:
            assert self._proc is not None and self._proc.stdin is not None
            self._proc.stdin.write("stop\n")
            self._proc.stdin.flush()
        except (OSError, ValueError):  # it has ended already, or its stdin is closed
            pass

    def _close_stdin(self) -> None:
        with self._lock:
            try:
                if self._proc is not None and self._proc.stdin is not None:
                    self._proc.stdin.close()
            except OSError:
                pass
