"""Rendering over a farm of servers: the same 12-scene project on one `s2studio serve` (1 thread) against two
(1 thread each), through the render plan (engine/fleet.py), on this computer's cores.

    .venv/bin/python bench/farm_speed.py [--model DIR] [--frames 48] [--lines 2]

Default model: the tiny demo model (written to a temporary folder), so the figure is about the plan and the
wire, not S2's weights. Prints the wall time of each and their ratio (two servers should approach 2x on two
free cores), then the cost of registering voices: the same project once more on one server through the vllm-omni
wire (voice uploaded once per server, then named), as seconds per scene. `--control` first runs the same plan
against two in-process servers whose engine only sleeps (the seam's FakeEngine): the ratio the plan reaches when
the CPU is not what limits it. A script, not a test: figures vary by machine and load; both runs are side by side
in one process.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from s2studio.engine.api import (  # noqa: E402
    JobFinished, LineFinished, LineSpec, LoadRequest, Reference, SynthesisRequest,
)
from s2studio.engine.fleet import FleetEngine  # noqa: E402
from s2studio.engine.fleet_members import Member  # noqa: E402
from s2studio.engine.remote import RemoteEngine, RemoteSettings  # noqa: E402
from s2studio.engine.voice_registry import VoiceRegistry  # noqa: E402
from s2studio.serve.server import free_port  # noqa: E402
from s2studio.settings import Sampling

TEXTS = ["The rain had stopped by morning.", "She opened the window and listened.", "Nobody was in the street.",
         "A dog barked twice, far away."]


def start(model: Path, data: Path) -> tuple[subprocess.Popen, str]:
    """A server on 127.0.0.1 whose data folder (voices uploaded to it) is `data`, not the person's."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "S2STUDIO_DATA_DIR": str(data)}
    proc = subprocess.Popen([sys.executable, "-m", "s2studio", "serve", "--model", str(model), "--device", "cpu",
                             "--precision", "fp32", "--threads", "1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(url + "/v1/s2studio/info", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.5)
    raise SystemExit(f"{url} did not start")


def project(scenes: int, lines: int, frames: int, refs: tuple[Reference, ...] = ()) -> SynthesisRequest:
    specs = tuple(LineSpec(f"s{s}l{i}", 0, TEXTS[(s + i) % len(TEXTS)]) for s in range(scenes) for i in range(lines))
    return SynthesisRequest("farm", specs, refs, Sampling(max_frames=frames, seed_mode="fixed", seed=1),
                            scene_starts=frozenset(f"s{s}l0" for s in range(scenes)), ignore_eos=True)


def render(urls: list[str], request: SynthesisRequest, protocol: str = "s2studio") -> tuple[float, VoiceRegistry]:
    registry = VoiceRegistry()
    fleet = FleetEngine([Member(RemoteEngine(RemoteSettings(u, protocol=protocol), registry=registry), 1, u)
                         for u in urls])
    assert isinstance(list(fleet.load(LoadRequest("load", Path("remote")), threading.Event()))[-1], JobFinished)
    started = time.perf_counter()
    events = list(fleet.generate(request, threading.Event()))
    wall = time.perf_counter() - started
    print("  " + "; ".join(fleet.status()), file=sys.stderr)
    assert isinstance(events[-1], JobFinished), events[-1]
    assert sum(isinstance(e, LineFinished) for e in events) == len(request.lines)
    return wall, registry


def control(args: argparse.Namespace) -> None:
    from s2studio.engine.fake import FakeEngine
    from s2studio.serve.config import ServeConfig
    from s2studio.serve.server import ThreadedServer, start_state
    from s2studio.state.voices import VoiceLibrary

    with tempfile.TemporaryDirectory(prefix="farm-control-") as tmp:
        servers = [ThreadedServer(start_state(ServeConfig(port=free_port()), LoadRequest("load", Path(tmp)),
                                              VoiceLibrary(Path(tmp) / "voices"),
                                              engine_factory=lambda: FakeEngine(frame_latency_s=0.01)))
                   for _ in range(2)]
        for server in servers:
            server.__enter__()
        try:
            request = project(12, args.lines, args.frames)
            one, _ = render([servers[0].url], request)
            two, _ = render([s.url for s in servers], request)
            print(f"control (engines that sleep 10 ms a frame): one server {one:.1f} s, two {two:.1f} s, ratio "
                  f"{one / two:.2f}x")
        finally:
            for server in servers:
                server.__exit__(None, None, None)
                server.state.runner.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path)
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--lines", type=int, default=2, help="lines per scene")
    parser.add_argument("--rounds", type=int, default=2, help="one/two alternated this many times; best of each")
    parser.add_argument("--control", action="store_true", help="also the sleep-bound control (see above)")
    args = parser.parse_args()
    if args.control:
        control(args)
    with tempfile.TemporaryDirectory(prefix="farm-") as tmp:
        model = args.model
        if model is None:
            from s2studio.demo_model import write_demo_model

            model = write_demo_model(Path(tmp) / "tiny", seed=5)
        procs = []
        try:
            for i in range(2):
                procs.append(start(model, Path(tmp) / f"data{i}"))
            urls = [url for _, url in procs]
            request = project(12, args.lines, args.frames)
            render(urls[:1], project(2, 1, 4))  # warm both servers' first request
            render(urls[1:], project(2, 1, 4))
            ones, twos = [], []
            for _ in range(args.rounds):  # alternated, so a change in the machine's load hits both
                ones.append(render(urls[:1], request)[0])
                twos.append(render(urls, request)[0])
            one, two = min(ones), min(twos)
            print(f"12 scenes x {args.lines} lines x {args.frames} frames: one server {one:.1f} s, two servers "
                  f"{two:.1f} s (best of {args.rounds}), ratio {one / two:.2f}x; load average "
                  f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
            clip = Path(tmp) / "voice.wav"
            t = np.arange(44100 * 3) / 44100
            sf.write(clip, (0.2 * np.sin(2 * np.pi * 180 * t)).astype(np.float32), 44100)
            refs = (Reference(0, "A three second voice clip.", np.zeros((10, 1), np.int64), clip),)
            wall, registry = render(urls[:1], project(12, args.lines, args.frames, refs), "vllm")
            print(f"vllm-omni wire, one server: {wall:.1f} s; {registry.registered} voice upload(s) taking "
                  f"{registry.seconds * 1000:.0f} ms in all = {registry.seconds / 12 * 1000:.1f} ms per scene")
        finally:
            for proc, _ in procs:
                proc.kill()


if __name__ == "__main__":
    main()
