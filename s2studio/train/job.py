"""A fine-tuning job in a process of its own, as the studio runs it (`s2studio train-job`).

Torch never enters the window's process (design.md §1): the studio starts this process, writes one JSON request
line on its stdin and reads one JSON line per event from its stdout. The request names the job — `"train"` (a
whole run, `train.run.train`) or `"estimate"` (one timed step, `train.estimate.measure_step`) — the voice library
folder, the voice, the model and run folders and the `TrainSettings` fields. Out come `{"event": ...}` lines
(`train.events.event_line`), one `{"estimate": ...}` line, or one `{"error": message}` line for what a person
reads. A line `stop` on stdin — or stdin closing, because the studio went away — stops a run the way the
dialog's Stop does: the current step finishes, a checkpoint is saved, and the run can be resumed from it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import threading
from pathlib import Path
from typing import IO

from s2studio.errors import UserError
from s2studio.train.events import event_line

logger = logging.getLogger(__name__)


def _write(out: IO[str], row: dict | str) -> None:
    out.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
    out.flush()


def _stop_on_request(stdin: IO[str], stop: object) -> None:
    """Set `stop` at a `stop` line or the end of stdin (the studio closed it, or went away)."""
    for line in stdin:
        if line.strip() == "stop":
            break
    stop.set()  # type: ignore[attr-defined]


def run_job(request: dict, stdin: IO[str], out: IO[str]) -> None:
    """Do what `request` asks, writing its lines to `out`; errors propagate (`serve` turns them into a line)."""
    from s2studio.state.voices import VoiceLibrary
    from s2studio.train.clips import check_enough, clips_from_voice
    from s2studio.train.loop import TrainSettings

    library = VoiceLibrary(Path(request["voices"]))
    clips = tuple(clips_from_voice(library, request["voice_id"]))
    settings = TrainSettings(**request["settings"])
    model_dir, device = Path(request["model_dir"]), request.get("device", "auto")
    if request["job"] == "estimate":
        from s2studio.train.estimate import measure_step

        check_enough(list(clips))
        _write(out, {"estimate": dataclasses.asdict(measure_step(model_dir, clips, settings, device))})
        return
    from s2studio.train.run import RunRequest, StopFlag, train

    stop = StopFlag()
    threading.Thread(target=_stop_on_request, args=(stdin, stop), name="stop-reader", daemon=True).start()
    out_dir = Path(request["out_dir"])
    run = RunRequest(model_dir, out_dir, clips, settings, device=device, save_every=int(request.get("save_every", 0)),
                     resume=out_dir if request.get("resume") else None,
                     metrics_out=Path(request["metrics_out"]) if request.get("metrics_out") else None)
    for event in train(run, stop):
        _write(out, '{"event": ' + event_line(event) + "}")


def serve(stdin: IO[str] = sys.stdin, out: IO[str] = sys.stdout) -> int:
    """Read the request line, run it; a failure becomes one `{"error": ...}` line (the traceback goes to stderr)."""
    try:
        request = json.loads(stdin.readline())
        run_job(request, stdin, out)
    except UserError as exc:
        _write(out, {"error": str(exc)})
        return 1
    except Exception as exc:  # noqa: BLE001 - the studio shows one line; the details go to stderr, then its log
        logger.exception("the fine-tuning job failed")
        _write(out, {"error": f"{type(exc).__name__}: {exc}"})
        return 1
    return 0
