"""The checker's own process: where the speech recognizer and the voice encoder run, never in the window's
process (which never imports torch) nor in the engine's loop (a take is checked after it is made).

It runs at a lower priority (nice 10) with one thread, so a render on the same cores keeps its speed: the checks
take what the engine leaves. `serve` is its loop: it receives `("check", job)` and `("settings", settings, asr)`
over a `multiprocessing` pipe and answers `("done", take_id, TakeCheck)` or `("failed", take_id, message)`.
"""

from __future__ import annotations

import logging
import os
import pickle
import sys
from multiprocessing.connection import Connection

from s2studio.audio.asr import AsrSettings
from s2studio.checks.checker import Checker
from s2studio.checks.settings import CheckSettings
from s2studio.errors import UserError

log = logging.getLogger(__name__)

NICE = 10


def limit_threads(threads: int) -> None:
    """Use `threads` threads for the numerical libraries of this process (set before they start their pools)."""
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(threads)
    torch = sys.modules.get("torch")  # loaded already: told directly (it read the variables when it started)
    if torch is not None:
        torch.set_num_threads(threads)


def serve(conn: Connection, settings: CheckSettings, asr: AsrSettings, threads: int = 1) -> None:
    """The checker process's loop, until the pipe closes or says None."""
    try:
        os.nice(NICE)
    except (AttributeError, OSError):  # Windows, or not allowed: the checks still run
        pass
    limit_threads(threads)  # before Whisper and torch are loaded: they size their pools once
    checker = Checker(settings, asr)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError, pickle.UnpicklingError):  # closed, or cut off by the studio ending mid-send
            return
        if message is None:
            return
        if message[0] == "settings":
            checker = Checker(message[1], message[2])
            continue
        job = message[1]
        try:
            reply = ("done", job.take_id, checker.check(job))
        except UserError as exc:
            reply = ("failed", job.take_id, str(exc))
        except Exception as exc:  # noqa: BLE001 - one take's failure is reported, the process goes on
            log.exception("checking take %s failed", job.take_id)
            reply = ("failed", job.take_id, f"{type(exc).__name__}: {exc}")
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            return
