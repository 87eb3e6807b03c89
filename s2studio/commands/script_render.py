"""`s2studio synth --script FILE --cast NAME=VOICE …`: a whole script to audio files, headless.

The command-line twin of the studio's render button (issue 4, design.md §5–§8): the script is parsed
like the editor parses it, the cast maps its speakers to voices of the library, the engine renders
it (line mode unless `--batching upstream` is asked for) and `audio/export.py` writes the mix, the
stems and the subtitles exactly as the studio's export does.

Everything a person can get wrong (the script, the cast, the outputs) is checked before the slow
model load. Nothing is written unless the whole render succeeds: the audio, the stems, the subtitles and
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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from s2studio import __version__, paths
from s2studio.audio.asr_models import DEFAULT_MODEL
from s2studio.commands import checked_takes, fleet_args
from s2studio.commands.outputs import check_file, check_folder
from s2studio.commands.render_log import EventLog, LoggedEncoder, ProgressBar
from s2studio.commands.setting_args import loading_from_args
from s2studio.engine.plan import load_request
from s2studio.engine.render import Render
from s2studio.engine.api import (
    FRAME_SAMPLES, SAMPLE_RATE, AudioChunk, Engine, Event, JobFailed, JobFinished, JobStarted, LineFinished,
    ModelInfo, ModelReady, Progress, SynthesisRequest,
)
from s2studio.settings import LIMITS, Batching, Sampling, seed_fields
from s2studio.errors import UserError, printable
from s2studio.state.atomic import OutputSet
from s2studio.state.script import Script, parse_script, read_script
from s2studio.state.voices import Voice, VoiceLibrary
from s2studio.units import LINE_GAP_S

NORMALIZE = ("none", "peak", "loudness")
EngineFactory = Callable[[], Engine]
SCRIPT_ONLY = (("--cast", "cast", []), ("--stems", "stems", None), ("--srt", "srt", None), ("--vtt", "vtt", None),
               ("--events", "events", None), ("--gap", "gap", LINE_GAP_S), ("--normalize", "normalize", "none"),
               ("--title", "title", None), ("--cue", "cue", None), ("--chapters", "chapters", None),
               ("--stems-format", "stems_format", None), ("--pick", "pick", None),
               ("--check", "check", None), ("--strict", "strict", False),
               ("--check-asr-model", "check_asr_model", DEFAULT_MODEL), ("--server", "server", []),
               ("--local-slots", "local_slots", None), ("--yes", "yes", False), ("--server-key", "server_key", ""),
               ("--max-batch", "max_batch", None))
"""(flag, dest, default) of the options that only a --script render reads (synth refuses them otherwise)."""


def add_script_arguments(parser: argparse.ArgumentParser,
                         text_group: argparse._MutuallyExclusiveGroup | None = None) -> None:
    """Add the script-rendering options to `synth`'s parser; options it has already (its own `--out`,
    or all of them on a second call) are kept as they are.

    `text_group`: synth's `--text`/`--text-file` group, so that exactly one of the three is given;
    without it `--script` is a plain option."""
    g = parser.add_argument_group("script rendering (with --script)")

    def add(*flags: str, to: Any = g, **kwargs: Any) -> None:
        if not any(f in parser._option_string_actions for f in flags):
            to.add_argument(*flags, **kwargs)

    add("--script", to=text_group or g, type=Path, metavar="FILE",
        help="render a script ('Name: line' per text line, # headings, [tags]) to audio; a speaker without a library voice of its name needs --cast")
    add("--cast", action="append", default=[], metavar="NAME=VOICE",
        help="give the script's speaker NAME the library voice VOICE (id or name); once per speaker. "
             "A speaker with the name of a library voice gets that voice without it")
    add("--out", type=Path, metavar="FILE",
        help="the mixed audio; the format follows the extension: .wav .flac .ogg (Vorbis) .opus .mp3")
    add("--stems", type=Path, metavar="DIR",
        help="also write one full-length track per speaker into DIR (aligned to the mix, for a DAW)")
    add("--clips", type=Path, metavar="DIR",
        help="also write each line's take as its own file into DIR (NNN_speaker_first-words.wav)")
    add("--stems-format", metavar="wav|flac|ogg|opus|mp3",
        help="the stems' format (default: the --out file's); FLAC keeps twenty long, mostly silent stems small")
    add("--chapters", type=Path, metavar="DIR",
        help="also write one file per chapter (the script's # headings) into DIR")
    add("--cue", type=Path, metavar="FILE", help="a CUE sheet of the chapters of the --out file")
    add("--srt", type=Path, metavar="FILE", help="subtitles, one cue per spoken line (SubRip)")
    add("--vtt", type=Path, metavar="FILE", help="subtitles, one cue per spoken line (WebVTT)")
    add("--events", type=Path, metavar="FILE.jsonl", help="log every engine event as one JSON line (no sample data)")
    add("--gap", type=float, default=LINE_GAP_S, metavar="SECONDS",
        help=f"silence between lines (default {LINE_GAP_S})")
    add("--normalize", default="none", metavar="none|peak|loudness",
        help="peak: -1 dBFS peak; loudness: -16 LUFS, peak at most -1 dBFS (default none)")
    add("--title", metavar="TEXT", help="title tag of the audio files (default: the first heading)")
    add("--bitrate", type=int, metavar="KBPS", help="MP3 or Opus bitrate (default 192 for MP3, 96 for Opus)")
    add("--subtitle-tags", action="store_true", help="keep delivery tags such as [whispering] in the subtitles")
    checked_takes.add_arguments(add)
    fleet_args.add_arguments(add)
    add("--max-batch", type=int, default=None, metavar="N",
        help="lines generated at once on the fast path: the scenes (a # heading starts one) and takes side by "
             f"side ({LIMITS['max_batch'].range_text()}; default: as many as the memory holds, at most 8 on a CPU)")


# ----------------------------------------------------------------------------- checks before loading


@dataclass(frozen=True)
class _Outputs:
    out: Path | None
    stems: Path | None
    clips: Path | None
    srt: Path | None
    vtt: Path | None
    events: Path | None
    format: str
    cue: Path | None = None
    chapters: Path | None = None
    stems_format: str | None = None


def _check_outputs(args: argparse.Namespace) -> _Outputs:
    from s2studio.audio.export import format_for

    out, stems, srt, vtt, events = args.out, args.stems, args.srt, args.vtt, args.events
    clips, cue, chapters = getattr(args, "clips", None), getattr(args, "cue", None), getattr(args, "chapters", None)
    if all(p is None for p in (out, stems, clips, srt, vtt, chapters)):
        raise UserError("nothing to write; give --out FILE (and/or --stems DIR, --clips DIR, --chapters DIR, --srt FILE, "
                        "--vtt FILE)")
    fmt = format_for(out) if out is not None else "wav"
    if cue is not None and out is None:
        raise UserError("--cue describes the chapters of the --out file; give --out too")
    stems_format = getattr(args, "stems_format", None)
    if stems_format is not None:
        from s2studio.audio.export import FORMATS

        if stems_format not in FORMATS:
            raise UserError(f"unknown --stems-format {stems_format!r}; use one of {', '.join(FORMATS)}")
    for path, what in ((out, "--out"), (srt, "--srt"), (vtt, "--vtt"), (events, "--events"), (cue, "--cue")):
        check_file(path, what)
    check_folder(stems, "--stems")
    check_folder(clips, "--clips")
    check_folder(chapters, "--chapters")
    given = [p for p in (out, srt, vtt, events, cue) if p is not None]
    if len({p.resolve() for p in given}) != len(given):
        raise UserError("two outputs name the same file; give each of --out, --srt, --vtt, --cue and --events its own")
    if not args.gap >= 0 or args.gap > 60:
        raise UserError(f"--gap must be between 0 and 60 seconds, got {args.gap}")
    if args.normalize not in NORMALIZE:
        raise UserError(f"unknown --normalize {args.normalize!r}; use none, peak or loudness")
    bitrate = getattr(args, "bitrate", None)
    if bitrate is not None:
        from s2studio.audio.export import BITRATES_KBPS

        if fmt not in BITRATES_KBPS:
            raise UserError(f"--bitrate is for .mp3 and .opus files; {fmt} has none")
        if bitrate not in BITRATES_KBPS[fmt]:
            raise UserError(f"--bitrate {bitrate} is not offered for {fmt}; use one of "
                            f"{', '.join(map(str, BITRATES_KBPS[fmt]))}")
    return _Outputs(out, stems, clips, srt, vtt, events, fmt, cue, chapters, stems_format)


def _parse_cast(items: Sequence[str]) -> dict[str, str]:
    cast: dict[str, str] = {}
    for item in items:
        name, sep, voice = item.partition("=")
        name, voice = " ".join(name.split()), voice.strip()
        if not sep or not name or not voice:
            raise UserError(f"--cast {item!r}: write it as NAME=VOICE, e.g. --cast 'Alice=My voice'")
        if name in cast:
            raise UserError(f"--cast gives {name!r} twice; give each speaker one voice")
        cast[name] = voice
    return cast


def _library() -> VoiceLibrary:
    return VoiceLibrary(paths.voices_dir())  # a data folder that cannot be one is refused by `paths`


def _line_number(source: str, offset: int) -> int:
    return source.count("\n", 0, offset) + 1


def _read(args: argparse.Namespace, cast_ids: dict[str, str], library: VoiceLibrary) -> tuple[Script, dict[str, str]]:
    """The script and its cast: `--cast` first, then each other speaker whose name a library voice has (case and
    spaces aside), as the studio casts a new project. Warnings name only speakers left without a voice."""
    path: Path = args.script
    source = read_script(path)
    if not source.strip():
        raise UserError(f"script {path} is empty; write lines like 'Alice: Hello.'")
    cast = dict(cast_ids)
    for speaker in parse_script(source).speakers:
        if speaker not in cast and (voice := library.find(speaker)) is not None:
            cast[speaker] = voice.id
    script = parse_script(source, known_speakers=set(cast))
    for w in script.warnings:
        print(f"{path}:{_line_number(source, w.start)}: warning: {w.message}", file=sys.stderr)
    return script, cast


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


def _export(sets: Sequence[tuple[_Outputs, list]], settings: Any, log: EventLog, bar: ProgressBar) -> list[Any]:
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

    outputs = _check_outputs(args)
    library = _library()
    script, cast_ids = _read(args, _parse_cast(args.cast), library)
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


def _take_outputs(outputs: _Outputs, take: int) -> _Outputs:
    """The outputs of take `take` when every take is written (`checked_takes.take_path`); one events log for all."""
    named = {f: checked_takes.take_path(p, take) for f in ("out", "stems", "clips", "srt", "vtt", "cue", "chapters")
             if (p := getattr(outputs, f)) is not None}
    return replace(outputs, **named)


def _written(outputs: _Outputs, lines: list, result: Any) -> list[str]:
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
