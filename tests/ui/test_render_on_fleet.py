"""Settings ▸ Render on ▸ "This computer and servers": two live `s2studio serve` servers (the seam's FakeEngine
behind real HTTP) added to the engines list by real clicks, remembered, a two-scene script rendered over them,
each take saying which server made it in the takes list, and the live line per engine (in the Render-on box, and
in the status bar while the render runs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import numpy as np
from PySide6.QtCore import QTimer
from safetensors.numpy import save

from ui_helpers import cast_two_voices, open_real_studio


@pytest.fixture
def servers(tmp_path):
    from s2studio.engine.api import LoadRequest
    from s2studio.engine.fake import FakeEngine
    from s2studio.serve.config import ServeConfig
    from s2studio.serve.server import ThreadedServer, free_port, start_state
    from s2studio.state.voices import VoiceLibrary

    live = []
    for i in range(2):
        state = start_state(ServeConfig(port=free_port(), model_id=f"box{i}-s2"), LoadRequest("load", tmp_path),
                            VoiceLibrary(tmp_path / f"voices{i}"),
                            engine_factory=lambda: FakeEngine(frame_latency_s=0.1))  # slow enough to be seen live
        live.append(ThreadedServer(state).__enter__())
    yield live
    for server in live:
        server.__exit__(None, None, None)
        server.state.runner.stop()


def test_the_studio_renders_scenes_over_a_list_of_engines(qtbot, tmp_path: Path, monkeypatch, servers,
                                                          request) -> None:
    w = open_real_studio(qtbot, monkeypatch, tmp_path / "data", request)
    request.addfinalizer(w.ctx.settings.clear)  # the kind and the list are remembered: not for the next test
    box = w.inspector.render_on
    box.where.setCurrentIndex(box.where.findData("fleet"))
    assert box.use_button.text() == "Use these engines"
    box.use_button.click()
    assert "Add a server" in box.result.text()
    for server in servers:
        box.url.setText(server.url)
        box.kind.setCurrentIndex(box.kind.findData("s2studio"))
        box.slots.setValue(1)
        box.add_button.click()
    assert [box.engines.item(i).text() for i in range(2)] == [f"{s.url} (s2studio, 1 in flight)" for s in servers]
    box.test_connection()
    qtbot.waitUntil(lambda: box.result.text().startswith("Connected"), timeout=30000)
    box.use_button.click()
    qtbot.waitUntil(lambda: w.model.info is not None and not w.model.busy, timeout=60000)
    assert '"url"' in w.ctx.settings.value("render/fleet")  # remembered for the next start

    cast_two_voices(w, tmp_path, "# One\nAlice: One [sigh] two.\nBob: Three.\n# Two\nAlice: Four.\nBob: Five.")
    done: list[bool] = []
    w.session.finished.connect(done.append)
    failures: list[str] = []
    w.session.failed.connect(failures.append)
    in_the_bar: list[str] = []  # each text the status bar's line per engine shows while the render runs
    shown = w.status.engines.setText
    monkeypatch.setattr(w.status.engines, "setText", lambda text: (in_the_bar.append(text) if text else None,
                                                                   shown(text)))
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: bool(done) or bool(failures), timeout=120000)
    assert failures == []
    assert in_the_bar
    live = [re.search(re.escape(server.url) + r": (\d+) lines · (\d+\.\d) frames/s · 0 failures", text)
            for server in servers for text in in_the_bar]  # each server's lines done, frames/s and failures, live
    assert all(live), in_the_bar
    assert any(int(m.group(1)) >= 1 and float(m.group(2)) > 0 for m in live), in_the_bar
    assert all("this computer: 0 lines · 0.0 frames/s · 0 failures" in text for text in in_the_bar)
    assert not w.status.engines.isVisible()  # the render ended
    takes = [w.document.project.current(ln.line_id) for ln in w.document.script.lines]
    assert all(t is not None and len(t.audio) > 0 for t in takes)
    made_by = {t.settings["backend"] for t in takes}
    assert made_by <= {f"{s.state.info.name} on {s.url.split('//')[1]} (s2studio)" for s in servers}, made_by
    def served() -> list[int]:
        return [int(line.split(": ")[1].split(" lines")[0]) for line in box.engines_status.text().splitlines()
                if line.startswith(tuple(s.url + ":" for s in servers))]

    qtbot.waitUntil(lambda: sum(served()) == 4, timeout=5000)  # the live line of each server
    assert "this computer: 0 lines" in box.engines_status.text()  # no model here: the servers did it all
    w.lines.select(w.document.script.lines[0].line_id)  # the takes list of the line says which server made its take
    qtbot.waitUntil(lambda: w.inspector.takes.list.count() == 1, timeout=3000)
    assert f"    {takes[0].settings['backend']}    " in w.inspector.takes.list.item(0).text()
    w.close()


def test_before_rendering_on_a_server_that_ignores_seeds_the_studio_asks(qtbot, tmp_path: Path, monkeypatch,
                                                                         servers, request) -> None:
    from PySide6.QtWidgets import QApplication, QMessageBox

    w = open_real_studio(qtbot, monkeypatch, tmp_path / "data", request)
    request.addfinalizer(w.ctx.settings.clear)  # the kind and the list are remembered: not for the next test
    box = w.inspector.render_on
    box.where.setCurrentIndex(box.where.findData("fleet"))
    box.url.setText(servers[0].url)
    box.kind.setCurrentIndex(box.kind.findData("vllm"))
    box.add_button.click()
    box.use_button.click()
    qtbot.waitUntil(lambda: w.model.info is not None and not w.model.busy, timeout=60000)
    cast_two_voices(w, tmp_path, "# One\nAlice: One two.\nBob: Three.")
    asked: list[str] = []

    def answer(button: QMessageBox.StandardButton) -> None:
        dialog = QApplication.activeModalWidget()
        assert isinstance(dialog, QMessageBox) and dialog.objectName() == "travel_question"
        asked.append(dialog.text())
        dialog.button(button).click()

    alice = w.document.voice_of("Alice")
    lora = tmp_path / "lora.safetensors"
    lora.write_bytes(save({"embeddings.lora_A": np.ones((2, 4), np.float32),
                           "embeddings.lora_B": np.ones((4, 2), np.float32)}))
    w.library.set_lora(alice.id, lora, "test")
    w.voice_commands.reread()
    QTimer.singleShot(200, lambda: answer(QMessageBox.StandardButton.Cancel))
    w.actions_by_name["render_all"].trigger()
    assert len(asked) == 1 and "does not take seeds (vllm)" in asked[0]  # per server, and per voice:
    assert f"voice {alice.name!r} carries a LoRA, which no server applies: its scenes cannot render" in asked[0]
    assert w.document.project.current(w.document.script.lines[0].line_id) is None  # cancelled: nothing rendered
    w.library.remove_lora(alice.id)
    w.voice_commands.reread()
    done: list[bool] = []
    w.session.finished.connect(done.append)
    QTimer.singleShot(200, lambda: answer(QMessageBox.StandardButton.Yes))
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: bool(done), timeout=120000)
    takes = [w.document.project.current(ln.line_id) for ln in w.document.script.lines]
    where = servers[0].url.split("//")[1]  # the model the server reports, where, the wire, and that seeds are lost
    assert [t.settings["backend"] for t in takes] == [f"box0-s2 on {where} (vllm, seed not reproducible)"] * 2
    w.lines.select(w.document.script.lines[1].line_id)
    qtbot.waitUntil(lambda: w.inspector.takes.list.count() == 1, timeout=3000)
    assert f"seed {takes[1].seed}    box0-s2 on {where} (vllm, seed not reproducible)" in w.inspector.takes.list.item(0).text()
    assert len(asked) == 2 and "LoRA" not in asked[1]
    assert len(servers[0].state.uploads.list()) == 2  # each voice uploaded once
    w.close()
