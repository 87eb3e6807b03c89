"""`EngineSwitch`: the one place the studio's engine is chosen, this computer's or a server's (issue 13).

The studio's engine thread hosts one engine for its whole life; this is it. `choose` (from the GUI thread,
before a load) says where the next load goes: None for the local engine, built by `local` on the engine thread
the first time it is needed (so torch is imported there), or `RemoteSettings` for a `RemoteEngine`. The load
itself switches, on the engine thread, and frees the local model when rendering moves to a server. Encode and
generate go to the engine of the last successful load. Torch-free.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from s2studio.engine.api import (
    EncodeRequest, Engine, Event, JobFailed, LoadRequest, ModelReady, Step, SynthesisRequest,
)
from s2studio.engine.fleet import FleetEngine
from s2studio.engine.fleet_members import FleetSettings, Member, no_seed_note
from s2studio.engine.fleet_local import Submit
from s2studio.engine.remote import RemoteEngine, RemoteSettings, remembered_voices
from s2studio.engine.scheduler import synthesis


class EngineSwitch:
    def __init__(self, local: Callable[[], Engine]) -> None:
        self._make_local = local
        self._local: Engine | None = None
        self._remote: RemoteEngine | None = None
        self._active: Engine | None = None
        self._wanted: RemoteSettings | FleetSettings | None = None
        self._fleet: FleetEngine | None = None
        self._submit: Submit | None = None

    def attach_scheduler(self, submit: Submit) -> None:
        """The engine thread's scheduler: a render plan's scenes on this computer run as its jobs."""
        self._submit = submit

    def choose(self, remote: RemoteSettings | FleetSettings | None) -> None:
        self._wanted = remote

    def status_lines(self, notices: bool = True) -> list[str]:
        """One line per engine of the fleet (lines done, frames/s, failures), then (`notices`) what moved work; []
        when one engine renders."""
        fleet = self._active if isinstance(self._active, FleetEngine) else None
        return fleet.status() + (fleet.notices[-3:] if notices else []) if fleet is not None else []

    def travel_notes(self, lora_voices: Sequence[str] = ()) -> list[str]:
        """What a render on the chosen engines cannot do as this computer would, per server and per voice (those of
        `lora_voices` carry a LoRA): the person is asked first. (One server refuses a LoRA voice outright.)"""
        if isinstance(self._active, FleetEngine):
            return self._active.cannot_travel(lora_voices)
        remote = self.remote
        if remote is not None and not remote.backend.seed_reproduces:
            return [no_seed_note(remote.base_url, remote.backend.kind)]
        return []

    def _fleet_for(self, wanted: FleetSettings) -> FleetEngine:
        if self._fleet is not None and self._fleet.settings == wanted:
            return self._fleet
        members = []
        if wanted.local_slots != 0:
            if self._local is None:
                self._local = self._make_local()
            members.append(Member(self._local, wanted.local_slots or 0, "this computer"))  # 0: its batch slots
        for server, slots in zip(wanted.servers, wanted.slots, strict=True):
            engine = RemoteEngine(server, registry=remembered_voices())
            members.append(Member(engine, slots, engine.base_url))
        self._fleet = FleetEngine(members, settings=wanted)
        if self._submit is not None:
            self._fleet.attach_scheduler(self._submit)
        return self._fleet

    @property
    def remote(self) -> RemoteEngine | None:
        """The remote engine when the last load went to a server."""
        return self._active if isinstance(self._active, RemoteEngine) else None

    def load(self, request: LoadRequest, cancel: threading.Event) -> Iterator[Event]:
        wanted = self._wanted
        if isinstance(wanted, FleetSettings):
            try:
                engine: Engine = self._fleet_for(wanted)
            except ValueError as exc:
                yield JobFailed(request.job_id, str(exc))
                return
        elif wanted is None:
            if self._local is None:
                self._local = self._make_local()
            engine = self._local
        else:
            if self._remote is None or self._remote.settings != wanted:
                if self._remote is not None:
                    self._remote.close()
                try:
                    self._remote = RemoteEngine(wanted)
                except ValueError as exc:
                    yield JobFailed(request.job_id, str(exc))
                    return
            engine = self._remote
            unload: Any = getattr(self._local, "unload", None)
            if unload is not None:  # the local model's memory is not needed while a server renders
                unload()
        self._active = None
        for event in engine.load(request, cancel):
            if isinstance(event, ModelReady):
                self._active = engine
            yield event

    def encode(self, request: EncodeRequest, cancel: threading.Event) -> Iterator[Event]:
        if self._active is None:
            return iter([JobFailed(request.job_id, "no model is loaded; choose a model folder or a server first")])
        return self._active.encode(request, cancel)

    def generate(self, request: SynthesisRequest, cancel: threading.Event) -> Iterator[Event]:
        if self._active is None:
            return iter([JobFailed(request.job_id, "no model is loaded; choose a model folder or a server first")])
        return self._active.generate(request, cancel)

    @property
    def max_batch(self) -> int:
        """The active engine's streams at once (a server's requests run one after another: 1)."""
        return int(getattr(self._active, "max_batch", 1) or 1)

    def stream(self, request: SynthesisRequest, cancel: threading.Event) -> Iterator[Step]:
        """The job on the active engine as the scheduler runs it (`scheduler.synthesis`)."""
        if self._active is None:
            return iter([JobFailed(request.job_id, "no model is loaded; choose a model folder or a server first")])
        return synthesis(self._active, request, cancel)

    def step(self) -> None:
        step = getattr(self._active, "step", None)
        if step is not None:
            step()
