"""OpenAI's speech API: `POST /v1/audio/speech`, `GET /v1/models`, and the voice lists clients read.

What SillyTavern's "OpenAI Compatible" provider and Open WebUI's "OpenAI" engine call. `voice` is a voice of
the library (its name or id, as a string or `{"id": ...}`). The audio is the model's own 44.1 kHz; `pcm` is
16-bit mono at that rate, stated in `X-Audio-Sample-Rate`. Responses stream as the engine decodes, except a
`wav` or `flac` asked for without `stream_format`, which is sent whole with exact headers. `aac` is refused:
libsndfile, which writes every other format, has no AAC encoder. `speed` other than 1.0 is refused: S2 has
no speed control, and stretching would change the voice. Extensions: `seed`, `temperature`, `top_p`, and
vllm-omni's for cloning: `voice` may name a clip uploaded through `POST /v1/audio/voices` (routes_voices), or the
request carries `ref_audio` (a base64 data URL) + `ref_text`; `max_new_tokens`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from s2studio.audio.stream_encode import StreamEncoder
from s2studio.engine.api import FRAME_SAMPLES, SAMPLE_RATE
from s2studio.serve.app import ServerState, audio_response, state_of
from s2studio.serve.bodies import JSON, parse_body
from s2studio.serve.compile import speech_lines
from s2studio.serve.config import setting_field
from s2studio.serve.errors import ApiError
from s2studio.serve.parsing import check_lines, check_name
from s2studio.serve.references import InlineReference, check_reference
from s2studio.serve.synthesis import AudioOut, Speech, speech_work
from s2studio.settings import Sampling, seed_fields
from s2studio.state.voices import Voice

router = APIRouter()


class VoiceId(BaseModel):
    id: str


class SpeechBody(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    model: str = ""
    input: str
    voice: str | VoiceId = "default"
    instructions: str | None = None
    response_format: Literal["mp3", "opus", "aac", "flac", "wav", "pcm"] = "mp3"
    speed: float = 1.0
    stream_format: Literal["audio", "sse"] | None = None
    seed: int | None = setting_field("seed", None)
    temperature: float = setting_field("temperature")
    top_p: float = setting_field("top_p")
    ref_audio: str | None = None
    ref_text: str | None = None
    max_new_tokens: int | None = Field(None, ge=1)


def _data_url_audio(url: str) -> bytes:
    """The bytes of a `data:audio/...;base64,...` URL; anything else (an http or file URL) is refused: this
    server fetches nothing on a client's behalf and reads no path a client names."""
    head, sep, payload = url.partition(",")
    if not url.startswith("data:") or not sep or not head.endswith(";base64"):
        raise ApiError(400, "ref_audio must be a base64 data URL (data:audio/wav;base64,...); this server does "
                       "not fetch URLs or read paths", "invalid_reference", "ref_audio")
    try:
        return base64.b64decode(payload, validate=True)
    except ValueError:
        raise ApiError(400, "ref_audio is not valid base64", "invalid_reference", "ref_audio") from None


def _voice_of(state: ServerState, body: SpeechBody) -> tuple[tuple[Voice, ...], tuple[InlineReference, ...],
                                                              Callable[[], None]]:
    """Who speaks: inline `ref_audio` + `ref_text`, else the voice `voice` names (`ServerState.voice_named`); the
    third item lets an uploaded voice go when the request ends."""
    limit = state.config.limits.max_reference_seconds
    if body.ref_audio is not None:
        return (), (check_reference(0, _data_url_audio(body.ref_audio), body.ref_text or "", limit),), lambda: None
    name = body.voice if isinstance(body.voice, str) else body.voice.id
    check_name(name, "voice", state.config.limits)
    return state.voice_named(name, "voice")


def _sse_delta(data: bytes) -> bytes:
    event = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")}
    return f"data: {json.dumps(event)}\n\n".encode()


def _sse_done(input_chars: int) -> Callable[[int], bytes]:
    def done(samples: int) -> bytes:
        frames = round(samples / FRAME_SAMPLES)
        usage = {"input_tokens": input_chars, "output_tokens": frames, "total_tokens": input_chars + frames}
        return f"data: {json.dumps({'type': 'speech.audio.done', 'usage': usage})}\n\n".encode()

    return done


@router.post("/v1/audio/speech")
async def speech(request: Request) -> Response:
    state = state_of(request)
    limits = state.config.limits
    body = await parse_body(request, SpeechBody, (JSON,))
    if len(body.input) > limits.max_text_chars:
        raise ApiError(400, f"input is {len(body.input)} characters; this server takes at most "
                       f"{limits.max_text_chars}", "input_too_long", "input")
    if body.response_format == "aac":
        raise ApiError(400, "aac is not available on this server (no AAC encoder); use mp3, opus, flac, wav "
                       "or pcm", "unsupported_response_format", "response_format")
    if body.speed != 1.0:
        raise ApiError(400, f"speed {body.speed:g} is not supported: S2 has no speed control; send 1.0 "
                       "(or leave it out)", "unsupported_speed", "speed")
    voices, inline, ended = _voice_of(state, body)
    try:
        return await _speak(request, state, body, voices, inline, ended)
    except BaseException:
        ended()
        raise


async def _speak(request: Request, state: ServerState, body: SpeechBody, voices: tuple[Voice, ...],
                 inline: tuple[InlineReference, ...], ended: Callable[[], None]) -> Response:
    """The speech of a checked request, streamed; `ended()` once it is over (audio_response calls it)."""
    limits = state.config.limits
    frames = min(body.max_new_tokens or Sampling.max_frames, limits.max_new_tokens)
    speech = Speech(check_lines(speech_lines(body.input, body.instructions), limits, "input"),
                    Sampling(temperature=body.temperature, top_p=body.top_p, max_frames=frames,
                             **seed_fields(body.seed)),
                    inline=inline, voices=voices)
    fmt = body.response_format
    streaming = body.stream_format is not None or fmt not in ("wav", "flac")
    out = AudioOut(StreamEncoder(fmt, streaming), "line")
    work = speech_work(speech, state.library, state.cache, state.info.codec_fingerprint)
    headers = {"Content-Type": out.encoder.content_type, "Content-Disposition": f"inline; filename=speech.{fmt}"}
    if fmt == "pcm":
        headers.update({"X-Audio-Sample-Rate": str(SAMPLE_RATE), "X-Audio-Channels": "1",
                        "X-Audio-Encoding": "pcm_s16le"})
    if body.stream_format == "sse":
        headers["Content-Type"] = "text/event-stream"
        headers.pop("Content-Disposition")
        return await audio_response(request, "openai", work, out, headers, frame=_sse_delta,
                                    closing=_sse_done(len(body.input)), ended=ended)
    return await audio_response(request, "openai", work, out, headers, ended=ended)


@router.get("/v1/models")
async def models(request: Request) -> Response:
    state = state_of(request)
    entry = {"id": state.config.model_id, "object": "model", "created": 0, "owned_by": "s2studio",
             "s2studio": {"name": state.info.name, "device": state.info.device, "precision": state.info.precision,
                          "sample_rate": state.info.sample_rate}}
    return JSONResponse({"object": "list", "data": [entry]})


@router.get("/v1/audio/models")
async def audio_models(request: Request) -> Response:
    return JSONResponse({"models": [{"id": state_of(request).config.model_id}]})


@router.get("/v1/voices")
async def voices(request: Request) -> Response:
    listed = [{"id": v.id, "name": v.name, "clips": len(v.clips)} for v in state_of(request).library.list()]
    return JSONResponse({"voices": listed})
