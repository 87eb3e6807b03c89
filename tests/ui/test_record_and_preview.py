"""The record dialog on the file-backed ALSA microphone of tests/conftest.py (a 440 Hz tone at 0.3): the input
picker, the meter's level, peak and clip lamp, the take's waveform and trim handed to the new-voice dialog as
"My voice", one clear line without a microphone and no word about the speaker before Record; and a voice's
preview rendered by the (fake) engine once, cached, then played again without a render."""

from __future__ import annotations

import math

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox

from s2studio.ui.voices import record_dialog
from s2studio.ui.voices.level_meter import LevelMeter
from s2studio.ui.voices.new_voice.dialog import NewVoiceDialog
from s2studio.ui.voices.record_dialog import NO_MICROPHONE, RecordDialog, suggested_voice_name
from s2studio.ui.control.preview import SENTENCE, preview_path
from ui_helpers import close_studio, fake_engine, on_modal, open_studio, playback_raw, write_wav


@pytest.fixture
def studio(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    w = open_studio(qtbot, fake_engine, begin_session=False)
    yield w
    close_studio(w)


def test_record_meter_trim_and_use_the_take(qtbot, studio, tmp_path):
    w = studio
    w.library.create("My voice", [(write_wav(tmp_path / "x.wav"), "taken name")])
    seen: dict = {}

    def record(d: RecordDialog) -> None:
        seen["devices"] = [d.device.itemText(i) for i in range(d.device.count())]
        seen["before"] = (d.reason.isVisible(), d.record_button.isEnabled(), d.preview_button.isEnabled())
        qtbot.mouseClick(d.record_button, Qt.MouseButton.LeftButton)
        # (the file-backed microphone may run faster than real time: the take can reach its 30 s at once)
        qtbot.waitUntil(lambda: d.seconds >= 3.0 and d.meter.peak_db > -60, timeout=10000)
        seen["meter"] = (d.meter.level_db, d.meter.peak_db, d.meter.clipped)
        qtbot.mouseClick(d.stop_button, Qt.MouseButton.LeftButton)
        seen["length"] = d.seconds
        seen["recorded"] = d.audio()  # what the meter was shown, block by block
        # trim half a second off the start with the keyboard (10 steps of 50 ms) and 1 s off the end
        d.waveform.setFocus()
        for _ in range(10):
            qtbot.keyClick(d.waveform, Qt.Key.Key_Right)
        for _ in range(20):
            qtbot.keyClick(d.waveform, Qt.Key.Key_Left, Qt.KeyboardModifier.ShiftModifier)
        seen["span"] = d.span
        seen["time"] = d.time_label.text()

        def name_it(n: NewVoiceDialog) -> None:
            seen["name"] = n.name.text()
            seen["card"] = (n.cards[0].draft.name, n.cards[0].draft.span, n.cards[0].transcript.toPlainText())
            qtbot.mouseClick(n.buttons.button(QDialogButtonBox.StandardButton.Ok), Qt.MouseButton.LeftButton)

        on_modal(qtbot, NewVoiceDialog, name_it)
        qtbot.mouseClick(d.buttons.button(QDialogButtonBox.StandardButton.Ok), Qt.MouseButton.LeftButton)

    on_modal(qtbot, RecordDialog, record)
    w.voices.asking.record()
    assert seen["devices"] and any("default" in name for name in seen["devices"])
    assert seen["before"] == (False, True, False)  # nothing said about any device before Record
    level, peak, clipped = seen["meter"]
    # the meter shows the recorded blocks: the tone's peak and RMS (ALSA's rate converter of the file-backed
    # microphone rings up to ~0.37 on some runs, so the recorded samples, not the file, bound it from above)
    recorded = seen["recorded"]
    top = 20 * math.log10(float(np.abs(recorded).max()))
    assert 20 * math.log10(0.3) - 1.0 < peak <= top + 1e-3, (peak, top)
    assert abs(level - 20 * math.log10(float(np.sqrt(np.mean(recorded * recorded))))) < 1.0, level
    assert not clipped
    span = seen["span"]
    assert abs(span.start - 0.5) < 1e-6 and abs(span.end - (seen["length"] - 1.0)) < 1e-3
    assert seen["time"] == f"{seen['length']:.1f} s, keeping {span.length:.1f} s"
    assert seen["name"] == "My voice 2" and seen["card"][0] == "Recording" and seen["card"][1] == span
    assert seen["card"][2].startswith("The quick brown fox")
    voice = w.library.find("My voice 2")
    assert voice is not None and abs(voice.clips[0].duration_s - span.length) < 0.01


def test_the_clip_lamp_lights_on_a_full_scale_sample_and_stays_until_the_next_take(qtbot):
    meter = LevelMeter()
    qtbot.addWidget(meter)
    meter.show_block(0.1, 0.5)
    assert not meter.clipped and abs(meter.peak_db - 20 * math.log10(0.5)) < 1e-9
    meter.show_block(0.7, 1.0)
    meter.show_block(0.01, 0.02)
    assert meter.clipped and meter.peak_db == 0.0  # the peak holds for 1.5 s
    assert "clipping" in meter.accessibleDescription()
    meter.reset()
    assert not meter.clipped and meter.peak_db == -60.0
    d = RecordDialog()
    qtbot.addWidget(d)
    d._callback(np.full((512, 1), 1.0, np.float32), 512, None, None)  # what PortAudio hands the callback
    d._poll()
    assert d.meter.clipped
    d.done(0)


def test_a_take_that_reaches_the_maximum_is_as_long_as_its_seconds_say(qtbot):
    d = RecordDialog()
    qtbot.addWidget(d)
    block = np.full((1024, 1), 0.1, np.float32)
    for _ in range(int(record_dialog.MAX_SECONDS * d.rate) // 1024 + 3):  # past the maximum, in whole blocks
        d._callback(block, 1024, None, None)
    assert d.seconds == record_dialog.MAX_SECONDS
    assert len(d.audio()) == len(d.take().data) == int(record_dialog.MAX_SECONDS * d.rate)
    assert d.take().span.end == d.seconds
    d.done(0)


def test_without_a_microphone_one_line_and_record_stays_off(qtbot, monkeypatch):
    monkeypatch.setattr(record_dialog, "input_devices", lambda sd: [])
    d = RecordDialog()
    qtbot.addWidget(d)
    assert d.reason.text() == NO_MICROPHONE and not d.record_button.isEnabled() and d.device.count() == 0
    assert "-1" not in d.reason.text() and "output" not in d.reason.text()
    d.done(0)
    monkeypatch.setattr(record_dialog, "sounddevice_module", lambda: (None, "Recording is off: PortAudio is not "
                                                                            "installed (test). Install libportaudio2 "
                                                                            "to record."))
    d = RecordDialog()
    qtbot.addWidget(d)
    assert d.reason.text().startswith("Recording is off: PortAudio is not installed")
    assert not d.record_button.isEnabled()
    d.done(0)
    # no speaker: recording works, only Preview is off, and nothing is said until it is needed
    monkeypatch.undo()
    monkeypatch.setattr(record_dialog, "output_problem", lambda sd: "No audio output device: the take cannot be "
                                                                    "played here.")
    d = RecordDialog()
    qtbot.addWidget(d)
    assert d.record_button.isEnabled() and not d.reason.isVisible()
    qtbot.mouseClick(d.record_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: d.seconds >= 1.0, timeout=10000)
    qtbot.mouseClick(d.stop_button, Qt.MouseButton.LeftButton)
    assert not d.preview_button.isEnabled()
    assert d.preview_button.toolTip() == "No audio output device: the take cannot be played here."
    assert d.buttons.button(QDialogButtonBox.StandardButton.Ok).isEnabled()  # the take can still be used
    d.done(0)
    assert suggested_voice_name([]) == "My voice" and suggested_voice_name(["my VOICE", "My voice 2"]) == "My voice 3"


def test_a_voice_preview_renders_once_then_plays_from_the_cache(qtbot, studio, tmp_path):
    w = studio
    voice = w.library.create("Carol", [(write_wav(tmp_path / "c.wav", seconds=3.0), "Words of Carol.")])
    w.voices.refresh()
    w.voices.select(voice.id)
    jobs: list[str] = []
    w.ctx.host.job_started.connect(lambda e: jobs.append(e.job_id))
    messages: list[str] = []
    w.voices.message.connect(messages.append)
    button = w.voices.details.preview_button
    assert button.isVisible() and button.isEnabled()
    playback_raw().unlink(missing_ok=True)
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    path = preview_path(voice, w.model.info)
    qtbot.waitUntil(lambda: path.is_file() and "Playing the preview." in messages, timeout=15000)
    assert messages[0] == "Rendering a preview of “Carol”…"
    assert [j for j in jobs if j.startswith("preview")] == [jobs[-1]] and len(jobs) >= 1
    qtbot.waitUntil(lambda: playback_raw().exists() and np.any(np.fromfile(playback_raw(), "<i2")), timeout=10000)
    # again: no render, the cached file plays (once the render's job has ended: its end may still be on its way)
    qtbot.waitUntil(lambda: not w.preview.busy, timeout=10000)
    started = len(jobs)
    messages.clear()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert messages == ["Playing the preview."] and len(jobs) == started
    # another voice is another preview; the sentence is the fixed one
    assert preview_path(w.library.rename(voice.id, "Caroline"), w.model.info) == path  # the name is not the voice
    other = w.library.add_clip(voice.id, write_wav(tmp_path / "d.wav", seconds=3.0, hz=300), "More words.")
    assert preview_path(other, w.model.info) != path
    assert SENTENCE.startswith("Hello!")
