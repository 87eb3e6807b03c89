"""`RemoteEngine`: the engine contract over HTTP, so the studio renders on another machine (design.md §3).

Three protocols, one engine:

- `s2studio` — `s2studio serve` elsewhere. Requests and events travel whole (`engine/remote_wire.py`):
  references as codes that server's codec made (`POST /v1/vqgan/encode`, cached by the voice library as
  for a local codec), context turns, line mode, codes and seeds of every take. A remote take equals the take
  the same engine makes locally.
- `fish` — Fish's `POST /v1/tts` (upstream fish-speech's API server, Fish Audio's cloud with the user's key and
  the `model` header): each line one streamed WAV request with the line's seed, references sent as their clips'
  audio and transcripts. Such servers return audio only, so a take's codes are empty and no context travels.
- `openai` — OpenAI's `POST /v1/audio/speech` (vllm-omni, SGLang-based servers): the server's own voices,
  named per speaker index in `RemoteSettings.voices`; audio only, like `fish`.

`auto` asks `/v1/s2studio/info` first, then `/v1/health`, then `/v1/models`. Every call runs on the engine
thread. Responses are read by a helper thread into a queue, so `cancel` is seen within a tenth of a second
(closing the stream, which cancels the job on a server that watches disconnects) and a connection that
breaks or goes quiet ends the job with one clear `JobFailed`, never a hang.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import httpx
import numpy as np
import ormsgpack

from s2studio.engine import remote_wire
from s2studio.engine.api import (
    FRAME_SAMPLES, NUM_CODEBOOKS, SAMPLE_RATE, AudioChunk, ClipEncoded, EncodeRequest, Event, JobFailed, JobFinished,
    JobStarted, LineFinished, LineSpec, LineStarted, LoadRequest, ModelInfo, ModelLoading, ModelReady, Progress,
    SynthesisRequest,
)
from s2studio.engine.plan import line_fingerprint

log = logging.getLogger(__name__)

Protocol = Literal["auto", "s2studio", "fish", "openai"]
POLL_S = 0.1
STAND_IN_CODES = np.zeros((NUM_CODEBOOKS, 1), np.int64)
"""What `encode` reports on a server that cannot encode (Fish's cloud, OpenAI-style servers): a one-frame
placeholder that lets the voice library cache "done"; such servers get the clip's audio instead."""


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


class RemoteError(Exception):
    """One line for the person: what failed with the server and what to do."""


class _Stream:
    """A streamed response read on a helper thread; `chunks` yields bytes, polling `cancel`."""

    def __init__(self, client: httpx.Client, request: httpx.Request, quiet_s: float, describe: Callable[[], str]):
        self._queue: queue.Queue[bytes | BaseException | None] = queue.Queue()
        self._client, self._quiet_s, self._describe = client, quiet_s, describe
        self.response = client.send(request, stream=True)
        self._thread = threading.Thread(target=self._read, name="remote-reader", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for data in self.response.iter_raw():
                self._queue.put(data)
            self._queue.put(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the engine thread
            self._queue.put(exc)

    def chunks(self, cancel: threading.Event) -> Iterator[bytes]:
        """Bytes as they arrive; returns early when `cancel` is set (the caller then closes)."""
        quiet = 0.0
        while not cancel.is_set():
            try:
                item = self._queue.get(timeout=POLL_S)
            except queue.Empty:
                quiet += POLL_S
                if quiet >= self._quiet_s + 1.0:  # httpx's read timeout says so first; this is the backstop
                    raise RemoteError(f"{self._describe()} sent nothing for {self._quiet_s:.0f} s; the connection "
                                      "seems dead (check the server)") from None
                continue
            quiet = 0.0
            if item is None:
                return
            if isinstance(item, httpx.ReadTimeout):
                raise RemoteError(f"{self._describe()} sent nothing for {self._quiet_s:.0f} s; the connection "
                                  "seems dead (check the server)")
            if isinstance(item, BaseException):
                raise RemoteError(f"the connection to {self._describe()} broke ({_reason(item)}); "
                                  "check the server and render again")
            yield item

    def close(self) -> None:
        self.response.close()


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _error_message(response: httpx.Response) -> str:
    """The server's own message, from OpenAI's, Fish's or FastAPI's error shape."""
    try:
        raw = response.json()
    except ValueError:
        return response.text.strip()[:200] or response.reason_phrase
    if isinstance(raw, dict):
        if isinstance(raw.get("error"), dict):
            return str(raw["error"].get("message", ""))
        for key in ("message", "detail", "error"):
            if raw.get(key):
                return str(raw[key])
    return str(raw)[:200]


class _Wav:
    """PCM16 mono samples out of a streamed WAV (header of any length, then data)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.rate: int | None = None
        self._in_data = False

    def feed(self, data: bytes) -> np.ndarray:
        self._buffer += data
        if not self._in_data:
            if len(self._buffer) < 12:
                return np.zeros(0, np.float32)
            if self._buffer[:4] != b"RIFF" or self._buffer[8:12] != b"WAVE":
                raise RemoteError("the server did not answer with WAV audio")
            pos = 12
            while True:
                if len(self._buffer) < pos + 8:
                    return np.zeros(0, np.float32)
                tag, size = bytes(self._buffer[pos:pos + 4]), int.from_bytes(self._buffer[pos + 4:pos + 8], "little")
                if tag == b"fmt ":
                    if len(self._buffer) < pos + 8 + 16:
                        return np.zeros(0, np.float32)
                    fmt = self._buffer[pos + 8:pos + 24]
                    channels, rate, bits = (int.from_bytes(fmt[2:4], "little"), int.from_bytes(fmt[4:8], "little"),
                                            int.from_bytes(fmt[14:16], "little"))
                    if channels != 1 or bits != 16:
                        raise RemoteError(f"the server sent {channels}-channel {bits}-bit WAV; expected 16-bit mono")
                    self.rate = rate
                if tag == b"data":
                    del self._buffer[:pos + 8]
                    self._in_data = True
                    break
                pos += 8 + size + (size & 1)
        usable = len(self._buffer) - len(self._buffer) % 2
        samples = np.frombuffer(bytes(self._buffer[:usable]), dtype="<i2").astype(np.float32) / 32768.0
        del self._buffer[:usable]
        return samples


class RemoteEngine:
    """An `Engine` whose model runs on a server (see the module docstring for the protocols)."""

    def __init__(self, settings: RemoteSettings, transport: httpx.BaseTransport | None = None) -> None:
        url = settings.url.strip().rstrip("/")
        if not urlsplit(url).scheme in ("http", "https") or not urlsplit(url).netloc:
            raise ValueError(f"{settings.url!r} is not a server address; write it like http://gpu-box:8000")
        self.settings = settings
        self.base_url = url.removesuffix("/v1")
        headers = {"User-Agent": "s2studio-remote"}
        if settings.api_key:
            headers["Authorization"] = f"Bearer {settings.api_key}"
        self._client = httpx.Client(base_url=self.base_url, headers=headers, transport=transport,
                                    timeout=httpx.Timeout(settings.quiet_s, connect=settings.connect_s))
        self.protocol: Protocol = settings.protocol
        self.info: ModelInfo | None = None
        self.round_trip_s: float | None = None

    def close(self) -> None:
        self._client.close()

    # ------------------------------------------------------------------ plumbing

    def _where(self) -> str:
        return f"the server at {self.base_url}"

    def _call(self, method: str, path: str, **kwargs: object) -> httpx.Response:
        try:
            response = self._client.request(method, path, **kwargs)  # type: ignore[arg-type]
        except httpx.ConnectError as exc:
            raise RemoteError(f"cannot reach {self._where()} ({_reason(exc)}); check the address and that the "
                              "server runs") from None
        except httpx.TimeoutException:
            raise RemoteError(f"{self._where()} did not answer in time; check the address and the network") from None
        except httpx.HTTPError as exc:
            raise RemoteError(f"talking to {self._where()} failed ({_reason(exc)})") from None
        return response

    def _check(self, response: httpx.Response, doing: str) -> httpx.Response:
        if response.status_code == 401:
            raise RemoteError(f"{self._where()} refused the API key ({_error_message(response)}); "
                              "check the key in Settings")
        if response.status_code == 503:
            retry = response.headers.get("retry-after", "a few")
            raise RemoteError(f"{self._where()} is busy ({_error_message(response)}); try again in {retry} s")
        if response.status_code >= 400:
            raise RemoteError(f"{doing} failed on {self._where()}: {_error_message(response)}")
        return response

    def _open(self, method: str, path: str, doing: str, **kwargs: object) -> _Stream:
        request = self._client.build_request(method, path, **kwargs)  # type: ignore[arg-type]
        try:
            stream = _Stream(self._client, request, self.settings.quiet_s, self._where)
        except httpx.ConnectError as exc:
            raise RemoteError(f"cannot reach {self._where()} ({_reason(exc)}); check the address and that the "
                              "server runs") from None
        except httpx.HTTPError as exc:
            raise RemoteError(f"talking to {self._where()} failed ({_reason(exc)})") from None
        if stream.response.status_code >= 400:
            stream.response.read()
            stream.close()
            self._check(stream.response, doing)
        return stream

    @staticmethod
    def _guard(job_id: str, events: Iterator[Event]) -> Iterator[Event]:
        try:
            yield from events
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
        started = time.perf_counter()
        protocol = self._detect()
        if cancel.is_set():
            yield JobFinished(job, cancelled=True)
            return
        yield ModelLoading(job, 0.5, f"asking {self.base_url} for its model")
        host = urlsplit(self.base_url).netloc
        if protocol == "s2studio":
            raw = self._check(self._call("GET", "/v1/s2studio/info"), "asking for the model").json()
            remote = remote_wire.info_from_json(raw.get("model"))
            info = ModelInfo(f"{remote.name} on {host}", f"{remote.device} on {host}", remote.precision,
                             remote.sample_rate, remote.codec_fingerprint, remote.max_context)
        elif protocol == "fish":
            self._check(self._call("GET", "/v1/health"), "connecting")
            info = ModelInfo(f"{self.settings.model} on {host}", f"Fish API on {host}", "remote", SAMPLE_RATE,
                             f"remote-audio:{self.base_url}", 32768)
        else:
            self._check(self._call("GET", "/v1/models"), "connecting")
            info = ModelInfo(f"{self.settings.model} on {host}", f"OpenAI API on {host}", "remote", SAMPLE_RATE,
                             f"remote-audio:{self.base_url}", 32768)
        self.round_trip_s = time.perf_counter() - started
        self.protocol, self.info = protocol, info
        yield ModelLoading(job, 1.0, "ready")
        yield ModelReady(job, info)
        yield JobFinished(job)

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
        stream = self._open("POST", "/v1/s2studio/generate", "rendering", content=remote_wire.request_to_wire(request),
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
                                           record["fingerprint"])
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
        job = request.job_id
        yield JobStarted(job, tuple(ln.line_id for ln in request.lines))
        base_seed = request.sampling.base_seed()
        for index, line in enumerate(request.lines):
            if cancel.is_set():
                yield JobFinished(job, cancelled=True)
                return
            seed = base_seed + index
            yield LineStarted(job, line.line_id)
            stream = (self._open_fish(request, line, seed) if self.protocol == "fish"
                      else self._open_openai(request, line, seed))
            wav, pieces, sent, started = _Wav(), [], 0, time.perf_counter()
            try:
                for data in stream.chunks(cancel):
                    samples = wav.feed(data)
                    if wav.rate not in (None, SAMPLE_RATE) and len(samples):
                        from s2studio.audio.dsp import resample

                        samples = resample(samples, int(wav.rate), SAMPLE_RATE).astype(np.float32)
                    if not len(samples):
                        continue
                    pieces.append(samples)
                    yield AudioChunk(job, line.line_id, sent, samples)
                    sent += len(samples)
                    frames = sent // FRAME_SAMPLES
                    yield Progress(job, line.line_id, frames, max(frames + 1, round(1.1 * len(line.text))),
                                   (time.perf_counter() - started) / (sent / SAMPLE_RATE))
            finally:
                stream.close()
            if cancel.is_set():
                yield JobFinished(job, cancelled=True)
                return
            if not pieces:
                raise RemoteError(f"{self._where()} returned no audio for line {index + 1}")
            fingerprint = line_fingerprint(line, request.references, request.sampling,
                                           f"remote-{self.protocol}|{self.base_url}|{self.settings.model}")
            yield LineFinished(job, line.line_id, uuid.uuid4().hex, np.zeros((NUM_CODEBOOKS, 0), np.int64),
                               np.concatenate(pieces), seed, fingerprint)
        yield JobFinished(job)

    def _open_fish(self, request: SynthesisRequest, line: LineSpec, seed: int) -> _Stream:
        references = []
        for ref in request.references:
            if ref.clip is None:
                raise RemoteError("this server takes references as audio, and a voice's clip file is unknown; "
                                  "re-add the voice's clips")
            try:
                audio = Path(ref.clip).read_bytes()
            except OSError as exc:
                raise RemoteError(f"cannot read the reference clip {Path(ref.clip).name}: {exc.strerror or exc}") from None
            references.append({"audio": audio, "text": f"<|speaker:{ref.speaker}|>{ref.transcript}"})
        s = request.sampling
        body = {"text": f"<|speaker:{line.speaker}|>{line.text}", "references": references, "format": "wav",
                "streaming": True, "seed": seed, "temperature": s.temperature, "top_p": s.top_p,
                "max_new_tokens": s.max_new_tokens, "chunk_length": 1000, "normalize": False, "latency": "normal"}
        return self._open("POST", "/v1/tts", "rendering", content=ormsgpack.packb(body),
                          headers={"Content-Type": "application/msgpack", "model": self.settings.model})

    def _open_openai(self, request: SynthesisRequest, line: LineSpec, seed: int) -> _Stream:
        voices = self.settings.voices or ("alloy",)
        voice = voices[line.speaker] if line.speaker < len(voices) else voices[0]
        s = request.sampling  # seed, temperature and top_p: extensions `s2studio serve` reads, others ignore
        body = {"model": self.settings.model, "input": line.text, "voice": voice, "response_format": "wav",
                "stream_format": "audio", "seed": seed, "temperature": s.temperature, "top_p": s.top_p}
        return self._open("POST", "/v1/audio/speech", "rendering", json=body)


__all__ = ["RemoteEngine", "RemoteError", "RemoteSettings"]
