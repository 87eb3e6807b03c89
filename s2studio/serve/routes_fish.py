"""Fish's API: `POST /v1/tts` as fish-speech's server and Fish's cloud take it, `/v1/health`,
`/v1/vqgan/encode` and `/v1/references/list`.

Bodies are MessagePack (what Fish's SDK and upstream's client send) or JSON (reference audio then in base64).
`text` follows upstream: `<|speaker:i|>` turns, reference i conditioning speaker i, upstream batching by
`chunk_length`; `reference_id` names a library voice instead. The `model` header is accepted (`s2-pro`; this
server has one model). With `streaming` the body is a WAV header and then PCM as the engine decodes it, as
upstream streams; without it, wav and flac come whole with exact headers and the other formats still stream
(the way Fish's cloud answers the SDK). Extensions: `top_k`, `flac`, and `cast` ({speaker name: library
voice}), which makes `text` a studio script of `Name:` lines compiled as the studio compiles it.
"""

from __future__ import annotations

import base64
import binascii
import threading
from collections.abc import Iterator
from typing import Literal

import ormsgpack
from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from s2studio.audio.stream_encode import StreamEncoder
from s2studio.engine.api import Engine, Event, SamplingParams
from s2studio.engine.plan import compile_request
from s2studio.errors import UserError
from s2studio.serve.app import ServerState, audio_response, read_body, state_of
from s2studio.serve.compile import tts_lines
from s2studio.serve.errors import ApiError
from s2studio.serve.jobs import Disconnected, JobStream
from s2studio.serve.parsing import find_voice, parse
from s2studio.serve.references import InlineReference, check_reference
from s2studio.serve.synthesis import AudioOut, Speech, speech_work
from s2studio.state.script import parse_script

router = APIRouter()


class FishReference(BaseModel):
    audio: bytes
    text: str


class Prosody(BaseModel):
    speed: float = 1.0
    volume: float = 0.0


class TTSBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    text: str
    references: list[FishReference] = []
    reference_id: str | None = None
    format: Literal["wav", "pcm", "mp3", "opus", "flac"] = "wav"
    streaming: bool | None = None
    chunk_length: int = Field(200, ge=1, le=1000)
    max_new_tokens: int = Field(1024, ge=0)
    top_p: float = Field(0.8, gt=0.0, le=1.0)
    temperature: float = Field(0.8, gt=0.0, lt=2.0)
    top_k: int = Field(30, ge=1)
    seed: int | None = None
    prosody: Prosody | None = None
    cast: dict[str, str] | None = None


async def read_fish_body(request: Request) -> dict:
    """A MessagePack or JSON map; JSON carries reference audio as base64 (as upstream accepts it)."""
    data = await read_body(request)
    kind = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if kind in ("application/msgpack", "application/x-msgpack"):
        try:
            raw = ormsgpack.unpackb(data)
        except ormsgpack.MsgpackDecodeError as exc:
            raise ApiError(400, f"the body is not MessagePack ({exc})", "invalid_body") from None
    elif kind == "application/json":
        import json

        try:
            raw = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ApiError(400, f"the body is not JSON ({exc})", "invalid_body") from None
        for i, ref in enumerate(raw.get("references") or [] if isinstance(raw, dict) else []):
            if isinstance(ref, dict) and isinstance(ref.get("audio"), str):
                try:
                    ref["audio"] = base64.b64decode(ref["audio"], validate=True)
                except (binascii.Error, ValueError):
                    raise ApiError(400, f"references.{i}.audio: JSON carries audio as base64; this is not base64",
                                   "invalid_field", "references") from None
    else:
        raise ApiError(415, f"cannot read a {kind} body; send application/msgpack or application/json",
                       "unsupported_media_type")
    if not isinstance(raw, dict):
        raise ApiError(400, "the body must be a map with at least `text`", "invalid_body")
    return raw


def _script_speech(state: ServerState, body: TTSBody, sampling: SamplingParams) -> Speech:
    import numpy as np

    cast = {name: find_voice(state.library, voice, "cast") for name, voice in (body.cast or {}).items()}
    script = parse_script(body.text, known_speakers=set(cast))
    try:  # the cheap checks of the compiler (a speaker without a voice, only tags) answer at once
        compile_request(script, cast, {v.id: [np.zeros((10, 1), np.int64)] * len(v.clips) for v in cast.values()},
                        "check")
    except UserError as exc:
        raise ApiError(400, str(exc), "invalid_script", "text") from None
    return Speech((), sampling, "line", script=script, cast=cast)


@router.post("/v1/tts")
async def tts(request: Request) -> Response:
    state = state_of(request)
    limits = state.config.limits
    body = parse(TTSBody, await read_fish_body(request))
    if len(body.text) > limits.max_text_chars:
        raise ApiError(400, f"text is {len(body.text)} characters; this server takes at most {limits.max_text_chars}",
                       "text_too_long", "text")
    if len(body.references) > limits.max_references:
        raise ApiError(400, f"{len(body.references)} references; this server takes at most {limits.max_references}",
                       "too_many_references", "references")
    if body.prosody is not None and (body.prosody.speed != 1.0 or body.prosody.volume != 0.0):
        raise ApiError(400, "prosody (speed, volume) is not supported: S2 has no speed control; leave it out",
                       "unsupported_prosody", "prosody")
    sampling = SamplingParams(temperature=body.temperature, top_p=body.top_p, top_k=body.top_k,
                              max_new_tokens=min(body.max_new_tokens or limits.max_new_tokens, limits.max_new_tokens),
                              seed=body.seed)
    if body.cast:
        speech = _script_speech(state, body, sampling)
    else:
        inline = tuple(await run_in_threadpool(
            lambda: [check_reference(i, r.audio, r.text, limits.max_reference_seconds)
                     for i, r in enumerate(body.references)]))
        voices = () if inline or not body.reference_id else (find_voice(state.library, body.reference_id,
                                                                        "reference_id"),)
        speech = Speech(tts_lines(body.text), sampling, "upstream", body.chunk_length, inline, voices)
    streaming = body.streaming if body.streaming is not None else body.format not in ("wav", "flac")
    out = AudioOut(StreamEncoder(body.format, streaming), speech.batching)
    headers = {"Content-Type": out.encoder.content_type,
               "Content-Disposition": f"attachment; filename=audio.{body.format}"}
    if body.format == "pcm":
        headers.update({"X-Audio-Sample-Rate": str(state.info.sample_rate), "X-Audio-Channels": "1",
                        "X-Audio-Encoding": "pcm_s16le"})
    work = speech_work(speech, state.library, state.cache, state.info.codec_fingerprint)
    return await audio_response(request, "fish", work, out, headers)


@router.get("/v1/health")
@router.post("/v1/health")
async def health() -> Response:
    return JSONResponse({"status": "ok"})


@router.get("/v1/references/list")
async def references_list(request: Request) -> Response:
    voices = state_of(request).library.list()
    return JSONResponse({"success": True, "reference_ids": [v.id for v in voices],
                         "names": {v.id: v.name for v in voices}, "message": "Success"})


class EncodeBody(BaseModel):
    audios: list[bytes]


@router.post("/v1/vqgan/encode")
async def vqgan_encode(request: Request) -> Response:
    """Upstream's encode route: clips in, their codes out (MessagePack `{"tokens": [(10, N) lists]}`), through
    the codes cache; the codec's fingerprint in `X-Codec-Fingerprint`."""
    state = state_of(request)
    limits = state.config.limits
    body = parse(EncodeBody, await read_fish_body(request))
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
