"""Rendering on a server, as the studio's window needs it without touching the engine's modules: the server a
person typed (`ServerTarget`, plain data), the engine's settings for it (`remote_settings`, what the engine
switch takes), and "Test connection" (`probe_server`: network only, torch-free, run on the caller's helper
thread so that neither the GUI nor a render on the engine thread waits for it)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from s2studio.engine.api import JobFailed, LoadRequest, ModelReady
from s2studio.engine.fleet_members import FleetSettings
from s2studio.engine.remote import RemoteEngine, RemoteSettings


KINDS = ("auto", "s2studio", "vllm", "sglang", "fish", "fishcloud", "openai")
"""The kinds of server the remote engine speaks (its `PROTOCOLS`), for the window's list."""


def store_key(key: str) -> None:
    """Fish Audio's cloud key into the system keyring (never into a settings file)."""
    from s2studio.engine.wire_fish import store_cloud_key

    store_cloud_key(key)


@dataclass(frozen=True)
class ServerTarget:
    url: str
    api_key: str = ""
    model: str = "s2-pro"
    """The model a Fish server should use (Fish's cloud: s2-pro, s2.1-pro, …)."""
    kind: str = "auto"
    """How to talk to it: auto, s2studio, vllm, sglang, fish, fishcloud, openai."""
    slots: int = 4
    """Requests in flight when it renders beside other engines."""

    def describe(self) -> str:
        return f"{self.url or 'Fish Audio cloud'} ({self.kind}, {self.slots} in flight)"


@dataclass(frozen=True)
class FleetTarget:
    """This computer (`local_slots`: 0 not at all, None its batch slots, N at most N) and servers, sharing a
    render's scenes."""

    servers: tuple[ServerTarget, ...]
    local_slots: int | None = None


def remote_settings(target: ServerTarget) -> RemoteSettings:
    return RemoteSettings(target.url, target.api_key, protocol=target.kind, model=target.model or "s2-pro")  # type: ignore[arg-type]


def engine_choice(target: ServerTarget | FleetTarget | None) -> RemoteSettings | FleetSettings | None:
    """What the engine switch takes for a choice of Settings ▸ Render on."""
    if isinstance(target, FleetTarget):
        return FleetSettings(tuple(remote_settings(t) for t in target.servers),
                             tuple(t.slots for t in target.servers), target.local_slots)
    return remote_settings(target) if target is not None else None


def probe_server(target: ServerTarget, cancel: threading.Event | None = None) -> str:
    """Ask the server for its model; one line for the person: "Connected: …, N ms round trip, … protocol." or
    "Not connected: <why>"."""
    try:
        engine = RemoteEngine(remote_settings(target))
    except ValueError as exc:
        return str(exc)
    started = time.perf_counter()
    message = "Not connected: the server did not answer."
    try:
        for event in engine.load(LoadRequest("test", Path("remote")), cancel or threading.Event()):
            if isinstance(event, ModelReady):
                ms = (time.perf_counter() - started) * 1000
                device = event.info.device.rsplit(" on ", 1)[0]  # the name says where already
                message = (f"Connected: {event.info.name} ({device}, {event.info.precision}), "
                           f"{ms:.0f} ms round trip, {engine.protocol} protocol.")
            elif isinstance(event, JobFailed):
                message = f"Not connected: {event.error}"
    finally:
        engine.close()
    return message
