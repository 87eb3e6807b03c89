"""What a server is started with: where it listens, who may call it, and the limits of a request."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from s2studio.errors import UserError


@dataclass(frozen=True)
class Limits:
    """Per-request limits; each one exceeded is a clear 4xx in the calling API's own error shape."""

    max_body_bytes: int = 32 * 1024 * 1024
    """A request body larger than this is refused with 413 before it is read whole (inline references
    are the big part: four 30 s WAV clips at 44.1 kHz are about 10 MB)."""
    max_text_chars: int = 4096
    """OpenAI's own limit for `input`; the same for Fish's `text` and a script."""
    max_reference_seconds: float = 60.0
    max_references: int = 8
    max_new_tokens: int = 4096
    """Most frames per batch (about 190 s of speech); a request asking for more gets this many."""
    queue_size: int = 16
    """Requests waiting for the engine; one more is answered 503 with Retry-After."""


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
                            "could use this computer; pass --api-key KEY (or set S2STUDIO_API_KEY), "
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
