"""The studio renders on a server: Settings ▸ Render on ▸ a server, then a two-speaker script rendered through
the remote engine against a live local `s2studio serve` (the tiny demo model), heard while the server still
generates; and "Test connection" reporting the server's model."""

from __future__ import annotations

from pathlib import Path

import pytest

from ui_helpers import open_real_studio, write_wav

KEY = "studio-test-key-123"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from s2studio.demo_model import write_demo_model
    from s2studio.engine.api import LoadRequest
    from s2studio.serve.config import Limits, ServeConfig
    from s2studio.serve.server import ThreadedServer, free_port, start_state
    from s2studio.state.voices import VoiceLibrary

    model = write_demo_model(tmp_path_factory.mktemp("server-model") / "tiny", seed=2)
    config = ServeConfig(port=free_port(), api_key=KEY, limits=Limits(max_new_tokens=40))
    state = start_state(config, LoadRequest("load", model, device="cpu", precision="fp32", threads=1),
                        VoiceLibrary(tmp_path_factory.mktemp("server-voices")))
    with ThreadedServer(state) as live:
        yield live
    state.runner.stop()


def test_the_studio_renders_two_speakers_on_a_server_and_plays_while_it_generates(
        qtbot, tmp_path: Path, monkeypatch, server, request) -> None:
    w = open_real_studio(qtbot, monkeypatch, tmp_path / "data", request)
    box = w.inspector.render_on
    box.where.setCurrentIndex(box.where.findData("server"))
    box.url.setText(server.url)
    box.key.setText("wrong-key-0000")
    box.test_connection()
    qtbot.waitUntil(lambda: box.result.text().startswith("Not connected"), timeout=30000)
    assert "refused the API key" in box.result.text()
    box.key.setText(KEY)
    box.test_connection()
    qtbot.waitUntil(lambda: box.result.text().startswith("Connected"), timeout=30000)
    assert f"tiny on 127.0.0.1:{server.state.config.port}" in box.result.text() and "ms round trip" in box.result.text()
    box.use_button.click()
    qtbot.waitUntil(lambda: w.model.info is not None and not w.model.busy, timeout=60000)
    assert w.model.info.codec_fingerprint == server.state.info.codec_fingerprint
    assert w.ctx.settings.value("render/on") == "server" and w.ctx.settings.value("render/url") == server.url

    a = w.library.create("A", [(write_wav(tmp_path / "a.wav", seconds=2.0), "hello there")])
    b = w.library.create("B", [(write_wav(tmp_path / "b.wav", seconds=2.0, hz=330), "hi again")])
    w.voices.refresh()
    w.voice_commands.reread()
    w.inspector.settings_panel.max_seconds.setValue(1.8)  # 39 frames, within the server's 40
    w.inspector.settings_panel.seed_mode.setCurrentIndex(1)
    w.editor.setPlainText("Alice: Good [whispering] morning to you.\nBob: [laughing] Hello, hello!")
    w.reparse()
    w.cast_panel.combos["Alice"].setCurrentIndex(w.cast_panel.combos["Alice"].findData(a.id))
    w.cast_panel.combos["Bob"].setCurrentIndex(w.cast_panel.combos["Bob"].findData(b.id))
    runner = server.state.runner
    heard: list[tuple[str, ...]] = []
    w.player.started_audio.connect(lambda: heard.append(runner.stats().running))
    order: list[str] = []
    w.session.finished.connect(lambda cancelled: order.append("finished"))
    failures: list[str] = []
    w.session.failed.connect(failures.append)
    before = len(runner.stats().outcomes)
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: "finished" in order or bool(failures), timeout=300000)
    assert failures == []
    assert all(len(w.document.project.current(ln.line_id).audio) > 0 for ln in w.document.script.lines)
    takes = [w.document.project.current(ln.line_id) for ln in w.document.script.lines]
    assert all(t.codes.shape[0] == 10 and t.codes.shape[1] > 0 for t in takes)  # the server's codes came along
    jobs = [job for job, outcome in runner.stats().outcomes[before:] if outcome == "finished"]
    assert len(jobs) >= 2  # the encoding of the voices and the render ran on the server
    assert heard and jobs[-1] in heard[0], (heard, jobs)  # heard while the server was generating that render
    w.close()
