"""Killing the studio during a render and starting it again offers the autosaved project, with nothing
lost: the real app runs as a subprocess (`python -m s2studio`, fake engine made slow), opens a project
and renders it (the S2STUDIO_OPEN / S2STUDIO_AUTORENDER start hooks of `s2studio.app`), and is
SIGKILLed once its autosave holds a finished take; a new window on the same folders restores it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from s2studio import app
from s2studio.engine.fake import FakeEngine
from s2studio.state.project import GenerationSettings, Project
from s2studio.errors import UserError
from s2studio.state.project_document import read_document
from s2studio.state.project_files import save_project
from s2studio.state.voices import VoiceLibrary
from ui_helpers import on_modal, project_shown, write_wav

SCRIPT = ("# Kitchen\n"
          "Alice: The kettle has been whistling for a while now, somebody should go.\n"
          "Bob: I thought you were making the tea this morning, not me.\n"
          "Alice: Fine, but you are washing every single cup afterwards.\n"
          "Bob: Deal, as long as there are biscuits left in the tin.\n")


def _autosaved_takes(autosave: Path) -> dict[str, list[str]]:
    """line id -> take ids in the autosave on disk, journal applied (empty while there is none); read without
    touching the folder the running app writes."""
    try:
        doc = read_document(autosave).values
    except UserError:
        return {}
    return {k: [t["take_id"] for t in v["takes"]] for k, v in doc["lines"].items() if v["takes"]}


def test_killed_during_a_render_restores_everything(qtbot, tmp_path, monkeypatch):
    data = tmp_path / "data"
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(data))
    lib = VoiceLibrary(data / "voices")
    alice = lib.create("Alice voice", [(write_wav(tmp_path / "a.wav"), "Hello, this is Alice.")])
    bob = lib.create("Bob voice", [(write_wav(tmp_path / "b.wav", hz=330), "Hello, this is Bob.")])
    cast = {"Alice": alice.id, "Bob": bob.id}
    saved = save_project(Project(script=SCRIPT, cast=cast, settings=GenerationSettings(seed_mode="fixed")),
                         tmp_path / "kitchen.s2proj")

    env = dict(os.environ, S2STUDIO_DATA_DIR=str(data), S2STUDIO_ENGINE="fake", S2STUDIO_FAKE_LATENCY="0.15",
               S2STUDIO_OPEN=str(saved), S2STUDIO_AUTORENDER="1", QT_QPA_PLATFORM="offscreen")
    autosave = data / "autosave" / "current.s2proj"
    stderr = tmp_path / "stderr.txt"  # a file, not a pipe: a full pipe would block the app
    with stderr.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "s2studio"], env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 90
        while not _autosaved_takes(autosave) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, stderr.read_text(errors="replace")[-2000:]
        assert _autosaved_takes(autosave), "no take was autosaved"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    on_disk = _autosaved_takes(autosave)
    assert 1 <= len(on_disk) < 4  # killed mid-render: some lines done, not all
    assert (data / "autosave" / "session.lock").is_file()

    app.make_application()
    w = app.build_window("fake", factory=lambda: FakeEngine())
    w.projects.ask = False
    qtbot.addWidget(w)
    try:
        w.show()
        on_modal(qtbot, QMessageBox, lambda box: qtbot.mouseClick(
            box.button(QMessageBox.StandardButton.Yes), Qt.MouseButton.LeftButton))
        assert w.projects.offer_restore()
        project_shown(qtbot, w)
        assert w.editor.toPlainText() == SCRIPT
        assert w.document.project.cast == cast
        assert w.document.project.settings.seed_mode == "fixed"
        assert {k: [t.take_id for t in v.takes] for k, v in w.document.project.lines.items()} == on_disk
        for entry in w.document.project.lines.values():
            take = entry.current
            assert len(take.audio) > 0 and len(take.audio) == take.codes.shape[1] * 2048
            assert np.abs(take.audio).max() > 0.05
        assert w.store.path == saved  # saving goes back to the project the user had open
        rendered = [ln for ln in w.document.script.lines if ln.line_id in on_disk]
        assert [ln.line_id for ln in w.document.script.lines if ln not in rendered] == \
               [ln.line_id for ln in w.document.stale_lines()]
        assert w.timeline.layout.bounds(rendered[0].line_id)[0] == 0
    finally:
        w.player.close()
        w.close()
        w.ctx.host.shutdown()
