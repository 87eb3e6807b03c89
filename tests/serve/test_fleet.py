"""The render plan over a fleet: three `s2studio serve` processes on 127.0.0.1 plus the local engine render a
6-scene project while one server is killed mid-scene; a server answering 503 + Retry-After is asked again later;
a server sending garbage audio is reported and nothing of it is kept; a server slower than its measured pace is
not waited for."""

from __future__ import annotations

import threading
import time

import httpx
import numpy as np
import pytest
from serve_helpers import live_server
from engine_contract import collect
from serve_process import ServeProcess

from s2studio.engine.api import (
    Backend, JobFailed, JobFinished, LineFinished, LineSpec, LineStarted, LoadRequest, SynthesisRequest,
)
from s2studio.engine.fake import FakeEngine
from s2studio.engine.fleet import FleetEngine
from s2studio.engine.fleet_members import FleetConfig, Member
from s2studio.engine.remote import RemoteEngine, RemoteSettings
from s2studio.engine.voice_registry import VoiceRegistry
from s2studio.settings import Sampling

TEXTS = ["Once upon a time.", "There was a fox.", "It ran far away.", "Then it came back.", "The end of it.",
         "Not quite yet."]


def project(scenes: int, per_scene: int, frames: int = 6) -> SynthesisRequest:
    lines = tuple(LineSpec(f"s{s}l{i}", 0, TEXTS[(s + i) % len(TEXTS)]) for s in range(scenes)
                  for i in range(per_scene))
    starts = frozenset(f"s{s}l0" for s in range(scenes))
    return SynthesisRequest("book", lines, sampling=Sampling(max_frames=frames, seed_mode="fixed", seed=11),
                            scene_starts=starts, ignore_eos=True)


def test_three_servers_and_the_local_engine_render_a_book_while_one_server_dies(tiny_model, tmp_path) -> None:
    from s2studio.engine.s2 import S2Engine

    servers = [ServeProcess(tiny_model, tmp_path / f"data{i}", tmp_path / f"tmp{i}", "--precision", "fp32",
                            "--max-new-tokens", "8") for i in range(3)]  # all three start at once
    urls = [s.url for s in servers]
    try:
        for server in servers:
            server.wait_ready()
        members = [Member(S2Engine(), 1, "this computer")] + [
            Member(RemoteEngine(RemoteSettings(u), registry=VoiceRegistry()), 1, u) for u in urls]
        fleet = FleetEngine(members, FleetConfig(retries=3, first_deadline_s=120))
        load = LoadRequest("load", tiny_model, device="cpu", precision="fp32", threads=1)
        assert isinstance(collect(fleet.load(load, threading.Event()))[-1], JobFinished)
        request = project(6, 3)
        victim, killed, events = urls[1], [], []
        for event in fleet.generate(request, threading.Event()):
            events.append(event)
            if (isinstance(event, LineFinished) and event.backend.url == victim and not killed
                    and not event.line_id.endswith("l2")):
                servers[1].proc.kill()  # mid-scene: the scene's last line is still to come
                killed.append(event.line_id)
        assert isinstance(events[-1], JobFinished), events[-1]
        takes = [e for e in events if isinstance(e, LineFinished)]
        plan = [ln.line_id for ln in request.lines]
        assert sorted(t.line_id for t in takes) == sorted(plan)  # exactly one take per line
        assert len({t.line_id for t in takes}) == len(plan)
        order = {line_id: i for i, line_id in enumerate(plan)}
        assert [t.line_id for t in sorted(takes, key=lambda t: order[t.line_id])] == plan
        by_line = {t.line_id: t for t in takes}
        assert all(t.backend is not None and t.backend.kind in ("local", "s2studio") for t in takes)
        scene = killed[0][: killed[0].index("l")]
        rest = [by_line[f"{scene}l{i}"].backend.url for i in range(3) if f"{scene}l{i}" != killed[0]]
        assert by_line[killed[0]].backend.url == victim
        assert victim not in rest[-1:]  # the scene's unfinished line was rendered elsewhere
        assert {t.backend.kind for t in takes} == {"local", "s2studio"}
        assert any("dropped" in n or victim in n for n in fleet.notices)
        assert all(t.codes.shape[1] > 0 and len(t.audio) > 0 for t in takes)
    finally:
        for server in servers:
            server.stop()


def _busy_once(real: httpx.BaseTransport, calls: list[float]) -> httpx.BaseTransport:
    """In front of a live server: the first render is answered 503 + Retry-After: 1."""

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/s2studio/generate":
            calls.append(time.monotonic())
            if len(calls) == 1:
                return httpx.Response(503, json={"message": "the queue is full"}, headers={"Retry-After": "1"})
        return real.handle_request(request)

    return httpx.MockTransport(handle)


def _noise_server(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/v1/models":
        return httpx.Response(200, json={"data": [{"id": "noise"}]})
    noise = (np.random.default_rng(0).uniform(-1, 1, 8820) * 32767).astype("<i2").tobytes()
    return httpx.Response(200, stream=httpx.ByteStream(noise))


def test_a_busy_server_is_asked_again_later_and_garbage_audio_is_reported_not_kept(library, tmp_path) -> None:
    load = LoadRequest("load", tmp_path)
    calls: list[float] = []
    with live_server(load, library, engine_factory=lambda: FakeEngine(frame_latency_s=0.002),
                     api_key=None) as server:
        busy = RemoteEngine(RemoteSettings(server.url), transport=_busy_once(httpx.HTTPTransport(), calls),
                            registry=VoiceRegistry())
        noisy = RemoteEngine(RemoteSettings("http://noise:9", protocol="openai"),
                             transport=httpx.MockTransport(_noise_server), registry=VoiceRegistry())
        fleet = FleetEngine([Member(busy, 1, "busy"), Member(noisy, 1, "noisy")], FleetConfig(retries=3))
        assert isinstance(collect(fleet.load(load, threading.Event()))[-1], JobFinished)
        request = project(4, 2)
        events = collect(fleet.generate(request, threading.Event()))
    assert isinstance(events[-1], JobFinished), events[-1]
    takes = [e for e in events if isinstance(e, LineFinished)]
    assert sorted(t.line_id for t in takes) == sorted(ln.line_id for ln in request.lines)
    assert {t.backend.kind for t in takes} == {"s2studio"}  # nothing of the noise was kept
    assert any("noisy sent noise, not speech" in n for n in fleet.notices)
    assert len(calls) >= 2 and calls[1] - calls[0] >= 0.9  # asked again after Retry-After, not at once
    assert not any(isinstance(e, JobFailed) for e in events)


def test_a_scene_that_fails_everywhere_fails_with_the_server_and_the_reason(tmp_path) -> None:
    noisy = RemoteEngine(RemoteSettings("http://noise:9", protocol="openai"),
                         transport=httpx.MockTransport(_noise_server), registry=VoiceRegistry())
    fleet = FleetEngine([Member(noisy, 2, "noisy")], FleetConfig(retries=2))
    collect(fleet.load(LoadRequest("load", tmp_path), threading.Event()))
    events = collect(fleet.generate(project(1, 2), threading.Event()))
    assert isinstance(events[-1], JobFailed)
    assert events[-1].error.startswith("scene 1 failed: noisy sent noise, not speech")
    assert not any(isinstance(e, LineFinished) for e in events)


def test_what_cannot_travel_is_said_before_and_lora_scenes_stay_on_this_computer(tmp_path) -> None:
    noisy = RemoteEngine(RemoteSettings("http://noise:9", protocol="openai"),
                         transport=httpx.MockTransport(_noise_server), registry=VoiceRegistry())
    fleet = FleetEngine([Member(noisy, 1, "noisy")])
    collect(fleet.load(LoadRequest("load", tmp_path), threading.Event()))
    request = project(1, 1)
    request = SynthesisRequest("book", (LineSpec("s0l0", 0, "Hi.", tmp_path / "lora.safetensors"),),
                               sampling=request.sampling, scene_starts=request.scene_starts)
    assert fleet.cannot_travel(["Narrator"]) == [
        "noisy does not take seeds (openai): its takes cannot be re-rendered from their seed",
        "voice 'Narrator' carries a LoRA, which no server applies: its scenes cannot render; add this computer to "
        "the engines"]
    last = collect(fleet.generate(request, threading.Event()))[-1]
    assert isinstance(last, JobFailed) and "carries a LoRA, which only this computer can apply" in last.error
    local = FleetEngine([Member(FakeEngine(), 1, "this computer"), Member(noisy, 1, "noisy")])
    collect(local.load(LoadRequest("load", tmp_path), threading.Event()))
    assert local.cannot_travel(["Narrator"])[1] == ("voice 'Narrator' carries a LoRA, which only this computer "
                                                    "applies: its scenes render here, not on the servers")
    takes = [e for e in collect(local.generate(request, threading.Event())) if isinstance(e, LineFinished)]
    assert [t.backend.kind for t in takes] == ["local"]


def test_a_server_that_is_always_busy_ends_in_a_failed_scene_not_a_loop(tmp_path) -> None:
    def always_busy(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "busy"}]})
        return httpx.Response(503, json={"message": "full"}, headers={"Retry-After": "0"})

    busy = RemoteEngine(RemoteSettings("http://busy:9", protocol="openai"),
                        transport=httpx.MockTransport(always_busy), registry=VoiceRegistry())
    fleet = FleetEngine([Member(busy, 1, "busy")], FleetConfig(retries=2))
    collect(fleet.load(LoadRequest("load", tmp_path), threading.Event()))
    last = collect(fleet.generate(project(1, 1), threading.Event()))[-1]
    assert isinstance(last, JobFailed) and "scene 1 failed: busy: the server at http://busy:9 is busy" in last.error


class _Slows:
    """A server (the seam's FakeEngine) that renders its first line, then goes quiet until it is stopped."""

    backend = Backend("s2studio", "http://slow:1", "fake")

    def __init__(self) -> None:
        self.inner, self.finished = FakeEngine(), 0

    def load(self, request, cancel):  # noqa: ANN001, ANN201
        return self.inner.load(request, cancel)

    def generate(self, request, cancel):  # noqa: ANN001, ANN201
        for event in self.inner.generate(request, cancel):
            if isinstance(event, LineStarted) and self.finished:
                cancel.wait(120)
                yield JobFinished(request.job_id, cancelled=True)
                return
            self.finished += isinstance(event, LineFinished)
            yield event


def test_a_server_slower_than_its_measured_pace_is_not_waited_for(tmp_path) -> None:
    slow = _Slows()
    steady = FakeEngine(frame_latency_s=0.05)  # a scene takes it about a second: each member gets one
    fleet = FleetEngine([Member(slow, 1, "slow"), Member(steady, 1, "steady")],
                        FleetConfig(retries=3, first_deadline_s=120, min_deadline_s=0.5))
    collect(fleet.load(LoadRequest("load", tmp_path), threading.Event()))
    request = project(2, 3)
    started = time.monotonic()
    events = collect(fleet.generate(request, threading.Event()))
    took = time.monotonic() - started
    assert isinstance(events[-1], JobFinished) and not events[-1].cancelled, events[-1]
    takes = [e for e in events if isinstance(e, LineFinished)]
    assert sorted(t.line_id for t in takes) == sorted(ln.line_id for ln in request.lines)  # one take each
    assert [t.backend.url for t in takes].count("http://slow:1") == slow.finished == 1
    assert any("slow was slower than its deadline" in n for n in fleet.notices), fleet.notices
    assert took < 60  # its deadline came from its pace (0.5 s here), not the first line's 120 s


class _Records:
    """The seam's FakeEngine, noting what each request asks for; its first request fails after one line."""

    def __init__(self) -> None:
        self.inner, self.asked = FakeEngine(), []

    def load(self, request, cancel):  # noqa: ANN001, ANN201
        return self.inner.load(request, cancel)

    def generate(self, request, cancel):  # noqa: ANN001, ANN201
        self.asked.append(request)
        for event in self.inner.generate(request, cancel):
            yield event
            if isinstance(event, LineFinished) and len(self.asked) == 1:
                yield JobFailed(request.job_id, "the connection broke")
                return


def test_scenes_go_longest_first_and_a_retried_scene_hears_its_kept_lines(tmp_path) -> None:
    texts = {"a": ["Short.", "Tiny."], "b": ["A much longer line than the rest.", "And more."],
             "c": ["A middling line.", "Yes."]}
    lines = tuple(LineSpec(f"{s}{i}", 0, t) for s, pair in texts.items() for i, t in enumerate(pair))
    request = SynthesisRequest("book", lines, sampling=Sampling(max_frames=4, seed_mode="fixed", seed=5),
                               scene_starts=frozenset({"a0", "b0", "c0"}), ignore_eos=True)
    engine = _Records()
    fleet = FleetEngine([Member(engine, 1, "one")], FleetConfig(retries=2))
    collect(fleet.load(LoadRequest("load", tmp_path), threading.Event()))
    events = collect(fleet.generate(request, threading.Event()))
    assert isinstance(events[-1], JobFinished), events[-1]
    asked = [[ln.line_id for ln in r.lines] for r in engine.asked]
    # longest first; b's rest goes back to the front (its line is the earliest missing, playback waits on it)
    assert asked == [["b0", "b1"], ["b1"], ["c0", "c1"], ["a0", "a1"]]
    retry = engine.asked[1]
    first = next(e for e in events if isinstance(e, LineFinished) and e.line_id == "b0")
    assert [t.text for t in retry.context] == ["A much longer line than the rest."]  # the kept line, as context
    np.testing.assert_array_equal(retry.context[0].codes, first.codes)
    assert retry.sampling.seed == engine.asked[0].sampling.seed + 1  # b1's seed, as in one render
    assert sorted(e.line_id for e in events if isinstance(e, LineFinished)) == sorted(ln.line_id for ln in lines)


def test_a_503_over_a_real_socket_pauses_the_server_for_its_retry_after(tmp_path) -> None:
    """An OpenAI-shaped server on 127.0.0.1 whose first answer is 503 + Retry-After: 1, then speech."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    asked: list[float] = []
    speech = (np.sin(np.arange(4410) / 7.0) * 8000).astype("<i2").tobytes()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # noqa: ANN002
            pass

        def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for key, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            self._reply(200, b'{"data": [{"id": "stub"}]}', {"Content-Type": "application/json"})

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            asked.append(time.monotonic())
            if len(asked) == 1:
                return self._reply(503, b'{"error": {"message": "the queue is full"}}',
                                   {"Content-Type": "application/json", "Retry-After": "1"})
            self._reply(200, speech, {"Content-Type": "audio/pcm"})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        remote = RemoteEngine(RemoteSettings(f"http://127.0.0.1:{server.server_address[1]}", protocol="openai"),
                              registry=VoiceRegistry())
        fleet = FleetEngine([Member(remote, 1, "stub")], FleetConfig(retries=2))
        collect(fleet.load(LoadRequest("load", tmp_path), threading.Event()))
        events = collect(fleet.generate(project(1, 2), threading.Event()))
    finally:
        server.shutdown()
    assert isinstance(events[-1], JobFinished), events[-1]
    assert sum(isinstance(e, LineFinished) for e in events) == 2
    assert len(asked) == 3 and asked[1] - asked[0] >= 0.9  # asked again after Retry-After, not at once
