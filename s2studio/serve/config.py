"""What a server is started with: where it listens, who may call it, and the limits it enforces.

`Limits` is the server's one table of limits (the README prints it): what a request may hold, how long a
client may take to send it, and how many connections may be open. The generation settings a request carries
(seed, temperature, top-p, top-k, frames) are bounded by the studio's own table, `s2studio.settings.LIMITS`,
which the engine checks too (`SETTINGS_BOUNDS` below is its view for request models); audio by
`state.audio_limits`, which every reader of audio checks.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from s2studio.errors import UserError
from s2studio.settings import LIMITS

SETTINGS_BOUNDS = {name: (int(limit.lo), int(limit.hi)) if limit.integer else (limit.lo, limit.hi)
                   for name, limit in LIMITS.items()}
"""The studio's generation limits, with the integer ones as integers (pydantic's `ge`/`le`)."""


def setting_field(name: str, default: Any = LIMITS) -> Any:
    """A request model's field for the generation setting `name`: the table's bounds, and its default unless
    `default` is given (None: the engine chooses, e.g. a seed)."""
    lo, hi = SETTINGS_BOUNDS[name]
    return Field(LIMITS[name].default if default is LIMITS else default, ge=lo, le=hi)


@dataclass(frozen=True)
class Limits:
    """Each one exceeded is a clear 4xx in the calling API's own error shape (or a closed connection)."""

    max_body_bytes: int = 32 * 1024 * 1024
    """A request body larger than this is refused with 413 before it is read whole (inline references
    are the big part: four 30 s WAV clips at 44.1 kHz are about 10 MB)."""
    max_text_chars: int = 4096
    """OpenAI's own limit for `input`; the same for Fish's `text` and a script (four times it for the
    studio's own route, whose lines carry a scene)."""
    max_lines: int = 1000
    """Lines (turns, pieces) one request may ask for."""
    max_reference_seconds: float = 30.0
    """Longest inline reference clip: the exact encoder's memory grows with a clip's length (10-30 s clones
    best). Library voices' clips are bounded by `state.audio_limits.MAX_REFERENCE_SECONDS`."""
    max_references: int = 8
    """Inline reference clips (audio) per request."""
    max_coded_references: int = 256
    """References and context turns sent as codes (the studio's route: a cast's clips and earlier lines)."""
    max_items: int = 10_000
    """Items of any one list (or map) in a request body, counted before the body is validated."""
    max_depth: int = 16
    """Nesting depth of a request body (maps and lists); a deeper body is refused before it is validated."""
    max_name_chars: int = 200
    """Voice names and ids, cast names, model names."""
    max_new_tokens: int = 4096
    """Most frames per batch (about 190 s of speech); a request asking for more gets this many."""
    queue_size: int = 16
    """Requests waiting for the engine; one more is answered 503 with Retry-After."""
    max_connections: int = 64
    """Open connections; one more closes the longest-idle connection that has no request in flight, or itself
    when every one is busy."""
    header_timeout_s: float = 10.0
    """A connection must send a request's whole headers within this long (of connecting, or of its previous
    response), or it gets 408 and is closed."""
    body_timeout_s: float = 20.0
    """Each piece of a request body must arrive within this long of the previous one (408 otherwise)."""
    keep_alive_s: int = 5
    """An idle kept-alive connection is closed after this long (uvicorn's `timeout_keep_alive`)."""
    max_header_bytes: int = 16 * 1024
    """Request line and headers together (h11's `max_incomplete_event_size`; 400 beyond)."""


@dataclass(frozen=True)
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)
    model_id: str = "s2-pro"
    """The name `/v1/models` lists and `model` fields may use (any other value is accepted too)."""

    def __post_init__(self) -> None:
        if not is_loopback(self.host) and not self.api_key:
            raise UserError(f"refusing to listen on {self.host} without an API key: anyone who can reach it "
                            "could use this computer; set S2STUDIO_API_KEY to a key (at least 8 characters), "
                            "or listen on 127.0.0.1")
        if self.api_key is not None and len(self.api_key) < 8:
            raise UserError("the API key is too short; use at least 8 characters (e.g. `openssl rand -hex 16`)")


def is_loopback(host: str) -> bool:
    """True for addresses only this computer can reach: 127.0.0.0/8, ::1 and the name localhost."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to anything


def is_loopback_host_header(value: str) -> bool:
    """A `Host` header that names this computer's loopback (`localhost`, `127.0.0.1:8000`, `[::1]:8000`): what a
    page served from another name (DNS rebinding) cannot send."""
    host = value.strip().lower()
    if host.startswith("["):
        host = host[1:host.find("]")] if "]" in host else host
    elif host.count(":") == 1:
        host = host.split(":")[0]
    return bool(host) and is_loopback(host)
