"""Shared helpers of the UI tests: the fake engine set up for the window, a test WAV, drops and
modal-dialog drivers."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import soundfile as sf
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QTimer, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QWidget

from s2studio.engine.api import FRAME_SAMPLES
from s2studio.engine.fake import FakeEngine

CHUNK = FRAME_SAMPLES


def fake_engine(frames: int = 12, latency_s: float = 0.02) -> FakeEngine:
    """The studio's FakeEngine made predictable for the UI tests: every line is exactly `frames` frames
    (CHUNK samples each, a sine of 180 Hz × 2^(speaker/5)), streamed one frame per AudioChunk with
    `latency_s` per frame (faster than real time, so the player can follow the render)."""
    return FakeEngine(frame_latency_s=latency_s, min_frames=frames, frames_per_char=0.0, chunk_frames=1)


def write_wav(path: Path, seconds: float = 4.0, hz: float = 220.0, rate: int = 44100) -> Path:
    t = np.arange(int(seconds * rate)) / rate
    sf.write(path, (0.4 * np.sin(2 * np.pi * hz * t)).astype(np.float32), rate, subtype="PCM_16")
    return path


def playback_raw() -> Path:
    """What the file-backed ALSA 'speaker' of tests/conftest.py received (16 kHz s16le mono)."""
    return Path(os.environ["ALSA_CONFIG_PATH"]).parent / "playback_s16le_16k_mono.raw"


def listen(w) -> list[np.ndarray]:
    """The audio the window's player sends to the device from now on, a block a list item (what moved the playhead:
    the samples heard, none for a block of silence while it waits)."""
    played: list[np.ndarray] = []
    callback = w.player._callback

    def heard(outdata, frames, time, status):  # noqa: ANN001 - sounddevice's callback, observed
        before = w.player.position
        callback(outdata, frames, time, status)
        played.append(outdata[:w.player.position - before, 0].copy())

    w.player._callback = heard
    return played


def on_modal(qtbot, kind: type, handler: Callable[[QWidget], None], timeout_ms: int = 5000) -> None:
    """Run `handler(dialog)` once a modal dialog of `kind` is open (dialogs run their own event loop)."""
    deadline = time.monotonic() + timeout_ms / 1000

    def poll() -> None:
        w = QApplication.activeModalWidget()
        if isinstance(w, kind):
            handler(w)
        elif time.monotonic() < deadline:
            QTimer.singleShot(20, poll)

    QTimer.singleShot(20, poll)


def drop_files(w: QWidget, paths: list[Path]) -> None:
    """Drop `paths` onto `w` as a file manager would."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    # Qt routes a drop to the target of the drag-enter before it, so enter first, as a real drag does
    enter = QDragEnterEvent(QPoint(100, 100), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(w, enter)
    assert enter.isAccepted()
    event = QDropEvent(QPointF(100, 100), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(w, event)


def open_studio(qtbot, factory: Callable[[], object], begin_session: bool = True):
    """The real main window on `factory`'s engine, model loaded, settings cleared, no autoplay (the
    end-to-end test covers live playback; elsewhere the fake speaker stays quiet)."""
    from PySide6.QtCore import QSettings

    from s2studio import app

    app.make_application()
    QSettings().clear()  # nothing remembered from another test (window geometry, the last project)
    w = app.build_window("fake", factory=factory)
    w.projects.ask = False
    w.live.enabled = False
    w.check_commands.checks.enabled = False  # no checker process unless a test asks (tests/ui/test_checked_takes.py)
    qtbot.addWidget(w)
    w.show()
    if begin_session:
        w.store.begin_session()
    app.start_engine(w)
    # ready is not the end of the load job: Render stays disabled until its JobFinished clears `model.busy`
    qtbot.waitUntil(lambda: w.model.info is not None and not w.model.busy, timeout=5000)
    return w


def open_real_studio(qtbot, monkeypatch, data_dir: Path, request):
    """The real main window on the real engine (no model loaded yet), user data in `data_dir`, nothing remembered;
    its player and engine thread end with the test."""
    from s2studio import app

    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(data_dir))
    app.make_application()
    w = app.build_window("s2")
    request.addfinalizer(lambda: (w.player.close(), w.ctx.host.shutdown()))
    w.ctx.settings.clear()
    w.projects.ask = False
    w.check_commands.checks.enabled = False
    qtbot.addWidget(w)
    w.show()
    return w


def close_studio(w, clean: bool = True) -> None:
    """Stop playback and the engine thread; `clean=False` leaves the session as a crash would."""
    w.player.close()
    if clean:
        w.close()
    w.ctx.host.shutdown()


def cast_two_voices(w, tmp_path: Path, script: str = "Alice: One [sigh] two.\nBob: Three.") -> None:
    """Voices A and B in the library, `script` in the editor, Alice cast as A and Bob as B."""
    a = w.library.create("A", [(write_wav(tmp_path / "a.wav"), "hello there")])
    b = w.library.create("B", [(write_wav(tmp_path / "b.wav", hz=330), "hi again")])
    w.voices.refresh()
    w.voice_commands.reread()
    w.editor.setPlainText(script)
    w.reparse()
    w.cast_panel.combos["Alice"].setCurrentIndex(w.cast_panel.combos["Alice"].findData(a.id))
    w.cast_panel.combos["Bob"].setCurrentIndex(w.cast_panel.combos["Bob"].findData(b.id))


def project_shown(qtbot, w) -> None:
    """Until the project just opened is shown whole: its text at once, its timeline, lines' states and cast a
    pass of the event loop or a few later (a book's would hold the window)."""
    qtbot.waitUntil(lambda: not w.showing.busy and not w.cast_panel.building() and not w.session._laying.busy,
                    timeout=10000)


def shown_all(w) -> bool:
    """Every part of the project shown: no slices left (the timeline's layout, the lines' states, ...)."""
    from s2studio.ui.control import slices  # noqa: PLC0415

    return not any(work.busy for work in w.findChildren(slices.Slices))
