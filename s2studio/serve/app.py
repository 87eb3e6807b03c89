"""What the routes share: the server's state, the API key check, request bodies, audio responses and the error
shapes (design.md §10). The app itself is assembled in `server.create_app` (which imports the routes, which import
this module: one direction).

Everything the routes share lives in `ServerState` at
`app.state.s2`. No route takes a path from a client: voices are named by library id or name, references
come as bytes.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response

from s2studio.engine.api import Event, JobFailed, JobFinished, ModelInfo
from s2studio.serve.config import ServeConfig
from s2studio.serve.errors import ApiError, PrivatePaths, error_response
from s2studio.serve.guard import StreamBroken
from s2studio.serve.jobs import Disconnected, JobResponse, JobStream
from s2studio.serve.parsing import UPLOAD_HINT, find_voice
from s2studio.serve.references import CodesCache, InlineReference
from s2studio.serve.uploads import UploadedVoices
from s2studio.serve.runner import EngineRunner, Work
from s2studio.serve.synthesis import AudioOut
from s2studio.state.voices import Voice, VoiceLibrary

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    route: str
    samples: int
    """Audio samples the job produced (gaps between lines included): what the response carried."""
    outcome: str


@dataclass
class ServerState:
    config: ServeConfig
    runner: EngineRunner
    library: VoiceLibrary
    cache: CodesCache = field(default_factory=CodesCache)
    uploads: UploadedVoices = field(default_factory=UploadedVoices)
    """Voices clients uploaded through `POST /v1/audio/voices` (routes_voices); `s2studio serve` keeps them in its
    data folder, the tests' servers in memory."""
    history: collections.deque[JobRecord] = field(default_factory=lambda: collections.deque(maxlen=1000))
    model_dir: Path | None = None

    def voice_named(self, name: str, param: str) -> tuple[tuple[Voice, ...], tuple[InlineReference, ...],
                                                          Callable[[], None]]:
        """Who `name` is, for a route that names a voice (`voice`, `reference_id`): a voice a client uploaded
        (its clip, inline; held against eviction until the function returned is called, as the request ends),
        else a library voice by name or id (a 404 that says how to add one otherwise)."""
        uploaded = self.uploads.take(name)
        if uploaded is not None:
            return (), (uploaded.reference,), self.uploads.release(uploaded)
        return (find_voice(self.library, name, param, UPLOAD_HINT),), (), lambda: None

    def redact(self, text: str) -> str:
        """`text` without the server's own folders (`errors.PrivatePaths`): voices by name, the rest in words."""
        return PrivatePaths(self._private_folders)(text)

    def _private_folders(self) -> list[tuple[Path, str]]:
        folders = [(self.library.root, "the voice library")]
        if self.model_dir is not None:
            folders.append((Path(self.model_dir), "the model folder"))
        try:
            for voice in self.library.list():
                folder = self.library.root / voice.id
                folders += [(folder / "lora.safetensors", f"the LoRA of voice {voice.name!r}"),
                            (folder, f"voice {voice.name!r}")]
        except Exception:  # noqa: BLE001 - a library that cannot be listed still has its root replaced
            log.debug("cannot list the voices for an error message", exc_info=True)
        return folders

    @property
    def info(self) -> ModelInfo:
        assert self.runner.info is not None, "the runner is started before the app serves"
        return self.runner.info


def state_of(request: Request) -> ServerState:
    return request.app.state.s2


async def audio_response(request: Request, route: str, work: Work, out: AudioOut, headers: dict[str, str],
                         frame: Callable[[bytes], bytes] = lambda b: b,
                         closing: Callable[[int], bytes] | None = None,
                         ended: Callable[[], None] = lambda: None) -> Response:
    """Queue `work`, wait for its first audio, then stream the rest as `out` encodes it.

    `frame` wraps each piece of encoded audio (SSE events); `closing(samples)` is sent after the last one. A failure
    before the first audio is a proper error response; one after it ends the stream abruptly, so the client
    sees a broken transfer rather than a short file that looks whole. `ended()` is called once when the request is
    over, however it ends (before this returns when no audio is streamed)."""
    state = state_of(request)
    try:
        stream = JobStream(state.runner, work)
        first = await stream.first_audio(request)
    except Disconnected:
        ended()
        state.history.append(JobRecord(stream.job_id, route, stream.samples, "cancelled"))
        return Response(status_code=499)
    except BaseException:
        ended()
        raise

    async def body() -> AsyncIterator[bytes]:
        outcome = "cancelled"
        try:
            async def events() -> AsyncIterator[Event]:
                for event in first:
                    yield event
                async for event in stream.events():
                    if event is not None:
                        yield event

            async for event in events():
                if isinstance(event, JobFailed):
                    outcome = "failed"
                    raise StreamBroken(f"job {stream.job_id} failed after its first audio; its stream was cut: "
                                       f"{event.error}")
                if isinstance(event, JobFinished):
                    outcome = "cancelled" if event.cancelled else "finished"
                    break
                data = out.feed(event)
                if data:
                    yield frame(data)
            tail = out.finish()
            if tail:
                yield frame(tail)
            if closing is not None:
                yield closing(out.encoder.samples)
        finally:
            state.history.append(JobRecord(stream.job_id, route, out.encoder.samples, outcome))

    headers = {"X-S2-Job": stream.job_id, **headers}
    return JobResponse(stream, body(), ended, headers=headers, media_type=headers.pop("Content-Type"))


class ApiKeyMiddleware:
    """`Authorization: Bearer KEY` on every HTTP request but CORS preflights; compared in constant time
    (both sides hashed first, so not even the key's length shows in the timing)."""

    def __init__(self, app, api_key: str) -> None:  # noqa: ANN001 - ASGI
        self.app = app
        self._digest = hashlib.sha256(api_key.encode()).digest()

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001 - ASGI
        if scope["type"] != "http" or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)
            return
        header = dict(scope["headers"]).get(b"authorization", b"")
        scheme, _, token = header.partition(b" ")
        given = hashlib.sha256(token.strip()).digest()
        if scheme.lower() == b"bearer" and hmac.compare_digest(given, self._digest):
            await self.app(scope, receive, send)
            return
        message = ("this server needs an API key; send `Authorization: Bearer KEY`" if not header
                   else "the API key is wrong; check the key the server was started with")
        response = error_response(scope["path"], ApiError(401, message, "invalid_api_key",
                                                          headers={"WWW-Authenticate": "Bearer"}))
        await response(scope, receive, send)
