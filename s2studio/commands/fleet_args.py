"""`synth --server URL[#kind] …` and `--local-slots N`: a script rendered over several engines (engine/fleet.py).

Each `--server` is one engine of the fleet; `#kind` says how to talk to it (s2studio, vllm, sglang, fish,
fishcloud, openai; default: asked of the server), `#kind*N` its requests in flight (default 4, our own
`s2studio serve` 1: it renders one line at a time). This computer takes as many scenes at once as its engine's
batch slots (`--local-slots N`: at most N; 0: the servers only). What cannot travel to a server (a seed it does not
honour, a voice's LoRA) is said before the render, which asks on a terminal (`--yes`: go on without asking).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from s2studio.engine.api import Engine
from s2studio.engine.fleet import FleetEngine
from s2studio.engine.fleet_members import FleetConfig, Member
from s2studio.engine.remote import PROTOCOLS, RemoteEngine, RemoteSettings, remembered_voices
from s2studio.errors import UserError

SERVER_SLOTS = 4
"""Requests in flight on a server by default (the issue's concurrency default)."""


def add_arguments(add: Callable[..., None]) -> None:
    add("--server", action="append", default=[], metavar="URL[#KIND[*N]]",
        help="also render on this server (repeatable): KIND is s2studio, vllm, sglang, fish, fishcloud or openai "
             "(default: asked of the server), N its requests in flight; scenes (# headings) are shared out")
    add("--server-key", default="", metavar="KEY", help="API key for the --server engines (fishcloud: the keyring)")
    add("--yes", action="store_true",
        help="render on the servers without asking, even where something cannot travel there (a seed, a LoRA)")
    add("--local-slots", type=int, default=None, metavar="N",
        help="scenes this computer renders at once beside the servers (0: servers only; default: as many as its "
             "batch slots, see --max-batch)")


def parse_server(spec: str) -> tuple[str, str, int | None]:
    """"http://gpu:8000#vllm*8" -> (url, kind, 8)."""
    url, _, rest = spec.partition("#")
    kind, _, slots = rest.partition("*")
    kind = kind.strip() or "auto"
    if kind not in PROTOCOLS:
        raise UserError(f"--server {spec}: unknown kind {kind!r}; use one of {', '.join(PROTOCOLS)}")
    if slots and not (slots.isdigit() and int(slots) > 0):
        raise UserError(f"--server {spec}: requests in flight must be a whole number above 0, got {slots!r}")
    return url.strip(), kind, int(slots) if slots else None


def fleet_engine(args: argparse.Namespace, local: Callable[[], Engine]) -> Engine | None:
    """The fleet `args` ask for, or None for a render on this computer alone."""
    servers: list[str] = list(getattr(args, "server", None) or [])
    slots = getattr(args, "local_slots", None)
    if not servers:
        if slots is not None:
            raise UserError("--local-slots needs at least one --server; alone, this computer renders as many scenes "
                            "at once as --max-batch allows")
        return None
    if slots is not None and slots < 0:
        raise UserError(f"--local-slots must be 0 or more, got {slots}")
    members: list[Member] = [Member(local(), slots or 0, "this computer")] if slots != 0 else []
    for spec in servers:
        url, kind, n = parse_server(spec)
        try:
            engine = RemoteEngine(RemoteSettings(url, getattr(args, "server_key", ""), kind),  # type: ignore[arg-type]
                                  registry=remembered_voices())
        except ValueError as exc:
            raise UserError(f"--server {spec}: {exc}") from None
        members.append(Member(engine, n or (1 if kind == "s2studio" else SERVER_SLOTS), engine.base_url))
    return FleetEngine(members, FleetConfig())


def confirm_travel(engine: Any, lora_voices: Sequence[str], yes: bool) -> None:
    """Say what cannot travel to which server (per server and voice) and ask on a terminal; `yes` goes on
    without asking; without a terminal to ask on, refuse in one line (UserError) before anything is rendered."""
    notes = engine.cannot_travel(lora_voices) if isinstance(engine, FleetEngine) else []
    if not notes:
        return
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    if yes:
        return
    if not sys.stdin.isatty():
        raise UserError("these engines cannot do all that this computer does (see the warnings above); "
                        "add --yes to render anyway")
    print("Render anyway? [y/N] ", end="", file=sys.stderr, flush=True)
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        raise UserError("render cancelled; nothing was written")


def status_lines(engine: Any) -> list[str]:
    return engine.status() + engine.notices if isinstance(engine, FleetEngine) else []
