"""vllm-omni's voice routes: upload a clip once, then name it by `voice` on `POST /v1/audio/speech`.

vllm-omni (the OpenAI-shaped server that serves S2 Pro at scale) lets a client register a reference clip once
(`POST /v1/audio/voices`, multipart: `audio_sample`, `name`, `consent`, `ref_text`) and name it afterwards instead
of sending it with every request; `GET /v1/audio/voices` lists `voices` (names) and `uploaded_voices`, `DELETE
/v1/audio/voices/{name}` removes one. We speak the same, so the studio's vllm-omni wire runs live against our own
server in the tests and vllm-omni's clients work with us. Shapes: vllm-project/vllm-omni
`docs/serving/speech_api.md` at 078de2d14c2fcc670c1e0dd492e1b84a69c69d15.

Uploads are kept apart from the voice library of the person running the server, in its data folder, so they outlive
a restart (serve/uploads.py; names are case-insensitive, as there); a client that finds a name gone uploads it
again. The clip's codes are encoded once, on first use, by the codes cache every inline reference goes through.
The upload also answers as OpenAI's `client.audio.voices.create` expects (`id`: the name, what `voice` and
Fish's `reference_id` take), and one refused because running requests hold every voice says when to retry.
"""

from __future__ import annotations

import time

from fastapi import APIRouter
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from s2studio.serve.app import state_of
from s2studio.serve.bodies import media_type, read_body
from s2studio.serve.errors import ApiError
from s2studio.serve.parsing import check_name
from s2studio.serve.references import check_reference
from s2studio.serve.uploads import UploadedVoice, VoicesInUse, bad_name

router = APIRouter()
MULTIPART = ("multipart/form-data",)


def _replayed(request: Request, body: bytes) -> Request:
    """`request` with its body already read (under the server's size and time limits, `read_body`), for
    starlette's form parser, which would otherwise read the socket with neither."""

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": body, "more_body": False}

    return Request(request.scope, receive)


def _text_field(form: object, key: str) -> str:
    value = form.get(key)  # type: ignore[attr-defined]
    return value.strip() if isinstance(value, str) else ""


@router.post("/v1/audio/voices")
async def upload_voice(request: Request) -> Response:
    state = state_of(request)
    media_type(request, MULTIPART)
    body = await read_body(request)
    async with _replayed(request, body).form(max_files=1, max_fields=8) as form:
        name = _text_field(form, "name")
        check_name(name, "name", state.config.limits)
        if bad_name(name):
            raise ApiError(400, bad_name(name), "invalid_name", "name")
        sample = form.get("audio_sample")
        if not isinstance(sample, UploadFile):
            raise ApiError(400, "`audio_sample` must be an audio file", "invalid_reference", "audio_sample")
        audio = await sample.read()
        consent, text = _text_field(form, "consent"), _text_field(form, "ref_text")
        description = _text_field(form, "speaker_description")
    most = state.config.limits.max_text_chars  # what an upload keeps in memory is its clip, not kilobytes of text
    for key, value in (("consent", consent), ("ref_text", text), ("speaker_description", description)):
        if len(value) > most:
            raise ApiError(400, f"{key} is {len(value)} characters; this server takes at most {most}", "field_too_long",
                           key)
    if not consent:
        raise ApiError(400, "`consent` is required: say whose voice this is and that they agreed", "missing_consent",
                       "consent")
    if not text:  # vllm-omni clones from an embedding without it; S2 clones from the transcript and its codes
        raise ApiError(400, "`ref_text` is required here: S2 needs the exact transcript of the sample",
                       "missing_ref_text", "ref_text")
    reference = check_reference(0, audio, text, state.config.limits.max_reference_seconds)
    voice = UploadedVoice(name, reference, consent, int(time.time()), description)
    try:
        state.uploads.put(voice)
    except VoicesInUse as exc:
        exc.headers["Retry-After"] = str(state.runner.scheduler.retry_after_s())
        raise
    # vllm-omni's answer (`success`, `voice`) and OpenAI's Voice object: `id` is what `voice` and
    # `reference_id` name it by
    return JSONResponse({"success": True, "voice": voice.describe(), "id": voice.name, "object": "audio.voice",
                         "name": voice.name, "created_at": voice.created_at, "type": "audio_sample"})


@router.get("/v1/audio/voices")
async def list_voices(request: Request) -> Response:
    state = state_of(request)
    uploaded = state.uploads.list()
    library = state.library.list()
    return JSONResponse({"voices": [v.name for v in library] + [v.name for v in uploaded],
                         "uploaded_voices": [v.describe() for v in uploaded],
                         "library": [{"id": v.id, "name": v.name, "clips": len(v.clips)} for v in library]})


@router.delete("/v1/audio/voices/{name}")
async def delete_voice(request: Request, name: str) -> Response:
    check_name(name, "name", state_of(request).config.limits)
    if not state_of(request).uploads.remove(name):
        raise ApiError(404, f"no uploaded voice called {name!r} on this server", "voice_not_found", "name")
    return JSONResponse({"success": True, "message": f"Voice '{name}' deleted successfully"})
