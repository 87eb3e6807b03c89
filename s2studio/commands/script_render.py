"""`s2studio synth --script FILE --cast NAME=VOICE …`: a whole script to audio files, headless.

The command-line twin of the studio's render button (issue 4, design.md §5–§8): the script is parsed
like the editor parses it, the cast maps its speakers to voices of the library, the engine renders
it (line mode unless `--batching upstream` is asked for) and `audio/export.py` writes the mix, the
stems and the subtitles exactly as the studio's export does.

Everything a person can get wrong (the script, the cast, the outputs) is checked before the slow
model load (`script_args.py`). Nothing is written unless the whole render succeeds: the audio, the stems, the subtitles and
the `--events` log are staged in one `OutputSet` (`commands/outputs.py`) and committed together.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from s2studio import __version__
from s2studio.commands import checked_takes, fleet_args
from s2studio.commands.script_args import Outputs, check_outputs, parse_cast, read_cast_script, voice_library
from s2studio.commands.render_log import EventLog, LoggedEncoder, ProgressBar
from s2studio.commands.setting_args import loading_from_args
from s2studio.engine.plan import load_request
from s2studio.engine.render import Render
from s2studio.engine.api import (
    FRAME_SAMPLES, SAMPLE_RATE, AudioChunk, Engine, Event, JobFailed, JobFinished, JobStarted, LineFinished,
    ModelInfo, ModelReady, Progress, SynthesisRequest,
)
from s2studio.settings import Batching, Sampling, seed_fields
from s2studio.errors import UserError, printable
from s2studio.state.atomic import OutputSet
from s2studio.state.script import Script
from s2studio.state.voices import Voice

EngineFactory = Callable[[], Engine]


def sampling_from_args(args: argparse.Namespace, batching: Batching = "line") -> Sampling:
    """synth's options (and `batching`, its checked `--batching`) as the sampling settings (their one validation);
    `--max-new-tokens 0` means up to the
    context, `--frames N` exactly N kept frames per batch (N + 1 made, the last one dropped, <|im_end|> off:
    `ignores_eos`)."""
    frames, max_new = getattr(args, "frames", None), args.max_new_tokens
    if max_new < 0:
        raise UserError(f"--max-new-tokens must be 0 (no limit) or more, got {max_new}")
    if frames is not None:
        if frames < 1:
            raise UserError(f"--frames must be at least 1, got {frames}")
        if max_new:
            raise UserError("give --frames or --max-new-tokens, not both")
        max_new = frames + 1
    return Sampling(temperature=args.temperature, top_p=args.top_p, top_k=getattr(args, "top_k", 30),
                    max_frames=max_new, batching=batching, **seed_fields(args.seed))


def ignores_eos(args: argparse.Namespace) -> bool:
    """`--frames` and `--ignore-eos`: never end a batch at <|im_end|> (`SynthesisRequest.ignore_eos`)."""
    return getattr(args, "frames", None) is not None or bool(getattr(args, "ignore_eos", False))


# ----------------------------------------------------------------------------- the run


def _check(events: Iterable[Event]) -> Iterator[Event]:
    """Pass events on; a failed or cancelled job becomes a UserError."""
    for ev in events:
        if isinstance(ev, JobFailed):
            raise UserError(ev.error)
        if isinstance(ev, JobFinished) and ev.cancelled:
            raise UserError("the render was cancelled; nothing was written")
        yield ev


def load_model(engine: Engine, args: argparse.Namespace, log: EventLog) -> ModelInfo:
    request = load_request("load", Path(args.model), loading_from_args(args))
    info = None
    for ev in _check(log.relay(engine.load(request, threading.Event()))):
        if isinstance(ev, ModelReady):
            info = ev.info
    if info is None:
        raise UserError(f"the model in {args.model} did not load; run with -v for details")
    return info


def run_renders(engine: Engine, renders: Sequence[Render], log: EventLog,
              bar: ProgressBar) -> dict[str, list[LineFinished]]:
    """Every render on one scheduler (side by side, as many at once as the engine runs); job id -> its takes.
    The first failure cancels the others and is the error. The clips encoded on the way go to the events log."""
    from s2studio.engine.scheduler import Job, Scheduler

    takes: dict[str, list[LineFinished]] = {r.job_id: [] for r in renders}
    failures: list[str] = []
    logged = LoggedEncoder(engine, log)
    scheduler = Scheduler(lambda: logged)
    bar.started = time.perf_counter()
    bar.total = 0

    def sink(ev: Event) -> None:
        if failures:
            return
        frames = None
        if isinstance(ev, AudioChunk):
            frames = (ev.start_sample + len(ev.samples)) // FRAME_SAMPLES
        log.write(ev, frames)
        if isinstance(ev, JobFailed):
            failures.append(ev.error)
        elif isinstance(ev, JobFinished) and ev.cancelled:
            failures.append("the render was cancelled; nothing was written")
        if failures:
            scheduler.cancel()
            return
        _count(ev, takes, bar)

    for render in renders:
        scheduler.submit(Job(render.job_id, render.work, sink))
    scheduler.run_until_idle()
    bar.close()
    if failures:
        raise UserError(failures[0])
    return takes


def _passes(engine: Engine, render: Render, passes: Sequence[SynthesisRequest], log: EventLog,
            bar: ProgressBar) -> list[list[LineFinished]]:
    """Each pass over the script (`checked_takes.render_takes`: `render` with that pass's request), on an engine
    that batches split into its scenes (`Render.pieces`): every scene of every pass side by side; each pass's takes
    in script order. A fleet, which plans the scenes itself, gets each pass whole."""
    batches = int(getattr(engine, "max_batch", 1) or 1) > 1 and not getattr(engine, "plans_scenes", False)
    pieces = [replace(render, request=request).pieces(batches=batches) for request in passes]
    by_job = run_renders(engine, [p for scenes in pieces for p in scenes], log, bar)
    return [[take for p in scenes for take in by_job[p.job_id]] for scenes in pieces]


def _count(ev: Event, takes: dict[str, list[LineFinished]], bar: ProgressBar) -> None:
    """The progress bar and the takes after one event."""
    if isinstance(ev, JobStarted):
        bar.total += len(ev.plan)
    elif isinstance(ev, AudioChunk):
        bar.samples += len(ev.samples)
    elif isinstance(ev, Progress):
        bar.frames_line = ev.frames
    elif isinstance(ev, LineFinished):
        takes[ev.job_id].append(ev)
        bar.done += 1
        bar.frames_done += int(ev.codes.shape[1])
        bar.frames_line = 0
        bar.update(force=True)
        return
    bar.update()


def _rendered_lines(script: Script, request: SynthesisRequest, takes: Sequence[LineFinished],
                    cast: dict[str, Voice]) -> list:
    """One `RenderedLine` per take, in script order, each opening the chapter of the heading before it. In
    upstream batching a take holds several lines (from its own id up to the next take's): their speakers,
    voices and texts are joined."""
    from s2studio.audio.chapters import chapter_titles
    from s2studio.audio.export import RenderedLine

    by_id = {ln.line_id: ln for ln in script.lines}
    order = [ln.line_id for ln in request.lines]
    starts = sorted(order.index(t.line_id) for t in takes)
    chapters = chapter_titles(script, (t.line_id for t in takes))
    out = []
    for take in sorted(takes, key=lambda t: order.index(t.line_id)):
        first = order.index(take.line_id)
        later = [s for s in starts if s > first]
        group = [by_id[i] for i in order[first:later[0] if later else len(order)]]
        speakers = ", ".join(dict.fromkeys(ln.speaker for ln in group))
        voices = ", ".join(dict.fromkeys(cast[ln.speaker].name for ln in group if ln.speaker in cast))
        out.append(RenderedLine(take.line_id, speakers, " ".join(ln.text for ln in group), take.audio, voice=voices,
                                number=first + 1, chapter=chapters.get(take.line_id)))
    return out


def _export(sets: Sequence[tuple[Outputs, list]], settings: Any, log: EventLog, bar: ProgressBar) -> list[Any]:
    """`export` of each set of lines to its outputs, and the events log, staged in one `OutputSet` and committed
    together: all or nothing."""
    from s2studio.audio.export import export

    def progress(fraction: float, what: str) -> None:
        if bar.enabled:
            print(f"\r{what} {fraction:4.0%}", end="", file=sys.stderr, flush=True)

    files = OutputSet()
    try:
        results = [export(lines, settings, out=outputs.out, stems_dir=outputs.stems, clips_dir=outputs.clips,
                          srt=outputs.srt, vtt=outputs.vtt, cue=outputs.cue, chapters_dir=outputs.chapters,
                          into=files, progress=progress) for outputs, lines in sets]
        if bar.enabled:
            print(file=sys.stderr)
        log.stage(files)
        files.commit()
    except BaseException:
        files.discard()
        raise
    return results


_jobs = itertools.count(1)


def default_engine() -> Engine:
    from s2studio.engine.s2 import S2Engine

    return S2Engine()


def run_script(args: argparse.Namespace, engine_factory: EngineFactory | None = None) -> int:
    """Render `args.script` with `args.cast` to the files asked for; returns 0 (errors raise UserError).

    Reads synth's options from `args`: model, device, precision, threads, seed, temperature, top_p,
    top_k, max_new_tokens, batching (None -> line), chunk_length, quiet. `engine_factory` makes the
    engine (default: `S2Engine`); tests pass a `FakeEngine`."""
    from s2studio.audio.export import ExportSettings, Metadata
    from s2studio.engine.render import render_for_script

    outputs = check_outputs(args)
    library = voice_library()
    script, cast_ids = read_cast_script(args, parse_cast(args.cast), library)
    if not script.lines:
        raise UserError(f"script {args.script} has nothing to speak; write lines like 'Alice: Hello.'")
    cast: dict[str, Voice] = {}
    for name, voice in cast_ids.items():
        try:
            cast[name] = library.resolve(voice)
        except UserError as exc:
            raise UserError(f"--cast {name}={voice}: {exc}") from None
    unused = [n for n in cast if n not in script.speakers]
    if unused:
        print(f"warning: --cast {', '.join(unused)}: no such speaker in {args.script}", file=sys.stderr)
    batching = getattr(args, "batching", None) or "line"
    if batching not in ("line", "upstream"):
        raise UserError(f"unknown --batching {batching!r}; use line or upstream")
    if args.chunk_length < 1:
        raise UserError(f"--chunk-length must be at least 1 byte, got {args.chunk_length}")
    sampling = sampling_from_args(args, batching)  # bad sampler options fail before the slow load
    picking = checked_takes.picking_from_args(args, batching)
    # what needs no codes is compiled before the load too (only tags, a speaker without a voice)
    render = render_for_script(script, cast, library, "", f"render-{os.getpid()}-{next(_jobs)}", sampling,
                               args.chunk_length)
    render = replace(render, request=replace(render.request, ignore_eos=ignores_eos(args)))

    quiet = bool(getattr(args, "quiet", False))
    bar = ProgressBar(sys.stderr, enabled=not quiet and sys.stderr.isatty())
    log = EventLog(outputs.events)
    try:
        local = engine_factory or default_engine
        engine = fleet_args.fleet_engine(args, local) or local()
        t0 = time.perf_counter()
        info = load_model(engine, args, log)
        if bar.enabled:
            print(f"loaded {info.name} on {info.device} ({info.settings_text()}) in "
                  f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
        render = replace(render, fingerprint=info.codec_fingerprint)
        request = render.request
        # what cannot travel to which server, per server and voice: asked before it starts
        fleet_args.confirm_travel(engine, list(dict.fromkeys(v.name for v in cast.values() if v.lora is not None)),
                                  bool(getattr(args, "yes", False)))
        t1 = time.perf_counter()
        clips = {ln.line_id: checked_takes.voice_clips(library, cast[ln.speaker]) for ln in script.lines
                 if picking.checking and ln.speaker in cast}
        takes, reports = checked_takes.render_takes(lambda passes: _passes(engine, render, passes, log, bar), request,
                                                    picking, clips, quiet)
        render_s = time.perf_counter() - t1
        for line in fleet_args.status_lines(engine):  # per engine: lines, failures, speed; what moved work
            if not quiet:
                print(line, file=sys.stderr)
        voices = tuple(dict.fromkeys(cast[ln.speaker].name for ln in script.lines))
        title = args.title if args.title is not None else (script.headings[0].text if script.headings
                                                           else Path(args.script).stem)
        settings = ExportSettings(format=outputs.format, gap_s=args.gap, normalize=args.normalize,  # type: ignore[arg-type]
                                  metadata=Metadata(title=title, model=info.name, voices=voices,
                                                    software=f"S2 Studio {__version__}"),
                                  bitrate_kbps=getattr(args, "bitrate", None),
                                  subtitle_tags=bool(getattr(args, "subtitle_tags", False)),
                                  stems_format=outputs.stems_format)  # type: ignore[arg-type]
        sets = [(_take_outputs(outputs, k) if picking.each_take else outputs,
                 _rendered_lines(script, request, kept, cast)) for k, kept in enumerate(takes, 1)]
        results = _export(sets, settings, log, bar)
    except BaseException:
        bar.close()
        raise
    made = [t for kept in takes for t in kept]
    seconds = sum(r.samples for r in results) / SAMPLE_RATE
    audio_s = sum(len(t.audio) for t in made) / SAMPLE_RATE
    frames = sum(int(t.codes.shape[1]) for t in made)
    rtf = render_s / audio_s if audio_s else 0.0
    written = [w for (out, lines), result in zip(sets, results, strict=True) for w in _written(out, lines, result)]
    if outputs.events is not None:
        written.append(printable(outputs.events))
    each = f" × {len(takes)} takes" if picking.each_take else ""
    print(f"rendered {len(takes[0])} line(s){each}, {frames} frames, {seconds:.2f} s in {render_s:.1f} s "
          f"(RTF {rtf:.2f}) -> {', '.join(written)}", file=sys.stderr)
    return checked_takes.finish(picking, reports)


def _take_outputs(outputs: Outputs, take: int) -> Outputs:
    """The outputs of take `take` when every take is written (`checked_takes.take_path`); one events log for all."""
    named = {f: checked_takes.take_path(p, take) for f in ("out", "stems", "clips", "srt", "vtt", "cue", "chapters")
             if (p := getattr(outputs, f)) is not None}
    return replace(outputs, **named)


def _written(outputs: Outputs, lines: list, result: Any) -> list[str]:
    """What one set of outputs holds, as the summary line names it."""
    written = [printable(p) for p in (outputs.out, outputs.srt, outputs.vtt) if p is not None]
    if outputs.stems is not None:
        speakers = len({ln.speaker for ln in lines})
        written.append(f"{speakers} speaker stem{'s' * (speakers != 1)} in {printable(outputs.stems)}")
    if outputs.clips is not None:
        written.append(f"{len(lines)} line clip{'s' * (len(lines) != 1)} in {printable(outputs.clips)}")
    if outputs.chapters is not None:
        n = len(result.parts)
        written.append(f"{n} chapter file{'s' * (n != 1)} in {printable(outputs.chapters)}")
    if outputs.cue is not None:
        written.append(printable(outputs.cue))
    return written
