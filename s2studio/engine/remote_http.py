"""The one HTTP client stack every remote wire shares (engine/remote.py and the wire modules).

A `Link` is one server: its base address, its key, one `httpx.Client`, and the calls that turn whatever the
network does into one `RemoteError` line a person can act on (`Busy` when the server says 503 with Retry-After,
`Unreachable` when nothing answers, so the render plan can tell a pause from a loss). Streamed responses are read
on a helper thread (`Stream`), so `cancel` is seen within a tenth of a second and a connection that goes quiet
ends with an error, never a hang. `WavReader` and `PcmReader` turn streamed bytes into float32 samples at the
engine's rate. Torch-free.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import httpx
import numpy as np

from s2studio.engine.api import SAMPLE_RATE

log = logging.getLogger(__name__)

POLL_S = 0.1


class RemoteError(Exception):
    """One line for the person: what failed with the server and what to do."""


class Stream:
    """A streamed response read on a helper thread; `chunks` yields bytes, polling `cancel`."""

    def __init__(self, client: httpx.Client, request: httpx.Request, quiet_s: float, describe: Callable[[], str]):
        self._queue: queue.Queue[bytes | BaseException | None] = queue.Queue()
        self._quiet_s, self._describe = quiet_s, describe
        self.response = client.send(request, stream=True)
        if self.response.status_code < 400:  # an error's body is read whole by `Link.open`, never by the reader
            threading.Thread(target=self._read, name="remote-reader", daemon=True).start()

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
                    raise Unreachable(f"{self._describe()} sent nothing for {self._quiet_s:.0f} s; the connection "
                                      "seems dead (check the server)") from None
                continue
            quiet = 0.0
            if item is None:
                return
            if isinstance(item, httpx.ReadTimeout):
                raise Unreachable(f"{self._describe()} sent nothing for {self._quiet_s:.0f} s; the connection "
                                  "seems dead (check the server)")
            if isinstance(item, BaseException):
                raise Unreachable(f"the connection to {self._describe()} broke ({_reason(item)}); "
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


class WavReader:
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


class Busy(RemoteError):
    """The server said 503: busy now, ask again after `retry_after` seconds."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Unreachable(RemoteError):
    """Nothing answered at the address (refused, reset, timed out before a reply)."""


def retry_after_s(response: httpx.Response, default: float = 5.0) -> float:
    try:
        return max(0.0, float(response.headers.get("retry-after", default)))
    except ValueError:
        return default


class PcmReader:
    """Raw 16-bit little-endian mono PCM at `rate` -> float32 at the engine's rate, in pieces of any size."""

    def __init__(self, rate: int = SAMPLE_RATE) -> None:
        self.rate = rate
        self._odd = b""

    def feed(self, data: bytes) -> np.ndarray:
        data = self._odd + data
        usable = len(data) - len(data) % 2
        self._odd = data[usable:]
        return to_engine_rate(np.frombuffer(data[:usable], dtype="<i2").astype(np.float32) / 32768.0, self.rate)


def to_engine_rate(samples: np.ndarray, rate: int | None) -> np.ndarray:
    if rate in (None, SAMPLE_RATE) or not len(samples):
        return samples
    from s2studio.audio.dsp import resample

    return resample(samples, int(rate), SAMPLE_RATE).astype(np.float32)


def server_address(url: str) -> str:
    """The base address of a server as typed ("http://gpu-box:8000/v1/" -> "http://gpu-box:8000")."""
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{url!r} is not a server address; write it like http://gpu-box:8000")
    return url.removesuffix("/v1")


class Link:
    """One server's HTTP client: calls and streams with the errors a person reads."""

    def __init__(self, url: str, api_key: str = "", quiet_s: float = 60.0, connect_s: float = 10.0,
                 transport: httpx.BaseTransport | None = None, auth_header: str = "Authorization") -> None:
        self.base_url = server_address(url)
        self.quiet_s = quiet_s
        headers = {"User-Agent": "s2studio-remote"}
        if api_key:
            headers[auth_header] = f"Bearer {api_key}"
        self.client = httpx.Client(base_url=self.base_url, headers=headers, transport=transport,
                                   timeout=httpx.Timeout(quiet_s, connect=connect_s))

    def close(self) -> None:
        self.client.close()

    def where(self) -> str:
        return f"the server at {self.base_url}"

    def call(self, method: str, path: str, **kwargs: object) -> httpx.Response:
        try:
            return self.client.request(method, path, **kwargs)  # type: ignore[arg-type]
        except httpx.ConnectError as exc:
            raise Unreachable(f"cannot reach {self.where()} ({_reason(exc)}); check the address and that the "
                              "server runs") from None
        except httpx.TimeoutException:
            raise Unreachable(f"{self.where()} did not answer in time; check the address and the network") from None
        except httpx.HTTPError as exc:
            raise Unreachable(f"talking to {self.where()} failed ({_reason(exc)})") from None

    def check(self, response: httpx.Response, doing: str) -> httpx.Response:
        if response.status_code == 401 or response.status_code == 403:
            raise RemoteError(f"{self.where()} refused the API key ({_error_message(response)}); "
                              "check the key in Settings")
        if response.status_code in (429, 503):
            wait = retry_after_s(response)
            raise Busy(f"{self.where()} is busy ({_error_message(response)}); try again in {wait:g} s", wait)
        if response.status_code >= 400:
            raise RemoteError(f"{doing} failed on {self.where()}: {_error_message(response)}")
        return response

    def open(self, method: str, path: str, doing: str, **kwargs: object) -> Stream:
        request = self.client.build_request(method, path, **kwargs)  # type: ignore[arg-type]
        try:
            stream = Stream(self.client, request, self.quiet_s, self.where)
        except httpx.ConnectError as exc:
            raise Unreachable(f"cannot reach {self.where()} ({_reason(exc)}); check the address and that the "
                              "server runs") from None
        except httpx.HTTPError as exc:
            raise Unreachable(f"talking to {self.where()} failed ({_reason(exc)})") from None
        if stream.response.status_code >= 400:
            stream.response.read()
            stream.close()
            self.check(stream.response, doing)
        return stream
