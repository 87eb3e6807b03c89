"""`RemoteEngine`: the engine contract over HTTP, so the studio renders on other machines (design.md §3, §11).

One engine, one wire per kind of server, all on one HTTP client stack (`engine/remote_http.py`):

- `s2studio` — `s2studio serve` elsewhere. Requests and events travel whole (`engine/remote_wire.py`):
  references as codes that server's codec made (`POST /v1/vqgan/encode`, cached by the voice library as
  for a local codec), context turns, line mode, codes and seeds of every take. A remote take equals the take
  the same engine makes locally.
- `vllm` / `openai` — OpenAI's `/v1/audio/speech` (`engine/wire_openai.py`: vllm-omni's voice upload, or a
  server's own voices); `sglang` — sglang-omni's S2 API (`engine/wire_sglang.py`); `fish` / `fishcloud` —
  Fish's `/v1/tts`, upstream's server or Fish Audio's cloud (`engine/wire_fish.py`). These return audio only:
  each line is one streamed request, a take's codes are empty and no context travels.

`auto` asks `/v1/s2studio/info` first, then `/v1/health`, then `/v1/models`. Responses are read by a helper
thread, so `cancel` is seen within a tenth of a second and a connection that breaks or goes quiet ends the job
with one clear `JobFailed` (`retry_after` set when the server said it is busy), never a hang. Every take says
which backend made it (`LineFinished.backend`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import httpx
import numpy as np
import ormsgpack

from s2studio.engine import remote_wire
from s2studio.engine.api import (
    FRAME_SAMPLES, NUM_CODEBOOKS, SAMPLE_RATE, AudioChunk, Backend, ClipEncoded, EncodeRequest, Event, JobFailed,
    JobFinished, JobStarted, LineFinished, LineStarted, LoadRequest, ModelInfo, ModelLoading, ModelReady, Progress,
    SynthesisRequest, line_seed, request_seed,
)
from s2studio.engine.plan import line_fingerprint
from s2studio.engine.remote_http import Busy, Link, RemoteError, _reason
from s2studio.engine.voice_registry import VoiceRegistry
from s2studio.engine.wire_fish import CLOUD_URL, FishWire, cloud_key
from s2studio.engine.wire_openai import OpenAISpeechWire
from s2studio.engine.wire_sglang import SglangWire

log = logging.getLogger(__name__)

Protocol = Literal["auto", "s2studio", "fish", "fishcloud", "openai", "vllm", "sglang"]
PROTOCOLS: tuple[str, ...] = ("auto", "s2studio", "vllm", "sglang", "fish", "fishcloud", "openai")
STAND_IN_CODES = np.zeros((NUM_CODEBOOKS, 1), np.int64)
"""What `encode` reports on a server that cannot encode (Fish's cloud, OpenAI-style servers): a one-frame
placeholder that lets the voice library cache "done"; such servers get the clip's audio instead."""
SHARED_REGISTRY = VoiceRegistry()
"""Where each voice already is, for every remote engine of this process (a voice is registered once per server)."""
_REMEMBERED: dict[Path, VoiceRegistry] = {}


def remembered_voices() -> VoiceRegistry:
    """The registry kept in the data folder (`voice-registry.json`): the studio's and the command line's."""
    from s2studio import paths

    path = paths.data_dir() / "voice-registry.json"
    if path not in _REMEMBERED:
        _REMEMBERED[path] = VoiceRegistry(path)
    return _REMEMBERED[path]


@dataclass(frozen=True)
class RemoteSettings:
    url: str
    api_key: str = ""
    protocol: Protocol = "auto"
    model: str = "s2-pro"
    """Fish's `model` header and OpenAI's `model` field."""
    voices: tuple[str, ...] = ()
    """`openai`: the server's voice for speaker 0, 1, …; speakers past the list use its first voice."""
    quiet_s: float = 60.0
    """A response silent for this long is a broken connection (`s2studio serve` sends a heartbeat every 5 s)."""
    connect_s: float = 10.0


class RemoteEngine:
    """An `Engine` whose model runs on a server (see the module docstring for the protocols)."""

    def __init__(self, settings: RemoteSettings, transport: httpx.BaseTransport | None = None,
                 registry: VoiceRegistry | None = None) -> None:
        url = settings.url.strip() or (CLOUD_URL if settings.protocol == "fishcloud" else "")
        key = settings.api_key or (cloud_key() if settings.protocol == "fishcloud" else "")
        self.settings = settings = replace(settings, url=url, api_key=key)
        self.link = Link(url, settings.api_key, settings.quiet_s, settings.connect_s, transport)
        self.base_url = self.link.base_url
        self.registry = registry or SHARED_REGISTRY
        self.protocol: Protocol = settings.protocol
        self.info: ModelInfo | None = None
        self.model_name = settings.model
        """The model the server reported (or the one asked for, where a server reports none)."""
        self.retry_after: float | None = None
        """Set when the last job failed because the server was busy: seconds it asked to wait."""
        self._wire: OpenAISpeechWire | SglangWire | FishWire | None = None

    def close(self) -> None:
        self.link.close()

    @property
    def backend(self) -> Backend:
        honoured = self.protocol == "s2studio" or (self._wire is not None and self._wire.seed_honoured)
        return Backend(self.protocol, self.base_url, self.model_name, honoured)

    def _where(self) -> str:
        return self.link.where()

    def _call(self, method: str, path: str, **kwargs: object) -> httpx.Response:
        return self.link.call(method, path, **kwargs)

    def _check(self, response: httpx.Response, doing: str) -> httpx.Response:
        return self.link.check(response, doing)

    def _guard(self, job_id: str, events: Iterator[Event]) -> Iterator[Event]:
        self.retry_after = None
        try:
            yield from events
        except Busy as exc:
            self.retry_after = exc.retry_after
            log.warning("server job %s: %s", job_id, exc)
            yield JobFailed(job_id, str(exc))
        except RemoteError as exc:
            log.warning("server job %s: %s", job_id, exc)  # a lost connection, a refusal: in the studio's log
            yield JobFailed(job_id, str(exc))
        except (OSError, ValueError) as exc:
            log.warning("server job %s failed: %r", job_id, exc)
            yield JobFailed(job_id, f"the remote job failed ({_reason(exc)})")

    # ------------------------------------------------------------------ load

    def load(self, request: LoadRequest, cancel: threading.Event) -> Iterator[Event]:
        return self._guard(request.job_id, self._load(request, cancel))

    def _detect(self) -> Protocol:
        if self.settings.protocol != "auto":
            return self.settings.protocol
        for protocol, path in (("s2studio", "/v1/s2studio/info"), ("fish", "/v1/health"), ("openai", "/v1/models")):
            response = self._call("GET", path)
            if response.status_code == 401:
                self._check(response, "connecting")
            if response.status_code < 400:
                return protocol  # type: ignore[return-value]
        raise RemoteError(f"{self._where()} answers, but neither as s2studio serve, a Fish server nor an OpenAI-style "
                          "speech server; check the address")

    def _load(self, request: LoadRequest, cancel: threading.Event) -> Iterator[Event]:
        job = request.job_id
        yield ModelLoading(job, 0.0, f"connecting to {self.base_url}")
        protocol = self._detect()
        if cancel.is_set():
            yield JobFinished(job, cancelled=True)
            return
        yield ModelLoading(job, 0.5, f"asking {self.base_url} for its model")
        host = urlsplit(self.base_url).netloc
        if protocol == "s2studio":
            raw = self._check(self._call("GET", "/v1/s2studio/info"), "asking for the model").json()
            remote = remote_wire.info_from_json(raw.get("model"))
            self.model_name = remote.name
            info = ModelInfo(f"{remote.name} on {host}", f"{remote.device} on {host}", remote.precision,
                             remote.sample_rate, remote.codec_fingerprint, remote.max_context)
        else:
            self.model_name = self._reported_model(protocol)
            info = ModelInfo(f"{self.model_name} on {host}", f"{_API_NAMES[protocol]} on {host}", "remote",
                             SAMPLE_RATE, f"remote-audio:{self.base_url}", 32768)
            self._wire = self._make_wire(protocol)
        self.protocol, self.info = protocol, info
        yield ModelLoading(job, 1.0, "ready")
        yield ModelReady(job, info)
        yield JobFinished(job)

    def _reported_model(self, protocol: str) -> str:
        """The model the server names (`/v1/models`), or the one asked for where it names none."""
        if protocol == "fishcloud":  # no model list; the key is checked here (Test, a load), not by a render's line
            self._check(self._call("GET", CLOUD_KEY_CHECK), "checking the API key")
            return self.settings.model
        if protocol == "fish":
            self._check(self._call("GET", "/v1/health"), "connecting")
            return self.settings.model
        raw = self._check(self._call("GET", "/v1/models"), "connecting")
        try:
            return str(raw.json()["data"][0]["id"])
        except (ValueError, KeyError, IndexError, TypeError):
            return self.settings.model

    def _make_wire(self, protocol: str) -> OpenAISpeechWire | SglangWire | FishWire:
        if protocol == "sglang":
            return SglangWire(self.link, self.settings.model)
        if protocol in ("fish", "fishcloud"):
            return FishWire(self.link, self.registry, self.settings.model, cloud=protocol == "fishcloud")
        return OpenAISpeechWire(self.link, self.registry, self.settings.model, self.settings.voices,
                                upload=protocol == "vllm")

    def _require(self) -> ModelInfo:
        if self.info is None:
            raise RemoteError("no server is connected; choose one in Settings ▸ Render on")
        return self.info

    # ------------------------------------------------------------------ encode

    def encode(self, request: EncodeRequest, cancel: threading.Event) -> Iterator[Event]:
        return self._guard(request.job_id, self._encode(request, cancel))

    def _encode(self, request: EncodeRequest, cancel: threading.Event) -> Iterator[Event]:
        info = self._require()
        yield JobStarted(request.job_id, tuple(c.clip_id for c in request.clips))
        for clip in request.clips:
            if cancel.is_set():
                yield JobFinished(request.job_id, cancelled=True)
                return
            try:
                audio = Path(clip.path).read_bytes()
            except OSError as exc:
                raise RemoteError(f"cannot read {Path(clip.path).name}: {exc.strerror or exc}") from None
            codes = self._encode_bytes(audio, Path(clip.path).name)
            yield ClipEncoded(request.job_id, clip.clip_id, codes, info.codec_fingerprint)
        yield JobFinished(request.job_id)

    def _encode_bytes(self, audio: bytes, name: str) -> np.ndarray:
        if self.protocol == "openai":
            return STAND_IN_CODES
        response = self._call("POST", "/v1/vqgan/encode", content=ormsgpack.packb({"audios": [audio]}),
                              headers={"Content-Type": "application/msgpack"})
        if response.status_code in (404, 405) and self.protocol == "fish":
            return STAND_IN_CODES  # Fish's cloud: references travel as audio
        self._check(response, f"encoding {name}")
        try:
            tokens = ormsgpack.unpackb(response.content)["tokens"][0]
            codes = np.asarray(tokens, dtype=np.int64)
        except (ormsgpack.MsgpackDecodeError, KeyError, IndexError, TypeError, ValueError):
            raise RemoteError(f"{self._where()} answered the encoding of {name} with something unreadable") from None
        if codes.ndim != 2 or codes.shape[0] != NUM_CODEBOOKS or codes.shape[1] == 0:
            raise RemoteError(f"{self._where()} encoded {name} to codes of shape {codes.shape}")
        return codes

    # ------------------------------------------------------------------ generate

    def generate(self, request: SynthesisRequest, cancel: threading.Event) -> Iterator[Event]:
        return self._guard(request.job_id, self._generate(request, cancel))

    def _generate(self, request: SynthesisRequest, cancel: threading.Event) -> Iterator[Event]:
        self._require()
        if not request.lines:
            yield JobFailed(request.job_id, "nothing to synthesize: the request has no lines")
            return
        if any(line.lora is not None for line in request.lines):  # the file is here, the model there
            yield JobFailed(request.job_id, "a voice in these lines carries a LoRA, which a remote server cannot "
                                            "apply; render them with the local engine or remove the voice's LoRA")
            return
        if self.protocol == "s2studio":
            yield from self._generate_native(request, cancel)
        else:
            yield from self._generate_per_line(request, cancel)

    def _generate_native(self, request: SynthesisRequest, cancel: threading.Event) -> Iterator[Event]:
        job = request.job_id
        stream = self.link.open("POST", "/v1/s2studio/generate", "rendering", content=remote_wire.request_to_wire(request),
                            headers={"Content-Type": "application/msgpack"})
        reader = remote_wire.RecordReader()
        chunks: list[np.ndarray] = []
        try:
            for data in stream.chunks(cancel):
                for record in reader.feed(data):
                    kind = record["type"]
                    if kind == "job_started":
                        yield JobStarted(job, tuple(record["plan"]))
                    elif kind == "line_started":
                        chunks = []
                        yield LineStarted(job, record["line_id"])
                    elif kind == "progress":
                        yield Progress(job, record["line_id"], int(record["frames"]), int(record["expected"]),
                                       float(record["rtf"]))
                    elif kind == "audio":
                        samples = np.frombuffer(record["samples"], dtype="<f4").astype(np.float32)
                        chunks.append(samples)
                        yield AudioChunk(job, record["line_id"], int(record["start"]), samples)
                    elif kind == "line_finished":
                        audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
                        yield LineFinished(job, record["line_id"], record["take_id"],
                                           remote_wire.unpack_codes(record["codes"]), audio, int(record["seed"]),
                                           record["fingerprint"], self.backend)
                    elif kind == "finished":
                        yield JobFinished(job, cancelled=bool(record["cancelled"]))
                        return
                    elif kind == "failed":
                        yield JobFailed(job, str(record["error"]))
                        return
            if cancel.is_set():
                yield JobFinished(job, cancelled=True)
                return
            raise RemoteError(f"{self._where()} ended the render without finishing it; check the server's log")
        finally:
            stream.close()

    def _generate_per_line(self, request: SynthesisRequest, cancel: threading.Event) -> Iterator[Event]:
        job, wire = request.job_id, self._wire
        assert wire is not None, "a per-line protocol has its wire from the load"
        yield JobStarted(job, tuple(ln.line_id for ln in request.lines))
        base_seed = request_seed(request.sampling)
        backend = self.backend
        for index, line in enumerate(request.lines):
            if cancel.is_set():
                yield JobFinished(job, cancelled=True)
                return
            seed = line_seed(base_seed, index)
            yield LineStarted(job, line.line_id)
            pieces, sent, started = [], 0, time.perf_counter()
            for samples in wire.line_audio(request, line, seed, cancel):
                pieces.append(samples)
                yield AudioChunk(job, line.line_id, sent, samples)
                sent += len(samples)
                frames = sent // FRAME_SAMPLES
                yield Progress(job, line.line_id, frames, max(frames + 1, round(1.1 * len(line.text))),
                               (time.perf_counter() - started) / (sent / SAMPLE_RATE))
            if cancel.is_set():
                yield JobFinished(job, cancelled=True)
                return
            if not pieces:
                raise RemoteError(f"{self._where()} returned no audio for line {index + 1}")
            fingerprint = line_fingerprint(line, request.references, request.sampling,
                                           f"remote-{self.protocol}|{self.base_url}|{self.settings.model}",
                                           request.ignore_eos)
            yield LineFinished(job, line.line_id, uuid.uuid4().hex, np.zeros((NUM_CODEBOOKS, 0), np.int64),
                               np.concatenate(pieces), seed, fingerprint, backend)
        yield JobFinished(job)


CLOUD_KEY_CHECK = "/wallet/self/api-credit"
"""Fish's cloud: the key's API credit (docs.fish.audio, Wallet ▸ Get API Credit), the cheapest call that needs a
valid key and costs nothing."""
_API_NAMES = {"fish": "Fish API", "fishcloud": "Fish Audio cloud", "openai": "OpenAI API", "vllm": "vllm-omni",
              "sglang": "sglang-omni"}

__all__ = ["RemoteEngine", "RemoteError", "RemoteSettings"]
