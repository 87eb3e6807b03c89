"""One gap between lines: the gap set in the export dialog is the project's, the player's timeline is
laid out with it, and the exported file places every line (audio and subtitle cues) exactly where the
player does."""

from __future__ import annotations

import re

import numpy as np
import soundfile as sf
from PySide6.QtCore import Qt

from s2studio.engine.api import SAMPLE_RATE
from s2studio.engine.fake import FakeEngine
from s2studio.state.project_files import load_project
from s2studio.ui.dialogs.export_dialog import ExportDialog
from ui_helpers import cast_two_voices, close_studio, on_modal, open_studio, project_shown


def _cue_starts_ms(srt: str) -> list[int]:
    times = re.findall(r"^(\d\d):(\d\d):(\d\d),(\d\d\d) -->", srt, flags=re.M)
    return [((int(h) * 60 + int(m)) * 60 + int(s)) * 1000 + int(ms) for h, m, s, ms in times]


def test_export_and_playback_use_the_same_gap(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, lambda: FakeEngine(frame_latency_s=0.001), begin_session=False)
    try:
        cast_two_voices(w, tmp_path, "Alice: One two three.\nBob: Four five.\nAlice: Six seven eight nine.")
        w.actions_by_name["render_all"].trigger()
        qtbot.waitUntil(lambda: len(w.document.project.lines) == 3 and not w.session.busy, timeout=15000)
        lengths = [len(w.document.project.current(ln.line_id).audio) for ln in w.document.script.lines]
        assert [s.start for s in w.timeline.segments()] == [0, lengths[0] + 17640, sum(lengths[:2]) + 2 * 17640]

        out = tmp_path / "out" / "scene.wav"

        def do_export(d: ExportDialog) -> None:
            qtbot.waitUntil(lambda: d.ready, timeout=5000)  # the lines are counted off the GUI thread
            assert d.options.gap.value() == 0.4
            d.options.gap.lineEdit().selectAll()
            qtbot.keyClicks(d.options.gap.lineEdit(), "1.23")
            d.options.out.setText(str(out))
            d.options.vtt.setChecked(True)
            qtbot.mouseClick(d.export_button, Qt.MouseButton.LeftButton)
            qtbot.waitUntil(lambda: d.result is not None or d.status.text().startswith("✗"), timeout=10000)
            d.accept()

        on_modal(qtbot, ExportDialog, do_export)
        w.actions_by_name["export"].trigger()
        gap = round(1.23 * SAMPLE_RATE)
        assert w.document.project.gap_s == 1.23 and w.timeline.gap == gap
        starts = [s.start for s in w.timeline.segments()]
        assert starts == [0, lengths[0] + gap, sum(lengths[:2]) + 2 * gap]
        audio, rate = sf.read(out, dtype="float32")
        assert rate == SAMPLE_RATE and len(audio) == w.timeline.layout.end == sum(lengths) + 2 * gap
        assert np.allclose(audio, w.timeline.mix(), atol=1.01 / 32767)  # the file is what the player plays
        srt = out.with_suffix(".srt").read_text(encoding="utf-8")
        assert _cue_starts_ms(srt) == [round(s * 1000 / SAMPLE_RATE) for s in starts]
        vtt = out.with_suffix(".vtt").read_text(encoding="utf-8")
        assert len(re.findall(r"-->", vtt)) == 3
        # the gap is part of the project: saved, and back after reopening
        saved = tmp_path / "scene.s2proj"
        w.projects.save_as(saved)
        assert load_project(saved).gap_s == 1.23
        w.projects.new()
        project_shown(qtbot, w)
        assert w.timeline.gap == 17640
        w.projects.open(saved)
        project_shown(qtbot, w)
        assert [s.start for s in w.timeline.segments()] == starts
    finally:
        close_studio(w)
