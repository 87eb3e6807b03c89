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
from s2studio.engine.remote import RemoteEngine, RemoteSettings


@dataclass(frozen=True)
class ServerTarget:
    url: str
    api_key: str = ""
    model: str = "s2-pro"
    """The model a Fish server should use (Fish's cloud: s2-pro, s2.1-pro, …)."""


def remote_settings(target: ServerTarget) -> RemoteSettings:
    return RemoteSettings(target.url, target.api_key, model=target.model or "s2-pro")


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
