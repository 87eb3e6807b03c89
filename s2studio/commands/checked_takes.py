"""`synth --script` with takes: `--takes N` renders every line N times at once (side by side on the batch) and
writes each take as its own files (`take_path`: `mix_take1.wav` … `mix_takeN.wav`); `--pick best` keeps instead each
line's take that the checks rank best (`state.take_check.best`) in one set of files, `--pick first` the first;
`--check FILE` writes one JSON object per line of the script (every take's verdict, scores and reasons, and which
take was kept), `--strict` exits 1 when a kept take failed a check. Without --pick, --check or --strict nothing is
checked and a render costs what it did.

The checks run in this process once the takes are made (the command line has its model loaded already; the
studio runs them in a process of their own). The N takes are N passes over the script, each pass with its own
seeds (pass k draws line i with base + k·lines + i, so no two takes share a seed); a pass conditions each line on
that pass's earlier lines.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from s2studio.audio.asr import AsrSettings
from s2studio.audio.asr_models import DEFAULT_MODEL
from s2studio.checks.settings import CheckSettings
from s2studio.commands.outputs import check_file
from s2studio.engine.api import SAMPLE_RATE, LineFinished, SynthesisRequest
from s2studio.errors import UserError, printable
from s2studio.state.atomic import write_text_atomic
from s2studio.state.take_check import TakeCheck, best
from s2studio.state.voices import Voice, VoiceLibrary

PICKS = ("best", "first")
MAX_TAKES = 16


@dataclass(frozen=True)
class Picking:
    """What `--takes`, `--pick`, `--check` and `--strict` ask for."""

    takes: int = 1
    pick: str | None = None
    """None: every take is written (`each_take`); "best" or "first": one take of each line is kept."""
    report: Path | None = None
    strict: bool = False
    asr: AsrSettings = AsrSettings(DEFAULT_MODEL)

    @property
    def checking(self) -> bool:
        return self.report is not None or self.strict or (self.takes > 1 and self.pick == "best")

    @property
    def each_take(self) -> bool:
        """Every take goes to its own files (`take_path`)."""
        return self.takes > 1 and self.pick is None


def add_arguments(add: Callable[..., None]) -> None:
    """The options, through script_args' `add` (into its argument group)."""
    add("--takes", type=int, default=1, metavar="N",
        help=f"render every line N times at once (at most {MAX_TAKES}; side by side with --fast): each take to its own "
             "files, NAME_take1.wav … NAME_takeN.wav (every output so named), or one set with --pick")
    add("--pick", default=None, metavar="best|first",
        help="keep one take of each line in one set of files: best (the one the take checks rank best) or first")
    add("--check", type=Path, metavar="FILE.jsonl",
        help="check every take (words heard, pace, fade, cut-off end, runaway, pauses, clipping, voice) and write "
             "one JSON object per line: each take's verdicts, scores and reasons, and the take kept")
    add("--strict", action="store_true", help="exit with status 1 when a kept take failed a check")
    add("--check-asr-model", default=DEFAULT_MODEL, metavar="SIZE|DIR",
        help=f"the speech-recognition model of the checks (default {DEFAULT_MODEL}), a size already on "
             "this computer or a folder; the checks download nothing: `s2studio transcribe --model SIZE` does")


def picking_from_args(args: argparse.Namespace, batching: str) -> Picking:
    """The options, refused before the slow load when they cannot work."""
    picking = Picking(getattr(args, "takes", 1), getattr(args, "pick", None), getattr(args, "check", None),
                      bool(getattr(args, "strict", False)),
                      AsrSettings(getattr(args, "check_asr_model", DEFAULT_MODEL) or DEFAULT_MODEL))
    if not 1 <= picking.takes <= MAX_TAKES:
        raise UserError(f"--takes must be between 1 and {MAX_TAKES}, got {picking.takes}")
    if picking.pick is not None and picking.pick not in PICKS:
        raise UserError(f"unknown --pick {picking.pick!r}; use best or first")
    if picking.each_take and (picking.report is not None or picking.strict):
        raise UserError("--check and --strict judge the takes to keep one of each line; add --pick best, or leave "
                        "them out to write every take")
    if picking.checking and batching != "line":
        raise UserError("the take checks judge one line at a time; render with --batching line")
    check_file(picking.report, "--check")
    return picking


def voice_clips(library: VoiceLibrary, voice: Voice) -> tuple[Any, ...]:
    """The voice's clips as the checks compare with them (file and transcript)."""
    from s2studio.checks.checker import Clip  # noqa: PLC0415

    return tuple(Clip(str(library.clip_path(voice, c)), c.transcript) for c in voice.clips)


def take_path(path: Path, take: int) -> Path:
    """Where take `take` (from 1) of an output goes: `mix.wav` -> `mix_take1.wav`, a folder `stems` -> `stems_take1`."""
    return path.with_name(f"{path.stem}_take{take}{path.suffix}")


def render_takes(generate: Callable[[Sequence[SynthesisRequest]], list[list[LineFinished]]], request: SynthesisRequest,
                 picking: Picking, clips: Mapping[str, tuple[Any, ...]], quiet: bool = False
                 ) -> tuple[list[list[LineFinished]], list[dict[str, Any]]]:
    """The takes of each set of files to write, every line's in the order the engine gave them (every pass with
    `each_take`, else the kept take of each line), and the report of each line (empty when nothing is checked).
    `clips`: line id -> its voice's clips. `generate` renders the passes (side by side where the engine batches) and
    gives each pass's takes in script order."""
    asked = []
    for k in range(picking.takes):
        asked.append(replace(request, job_id=f"{request.job_id}-take{k + 1}",
                             sampling=request.sampling.later(k * len(request.lines))))
    passes = generate(asked)
    if picking.each_take:
        return passes, []
    if not picking.checking:
        return [passes[0]], []
    from s2studio.checks.checker import Checker, CheckJob  # noqa: PLC0415 - whisper and the voice encoder

    checker = Checker(CheckSettings(), picking.asr)
    skipped = words_skipped(checker)
    if skipped:
        print(f"warning: the words check is skipped: {skipped}", file=sys.stderr)
    texts = {ln.line_id: ln.text for ln in request.lines}
    limit = request.sampling.max_frames or None
    kept, reports = [], []
    shown = not quiet and sys.stderr.isatty()  # a progress line rewritten in place: a terminal's, not a log's
    for number, first in enumerate(passes[0], 1):
        takes = [p[number - 1] for p in passes]
        results: list[TakeCheck] = []
        for k, take in enumerate(takes):
            if shown:
                print(f"\rchecking line {number} of {len(passes[0])}, take {k + 1} of {len(takes)}", end="",
                      file=sys.stderr, flush=True)
            results.append(checker.check(CheckJob(take.take_id, take.line_id, texts[take.line_id], take.audio,
                                                  SAMPLE_RATE, limit, clips.get(take.line_id, ()))))
        index = 0 if picking.pick == "first" else best(enumerate(results)) or 0
        kept.append(takes[index])
        reports.append(line_report(number, first.line_id, texts[first.line_id], takes, results, index))
    if shown:
        print(file=sys.stderr)
    return [kept], reports


def words_skipped(checker: Any) -> str:
    """Why `checker` cannot check the words ("" when it can), said with this command's option: the checks' own
    line names the studio's setting, and a recognizer that is not here is never downloaded for a check."""
    problem = checker.words_problem()
    if not problem:
        return ""
    from s2studio.audio.asr_local import present_instead  # noqa: PLC0415 - only when the model is missing
    from s2studio.audio.asr_models import asr_missing, describe, find_model  # noqa: PLC0415

    model = checker.asr.model
    try:
        if asr_missing() or find_model(model) is not None:
            return problem
    except UserError:
        return problem
    other = present_instead(model)
    instead = f"; “{other.label}” is: --check-asr-model {shlex.quote(other.model)}" if other else ""
    return (f"the speech-recognition model “{describe(model)}” is not on this computer: pass --check-asr-model "
            f"SIZE|DIR with one that is{instead} (or download it once: s2studio transcribe --model "
            f"{shlex.quote(model)} CLIP)")


def line_report(number: int, line_id: str, text: str, takes: Sequence[LineFinished], results: Sequence[TakeCheck],
                kept: int) -> dict[str, Any]:
    return {"line": number, "line_id": line_id, "text": text, "kept": kept + 1,
            "verdict": results[kept].verdict,
            "takes": [{"take": k + 1, "take_id": t.take_id, "seed": t.seed, "seconds": round(len(t.audio) / SAMPLE_RATE, 3),
                       "verdict": r.verdict, "summary": r.summary(), **r.to_json()}
                      for k, (t, r) in enumerate(zip(takes, results, strict=True))]}


def finish(picking: Picking, reports: Sequence[dict[str, Any]]) -> int:
    """Write the report, say what the checks found; the exit status (1 only with --strict and a failed take)."""
    if not reports:
        return 0
    if picking.report is not None:
        write_text_atomic(picking.report, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in reports))
    failed = [r["line"] for r in reports if r["verdict"] == "failed"]
    where = f" (report: {printable(picking.report)})" if picking.report is not None else ""
    if failed:
        shown = ", ".join(map(str, failed[:12])) + (" …" if len(failed) > 12 else "")
        print(f"checks: {len(failed)} of {len(reports)} kept take(s) failed a check, line(s) {shown}{where}",
              file=sys.stderr)
    else:
        print(f"checks: every kept take passed or only warned ({len(reports)} line(s)){where}", file=sys.stderr)
    return 1 if failed and picking.strict else 0
