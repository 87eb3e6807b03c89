"""Compile a parsed script and its cast into a `SynthesisRequest` (design.md §5, torch-free).

Speaker indices are given per *voice*, in order of the voices' first line in the whole script
(also when only some lines are rendered, so a re-rendered line is conditioned like the first time):
two script speakers cast with the same voice share one index (one timbre). Each voice's clips become references with that index, in clip order. A line's text
goes to the model as written, tags included.

`line_fingerprint` is the one take fingerprint (`state.staleness.take_fingerprint`) as the engine knows the
line: its text and speaker index, the references it was conditioned on and the sampling settings. Every engine
puts it on every take (`LineFinished`), and `synth --events` logs it.

The requests carry the settings' two types as they are (`s2studio.settings`: `Sampling` and `Loading`, which the
project's `GenerationSettings` both is): a synthesis request its `Sampling`, a load request is a `Loading`
(`load_request`), all checked against the one table of limits.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter
from pathlib import Path

import numpy as np

from s2studio.engine.api import (
    NUM_CODEBOOKS, ClipEncoded, ClipToEncode, EncodeRequest, Engine, JobFailed, LineSpec, LoadRequest,
    Reference, SynthesisRequest,
)
from s2studio.errors import Cancelled, UserError
from s2studio.settings import Loading, Sampling
from s2studio.state.lora_file import file_sha256
from s2studio.state.script import Line, Script
from s2studio.state.staleness import take_fingerprint
from s2studio.state.voices import Voice


def load_request(job_id: str, model_dir: Path, settings: Loading) -> LoadRequest:
    """The engine's load request for the loading settings (of the project's, or of a configuration that loaded)."""
    return LoadRequest(job_id, Path(model_dir), **vars(settings.loading))


def _words(text: str, tags: Sequence[tuple[int, int]], base: int) -> bool:
    chars = list(text)
    for start, end in tags:
        chars[start - base:end - base] = " " * (end - start)
    return any(ch.isalnum() for ch in chars)


def compile_request(
    script: Script,
    cast: Mapping[str, Voice],
    voice_codes: Mapping[str, Sequence[np.ndarray]],
    job_id: str,
    sampling: Sampling | None = None,
    chunk_length: int = 200,
    line_ids: Sequence[str] | None = None,
    clip_paths: Mapping[str, Sequence[Path]] | None = None,
    lora_paths: Mapping[str, Path] | None = None,
) -> SynthesisRequest:
    """The request for `script` (or only `line_ids` of it, in script order): `compile_lines`, then the voices'
    references (`voice_references`).

    `cast`: speaker name -> voice; `voice_codes`: voice id -> each clip's (10, N) codes, as
    `VoiceLibrary.codes` returns them; `clip_paths`: voice id -> each clip's file (`VoiceLibrary.clip_path`),
    carried in the references for engines that send audio rather than codes; `lora_paths`: voice id -> its
    LoRA (`VoiceLibrary.lora_path`), put on each of its lines."""
    request, voices = compile_lines(script, cast, job_id, sampling, chunk_length, line_ids, lora_paths)
    return replace(request, references=voice_references(voices, voice_codes, clip_paths))


def compile_lines(
    script: Script,
    cast: Mapping[str, Voice],
    job_id: str,
    sampling: Sampling | None = None,
    chunk_length: int = 200,
    line_ids: Sequence[str] | None = None,
    lora_paths: Mapping[str, Path] | None = None,
) -> tuple[SynthesisRequest, tuple[Voice, ...]]:
    """What needs no codes: the request without references, and the voices in speaker-index order (voice i speaks
    as speaker i). UserError for what a person fixes in the script or the cast."""
    lines = list(script.lines)
    if line_ids is not None:
        wanted = set(line_ids)
        lines = [ln for ln in lines if ln.line_id in wanted]
    check_lines(lines, cast)
    voices = speaker_voices(script, cast)
    request = SynthesisRequest(job_id, line_specs(lines, cast, voices, lora_paths), (), sampling or Sampling(),
                               chunk_length, scene_starts=scene_starts(script))
    return request, voices


def check_lines(lines: Sequence[Line], cast: Mapping[str, Voice]) -> None:
    """UserError when `lines` cannot be rendered: none, only tags, or speakers without a voice."""
    if not lines:
        raise UserError("the script has nothing to speak; write lines like 'Alice: Hello.'")
    if not any(_words(ln.text, [(t.start, t.end) for t in ln.tags], ln.start) for ln in lines):
        raise UserError("the script has only tags and no words to speak; add text after the tags")
    missing = [s for s in dict.fromkeys(map(attrgetter("speaker"), lines)) if s not in cast]
    if missing:
        names = ", ".join(repr(s) for s in missing)
        raise UserError(f"no voice for speaker {names}; cast it (e.g. --cast '{missing[0]}=VOICE')"
                        if len(missing) == 1 else f"no voice for speakers {names}; cast each of them")


def speaker_voices(script: Script, cast: Mapping[str, Voice]) -> tuple[Voice, ...]:
    """The voices in speaker-index order, numbered over the whole script (so a render of some lines conditions
    like a full one)."""
    voices: dict[str, Voice] = {}
    for speaker in script.speakers:  # in order of their first lines
        if speaker in cast:
            voices.setdefault(cast[speaker].id, cast[speaker])
    return tuple(voices.values())


def line_specs(lines: Sequence[Line], cast: Mapping[str, Voice], voices: Sequence[Voice],
               lora_paths: Mapping[str, Path] | None = None) -> tuple[LineSpec, ...]:
    """`lines` as the engine speaks them: each with its voice's speaker index (voice i of `voices` speaks as
    speaker i) and LoRA (`lora_paths`: voice id -> its file)."""
    index = {voice.id: i for i, voice in enumerate(voices)}
    loras = lora_paths or {}
    return tuple(LineSpec(ln.line_id, index[cast[ln.speaker].id], ln.text, loras.get(cast[ln.speaker].id))
                 for ln in lines)


def voice_references(voices: Sequence[Voice], voice_codes: Mapping[str, Sequence[np.ndarray]],
                     clip_paths: Mapping[str, Sequence[Path]] | None = None) -> tuple[Reference, ...]:
    """Each voice's clips as references, voice i's with speaker index i, in clip order."""
    references: list[Reference] = []
    for number, voice in enumerate(voices):
        codes = voice_codes.get(voice.id)
        if codes is None or len(codes) != len(voice.clips):
            raise ValueError(f"codes for voice {voice.id} missing or not one per clip")
        files = list((clip_paths or {}).get(voice.id, ())) or [None] * len(voice.clips)
        for clip, c, file in zip(voice.clips, codes, files, strict=True):
            c = np.asarray(c)
            if c.ndim != 2 or c.shape[0] != NUM_CODEBOOKS or c.shape[1] == 0:
                raise UserError(f"voice {voice.name!r}: cached codes of {clip.file} have shape {c.shape}; "
                                "delete its codes.safetensors so they are encoded again")
            references.append(Reference(number, clip.transcript, c.astype(np.int64, copy=False), file))
    return tuple(references)


def scene_starts(script: Script) -> frozenset[str]:
    """The ids of the first line after each heading: where the script's scenes begin."""
    rows, ids = script.line_rows, script.line_ids  # a heading is a row of its own: the next row's line is first
    firsts = (bisect_right(rows, heading.source_line) for heading in script.headings)
    return frozenset(ids[i] for i in firsts if i < len(ids))


MAX_TAKES = 8
"""The most takes of a line asked for at once (the studio's Render N takes)."""


@dataclass(frozen=True)
class Piece:
    """One of the requests a batching engine runs side by side (`plan_pieces`): lines `start:end` of the whole
    request, in one take."""

    job_id: str
    start: int
    end: int
    seed_offset: int
    """Lines before this piece's first over the whole render, takes before it counted: its sampling is the
    request's `later` by as many (a fixed seed draws line i of take 1 with seed + i)."""
    first_scene: bool
    """The first scene of its take: the request's context turns go with it."""


def plan_pieces(job_id: str, line_ids: Sequence[str], scene_starts: frozenset[str], batching: str,
                takes: int = 1, batches: bool = True) -> list[Piece]:
    """How `split_request` splits a request of `line_ids`: one piece per scene (a heading starts a scene:
    `scene_starts`; the engine gives a scene's first line no earlier line to hear, split or not) and per take, take
    by take. Upstream batching groups lines across scenes: it is split by take only. An engine that runs one
    request at a time (`batches` off: the exact loop, a server, a fleet that plans the scenes itself) gets one take
    whole: its scenes sound the same either way. One piece keeps `job_id`; several are `<job_id>.<take>.<scene>`."""
    if not 1 <= takes <= MAX_TAKES:
        raise UserError(f"takes must be between 1 and {MAX_TAKES}, got {takes}")
    if takes == 1 and not batches:
        return [Piece(job_id, 0, len(line_ids), 0, True)]
    places = dict(zip(line_ids, itertools.count())) if batching == "line" else {}
    starts = sorted({0, *(places[k] for k in scene_starts if k in places)}) if line_ids else []
    if takes == 1 and len(starts) == 1:
        return [Piece(job_id, 0, len(line_ids), 0, True)]
    ends = [*starts[1:], len(line_ids)][:len(starts)]
    return [Piece(f"{job_id}.{take + 1}.{number + 1}", start, end, take * len(line_ids) + start, number == 0)
            for take in range(takes) for number, (start, end) in enumerate(zip(starts, ends, strict=True))]


def piece_request(request: SynthesisRequest, piece: Piece, lines: tuple[LineSpec, ...]) -> SynthesisRequest:
    """`piece` of `request` (its lines given: `request.lines[piece.start:piece.end]`, or compiled only now)."""
    if piece.job_id == request.job_id:
        return replace(request, lines=lines)
    return replace(request, job_id=piece.job_id, lines=lines, context=request.context if piece.first_scene else (),
                   sampling=request.sampling.later(piece.seed_offset))


def split_request(request: SynthesisRequest, takes: int = 1) -> list[SynthesisRequest]:
    """`request` as the requests a batching engine runs side by side (`plan_pieces`: its scenes and its takes).
    With a seed, line i of the whole request is drawn with seed + i in take 1 and seed + (k - 1) * lines + i in
    take k, so take 1 is what the whole request gives; without one each piece draws its own base. The context
    turns go with the first scene only."""
    pieces = plan_pieces(request.job_id, [ln.line_id for ln in request.lines], request.scene_starts,
                         request.sampling.batching, takes)
    return [piece_request(request, piece, request.lines[piece.start:piece.end]) for piece in pieces]


def line_fingerprint(line: LineSpec, references: Sequence[Reference], sampling: Sampling,
                     extra: str = "", ignore_eos: bool = False) -> str:
    """The take fingerprint (`state.staleness.take_fingerprint`) of `line` as the engine knows it: the speaker is
    its index, the voice what the model hears (the references' transcripts and codes, the line's LoRA, and `extra`:
    the model, the codec, the batching), the settings the request's sampling."""
    heard = hashlib.sha256(json.dumps({"extra": extra, "ignore_eos": ignore_eos,
                                       "lora": lora_digest(Path(line.lora)) if line.lora is not None else None},
                                      sort_keys=True).encode())
    for ref in references:
        heard.update(f"|{ref.speaker}|{ref.transcript}|{ref.codes.shape}|".encode())
        heard.update(np.ascontiguousarray(ref.codes, dtype=np.int64).tobytes())
    settings = {"temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k,
                "max_frames": sampling.max_frames, "seed": sampling.fixed_seed}
    return take_fingerprint(line.text, str(line.speaker), heard.hexdigest()[:16], settings)


_digests: dict[tuple[str, int, int], str] = {}


def lora_digest(path: Path) -> str:
    """sha256 of a LoRA file, computed once per (path, size, modification time): a take made with one LoRA is
    stale under another."""
    try:
        st = path.stat()
    except OSError:
        return "missing"
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _digests:
        _digests[key] = file_sha256(path)
    return _digests[key]


_encode_jobs = itertools.count(1)


def engine_encoder(engine: Engine, cancel: threading.Event | None = None,
                   clip_ids: Mapping[Path, str] | None = None) -> Callable[[Path], np.ndarray]:
    """Adapt `engine.encode` to the `encoder(path) -> codes` that `VoiceLibrary.codes` takes; `clip_ids` names
    each clip in the engine's events (`voice id/clip id`; "clip" for a path it lacks).

    Runs on the engine's thread (it calls the engine directly); a `JobFailed` becomes a UserError, a cancel
    `Cancelled`."""
    def encode(path: Path) -> np.ndarray:
        job = f"encode-{next(_encode_jobs)}"
        clip = ClipToEncode((clip_ids or {}).get(Path(path), "clip"), Path(path))
        codes = None
        for ev in engine.encode(EncodeRequest(job, (clip,)), cancel or threading.Event()):
            if isinstance(ev, ClipEncoded):
                codes = ev.codes
            elif isinstance(ev, JobFailed):
                raise UserError(ev.error)
        if codes is None:  # the engine ended the job without codes: the person stopped it
            raise Cancelled(f"encoding {Path(path).name} was cancelled")
        return codes

    return encode
