"""The studio's log answers "what happened" (Help ▸ Open Log Folder): the start line with version, platform and
devices, renders started, finished, cancelled and failed, saves, opens, restores, exports, fine-tuning runs and a
server's lost connection, with the engine thread named "engine"."""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path

import numpy as np
import pytest

from s2studio import __version__
from s2studio.audio.export import ExportSettings, RenderedLine, export
from s2studio.engine.fake import FakeEngine
from ui_helpers import cast_two_voices, close_studio, open_studio


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


class LoggingFake(FakeEngine):
    def devices(self):  # noqa: ANN201 - the engine answers the devices question on the engine thread
        logging.getLogger("s2studio.tests").info("devices asked on %s", threading.current_thread().name)
        return super().devices()


def said(caplog, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if text in r.getMessage()]


def test_the_log_says_what_happened(qtbot, data_dir, tmp_path, caplog, monkeypatch):
    caplog.set_level(logging.INFO)
    w = open_studio(qtbot, lambda: LoggingFake(frame_latency_s=0.002, min_frames=8, frames_per_char=0.0))
    qtbot.waitUntil(lambda: bool(said(caplog, "devices: ")), timeout=5000)
    start = said(caplog, f"S2 Studio {__version__} starting: ")
    assert start and "Python" in start[0].getMessage() and "Qt" in start[0].getMessage()
    assert said(caplog, "devices: cpu")[0].getMessage().startswith("devices: cpu; cuda: ")
    asked = said(caplog, "devices asked on ")
    assert asked[0].getMessage() == "devices asked on engine" and asked[0].threadName == "engine"

    cast_two_voices(w, tmp_path)
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: not w.flow.busy and len(w.document.project.lines) == 2, timeout=10000)
    assert said(caplog, "render started: 2 lines")
    assert said(caplog, "render finished: 2 of 2 lines in ")
    assert not said(caplog, "One [sigh] two")  # the script's words never go to the log

    w.projects.save_as(tmp_path / "scene.s2proj")
    assert said(caplog, f"saved the project {tmp_path / 'scene.s2proj'} (2 lines, 2 takes)")
    w.projects.new()
    w.projects.open(tmp_path / "scene.s2proj")
    assert said(caplog, f"opened the project {tmp_path / 'scene.s2proj'} (2 lines, 2 takes)")
    w.editor.setPlainText(w.editor.toPlainText() + "\nAlice: Three.")
    w.reparse()
    assert w.projects.restore_autosave()
    restored = said(caplog, "restored the autosave of ")
    assert restored and re.search(r"\(\d+ lines, \d+ to render\)$", restored[0].getMessage())

    w.editor.setPlainText("Alice: One [sigh] two.\nBob: Three.\nAlice: Four.")
    w.reparse()
    monkeypatch.setattr("s2studio.ui.window.render_commands.QMessageBox.warning", lambda *_args: None)  # no modal box
    engine_fails = w.ctx.host.worker.scheduler.engine  # made on the engine thread long ago
    engine_fails.fail_on_line = w.document.script.lines[2].line_id
    w.actions_by_name["render_stale"].trigger()
    qtbot.waitUntil(lambda: not w.flow.busy, timeout=10000)
    failed = said(caplog, "render failed after 0 of 1 lines in ")
    assert failed and failed[0].levelno == logging.WARNING
    engine_fails.fail_on_line, engine_fails.frame_latency_s = None, 0.05
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: w.session.busy, timeout=5000)
    w.flow.cancel()
    qtbot.waitUntil(lambda: not w.flow.busy, timeout=10000)
    assert said(caplog, "render cancelled: ")
    close_studio(w)


def test_exports_and_lost_server_connections_are_logged(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    line = RenderedLine("l1", "Alice", "Hello.", np.zeros(4410, np.float32))
    export([line], ExportSettings(), out=tmp_path / "out" / "scene.wav")
    assert said(caplog, f"exported 1 file: {tmp_path / 'out' / 'scene.wav'}")

    from s2studio.engine.api import JobFailed, LoadRequest
    from s2studio.engine.remote import RemoteEngine, RemoteSettings

    engine = RemoteEngine(RemoteSettings("http://127.0.0.1:9"))
    events = list(engine.load(LoadRequest("load-1", Path("remote")), threading.Event()))
    engine.close()
    assert isinstance(events[-1], JobFailed)
    lost = said(caplog, "server job load-1: ")
    assert lost and lost[0].levelno == logging.WARNING and "127.0.0.1:9" in lost[0].getMessage()


def test_fine_tuning_runs_are_logged(qtbot, tmp_path, caplog, monkeypatch):
    from s2studio.state.voices import VoiceLibrary
    from s2studio.ui.control.child import ChildJob
    from s2studio.ui.control.finetune import FineTuneRun
    from ui_helpers import write_wav

    caplog.set_level(logging.INFO)
    library = VoiceLibrary(tmp_path / "voices")
    voice = library.create("Alice", [(write_wav(tmp_path / "a.wav", seconds=3.0), "Hello there, I am Alice.")])

    def quick_train(job):  # noqa: ANN001, ANN202 - the training process's last line, without a model
        yield {"event": {"kind": "finished", "path": str(Path(job.request["out_dir"]) / "lora.safetensors")}}

    monkeypatch.setattr(ChildJob, "rows", quick_train)
    runner = FineTuneRun(library)
    ended: list[tuple[str, str]] = []
    runner.ended.connect(lambda path, error: ended.append((path, error)))
    runner.start(voice.id, tmp_path / "model", tmp_path / "run", {"steps": 3})
    qtbot.waitUntil(lambda: bool(ended), timeout=10000)
    assert said(caplog, "fine-tuning “Alice” started: steps=3 on auto")
    assert said(caplog, f"fine-tuning “Alice” finished: {tmp_path / 'run' / 'lora.safetensors'} after ")
