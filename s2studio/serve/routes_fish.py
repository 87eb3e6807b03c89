"""Fish's API: `POST /v1/tts` as fish-speech's server and Fish's cloud take it, `/v1/health`,
`/v1/vqgan/encode` and `/v1/references/list`.

Bodies are MessagePack (what Fish's SDK and upstream's client send) or JSON (reference audio then in base64).
`text` follows upstream: `<|speaker:i|>` turns, reference i conditioning speaker i, upstream batching by
`chunk_length`; `reference_id` names a voice instead: one uploaded to this server (`POST /v1/audio/voices`,
by its name, the `id` the upload answers), else a library voice by name or id. The `model` header is
accepted (`s2-pro`; this server has one model). With `streaming` the body is a WAV header and then PCM as the
engine decodes it, as upstream streams; without it, wav and flac come whole with exact headers and the other
formats still stream (the way Fish's cloud answers the SDK). Extensions: `top_k`, `flac`, and `cast` ({speaker
name: library voice}), which makes `text` a studio script of `Name:` lines compiled as the studio compiles it.
"""

from __future__ import annotations

import base64
import binascii
import threading
from collections.abc import Callable, Iterator
from typing import Literal

import ormsgpack
from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from s2studio.audio.stream_encode import StreamEncoder
from s2studio.engine.api import Engine, Event
from s2studio.engine.plan import compile_lines
from s2studio.errors import UserError
from s2studio.serve.app import ServerState, audio_response, state_of
from s2studio.serve.bodies import JSON, MSGPACK, parse_body
from s2studio.serve.compile import tts_lines
from s2studio.serve.config import SETTINGS_BOUNDS, setting_field
from s2studio.serve.errors import ApiError
from s2studio.serve.jobs import Disconnected, JobStream
from s2studio.serve.parsing import check_lines, check_name, find_voice
from s2studio.serve.references import InlineReference, check_reference
from s2studio.serve.synthesis import AudioOut, Speech, speech_work
from s2studio.settings import LIMITS, Sampling, seed_fields
from s2studio.state.script import parse_script

router = APIRouter()


class FishReference(BaseModel):
    audio: bytes
    text: str


class Prosody(BaseModel):
    speed: float = 1.0
    volume: float = 0.0


class TTSBody(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    text: str
    references: list[FishReference] = []
    reference_id: str | None = None
    format: Literal["wav", "pcm", "mp3", "opus", "flac"] = "wav"
    streaming: bool | None = None
    chunk_length: int = Field(200, ge=1, le=1000)
    max_new_tokens: int = Field(LIMITS["max_frames"].default, ge=0, le=SETTINGS_BOUNDS["max_frames"][1])
    """0: as many as the context leaves (the engine's `max_new_tokens`)."""
    top_p: float = setting_field("top_p")
    temperature: float = setting_field("temperature")
    top_k: int = setting_field("top_k")
    seed: int | None = setting_field("seed", None)
    prosody: Prosody | None = None
    cast: dict[str, str] | None = None


def base64_audio(raw: dict, kind: str) -> None:
    """JSON carries reference audio as base64 (as upstream accepts it): decoded in place."""
    if kind != JSON:
        return
    for key in ("references", "audios"):
        items = raw.get(key)
        if not isinstance(items, list):
            continue
        for i, item in enumerate(items):
            ref = item if key == "references" else None
            value = ref.get("audio") if isinstance(ref, dict) else item
            if not isinstance(value, str):
                continue
            try:
                decoded = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise ApiError(400, f"{key}.{i}: JSON carries audio as base64; this is not base64", "invalid_field",
                               key) from None
            if isinstance(ref, dict):
                ref["audio"] = decoded
            else:
                items[i] = decoded


def _script_speech(state: ServerState, body: TTSBody, sampling: Sampling) -> Speech:
    cast = {name: find_voice(state.library, voice, "cast") for name, voice in (body.cast or {}).items()}
    script = parse_script(body.text, known_speakers=set(cast))
    if len(script.lines) > state.config.limits.max_lines:
        raise ApiError(400, f"text: {len(script.lines)} lines; this server takes at most "
                       f"{state.config.limits.max_lines} in one request", "too_many_lines", "text")
    try:  # what needs no codes (a speaker without a voice, only tags) answers at once
        compile_lines(script, cast, "check")
    except UserError as exc:
        raise ApiError(400, str(exc), "invalid_script", "text") from None
    return Speech((), sampling, script=script, cast=cast)


@router.post("/v1/tts")
async def tts(request: Request) -> Response:
    state = state_of(request)
    limits = state.config.limits
    body = await parse_body(request, TTSBody, (*MSGPACK, JSON),
                            counts={"references": limits.max_references, "cast": limits.max_lines},
                            prepare=base64_audio)
    if len(body.text) > limits.max_text_chars:
        raise ApiError(400, f"text is {len(body.text)} characters; this server takes at most {limits.max_text_chars}",
                       "text_too_long", "text")
    for name in [body.reference_id or "", *(body.cast or {}), *(body.cast or {}).values()]:
        check_name(name, "cast" if body.cast else "reference_id", limits)
    if body.prosody is not None and (body.prosody.speed != 1.0 or body.prosody.volume != 0.0):
        raise ApiError(400, "prosody (speed, volume) is not supported: S2 has no speed control; leave it out",
                       "unsupported_prosody", "prosody")
    sampling = Sampling(temperature=body.temperature, top_p=body.top_p, top_k=body.top_k,
                        max_frames=min(body.max_new_tokens or limits.max_new_tokens, limits.max_new_tokens),
                        batching="line" if body.cast else "upstream", **seed_fields(body.seed))
    if body.cast:
        return await _answer(request, body, _script_speech(state, body, sampling))
    inline = tuple(await run_in_threadpool(
        lambda: [check_reference(i, r.audio, r.text, limits.max_reference_seconds)
                 for i, r in enumerate(body.references)]))
    if inline or not body.reference_id:
        return await _answer(request, body, Speech(check_lines(tts_lines(body.text), limits), sampling,
                                                   body.chunk_length, inline))
    voices, inline, ended = state.voice_named(body.reference_id, "reference_id")  # uploaded, else the library's
    try:
        speech = Speech(check_lines(tts_lines(body.text), limits), sampling, body.chunk_length, inline, voices)
        return await _answer(request, body, speech, ended)
    except BaseException:
        ended()  # once only: a second call after audio_response's own does nothing
        raise


async def _answer(request: Request, body: TTSBody, speech: Speech, ended: Callable[[], None] = lambda: None
                  ) -> Response:
    """The audio of a checked request, in `body.format`; `ended()` once it is over (audio_response calls it)."""
    state = state_of(request)
    streaming = body.streaming if body.streaming is not None else body.format not in ("wav", "flac")
    out = AudioOut(StreamEncoder(body.format, streaming), speech.sampling.batching)
    headers = {"Content-Type": out.encoder.content_type,
               "Content-Disposition": f"attachment; filename=audio.{body.format}"}
    if body.format == "pcm":
        headers.update({"X-Audio-Sample-Rate": str(state.info.sample_rate), "X-Audio-Channels": "1",
                        "X-Audio-Encoding": "pcm_s16le"})
    work = speech_work(speech, state.library, state.cache, state.info.codec_fingerprint)
    return await audio_response(request, "fish", work, out, headers, ended=ended)


@router.get("/v1/health")
@router.post("/v1/health")
async def health(request: Request) -> Response:
    """Fish's answer ({"status": "ok"}) and the engine's batch: requests generating now, waiting, and at most at
    once."""
    stats = state_of(request).runner.stats()
    return JSONResponse({"status": "ok", "running": len(stats.running), "queued": stats.queued,
                         "max_batch": stats.max_batch})


@router.get("/v1/references/list")
async def references_list(request: Request) -> Response:
    """What `reference_id` can name: the library's voices by id, then the voices uploaded here (by name)."""
    state = state_of(request)
    names = {v.id: v.name for v in state.library.list()} | {v.name: v.name for v in state.uploads.list()}
    return JSONResponse({"success": True, "reference_ids": list(names), "names": names, "message": "Success"})


class EncodeBody(BaseModel):
    audios: list[bytes]


@router.post("/v1/vqgan/encode")
async def vqgan_encode(request: Request) -> Response:
    """Upstream's encode route: clips in, their codes out (MessagePack `{"tokens": [(10, N) lists]}`), through
    the codes cache; the codec's fingerprint in `X-Codec-Fingerprint`."""
    state = state_of(request)
    limits = state.config.limits
    body = await parse_body(request, EncodeBody, (*MSGPACK, JSON), counts={"audios": limits.max_references},
                            prepare=base64_audio)
    if not 1 <= len(body.audios) <= limits.max_references:
        raise ApiError(400, f"send 1 to {limits.max_references} clips in `audios`", "invalid_field", "audios")
    refs: list[InlineReference] = await run_in_threadpool(
        lambda: [check_reference(i, audio, "(encode)", limits.max_reference_seconds)
                 for i, audio in enumerate(body.audios)])
    fingerprint = state.info.codec_fingerprint
    results: list = []

    def work(engine: Engine, job_id: str, cancel: threading.Event) -> Iterator[Event]:
        results.extend(state.cache.references(engine, refs, fingerprint, cancel))
        yield from ()

    stream = JobStream(state.runner, work)
    try:
        await stream.first_audio(request)
    except Disconnected:
        return Response(status_code=499)
    tokens = [r.codes.tolist() for r in results]
    return Response(ormsgpack.packb({"tokens": tokens}), media_type="application/msgpack",
                    headers={"X-Codec-Fingerprint": fingerprint})
