"""Every clip of a voice plays from the voice details: clicking a clip row and pressing Space, Enter,
the play button or the menu shortcut sends exactly that clip's samples to the sound device (the
file-backed ALSA 'speaker' of tests/conftest.py, which records at 16 kHz, the rate of these clips)."""

from __future__ import annotations

import numpy as np
import soundfile as sf
from PySide6.QtCore import Qt

from s2studio import app
from s2studio.ui.voices.voice_details import VoiceDetails
from ui_helpers import fake_engine, playback_raw, write_wav

RATE = 16000  # the test device's rate: no resampling between the clip file and the recorded bytes


def played() -> np.ndarray:
    """The samples of the latest output stream (the device rewrites its file for each stream)."""
    raw = playback_raw()
    return np.fromfile(raw, dtype="<i2") if raw.exists() else np.zeros(0, "<i2")


def test_each_clip_plays(qtbot, tmp_path):
    app.make_application()
    w = app.build_window("fake", factory=lambda: fake_engine())
    w.ctx.settings.clear()
    w.projects.ask = False
    qtbot.addWidget(w)
    w.show()
    try:
        wavs = [write_wav(tmp_path / f"c{i}.wav", seconds=0.3 + 0.1 * i, hz=300 + 200 * i, rate=RATE)
                for i in range(3)]
        voice = w.library.create("Carol", [(p, f"Words of clip {i + 1}.") for i, p in enumerate(wavs)])
        w.voices.refresh()
        w.voices.select(voice.id)
        details: VoiceDetails = w.voices.details
        rows = [details.clips.item(i).text() for i in range(details.clips.count())]
        assert rows == [f"Clip {i + 1} · {0.3 + 0.1 * i:.1f} s\n“Words of clip {i + 1}.”\n"
                        f"⚠ clip is {0.3 + 0.1 * i:.1f} s long; use 3–30 s (10–30 s clones best)\n"
                        "⚠ sample rate is 16000 Hz; use 22.05 kHz or more (S2 works at 44.1 kHz)" for i in range(3)]
        files = [sf.read(w.library.clip_path(voice, c), dtype="int16")[0] for c in voice.clips]
        assert [len(f) for f in files] == [4800, 6400, 8000]

        def expect_played(n: int) -> None:
            """Clip n (0-based), and nothing else, reached the speaker."""
            want = files[n]
            lead = int(np.flatnonzero(want)[0])  # a sine starts at 0: align on the first sound

            def arrived() -> bool:
                got = played()
                return np.any(got) and len(got) >= int(np.flatnonzero(got)[0]) - lead + len(want)

            qtbot.waitUntil(arrived, timeout=10000)
            got = played()
            first = int(np.flatnonzero(got)[0]) - lead
            assert np.abs(got[first:first + len(want)].astype(np.int32) - want).max() <= 1
            assert not np.any(got[:first]) and not np.any(got[first + len(want):])

        # click clip 2, press Space
        clips = details.clips
        rect = clips.visualItemRect(clips.item(1))
        qtbot.mouseClick(clips.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
        assert clips.currentRow() == 1
        playback_raw().unlink(missing_ok=True)  # whatever the device writes now is this clip
        qtbot.keyClick(clips, Qt.Key.Key_Space)
        expect_played(1)

        # Enter on clip 3
        qtbot.keyClick(clips, Qt.Key.Key_Down)
        assert clips.currentRow() == 2
        playback_raw().unlink(missing_ok=True)  # whatever the device writes now is this clip
        qtbot.keyClick(clips, Qt.Key.Key_Return)
        expect_played(2)

        # clip 1 with the play button under the list, then clip 2 with the Voices menu's shortcut
        qtbot.mouseClick(clips.viewport(), Qt.MouseButton.LeftButton,
                         pos=clips.visualItemRect(clips.item(0)).center())
        assert details.play_button.accessibleName() == "Play the selected clip"
        playback_raw().unlink(missing_ok=True)
        qtbot.mouseClick(details.play_button, Qt.MouseButton.LeftButton)
        expect_played(0)
        qtbot.keyClick(clips, Qt.Key.Key_Down)
        action = w.actions_by_name["play_voice_clip"]
        assert (action.shortcut().toString(), action.data()) == ("Ctrl+Shift+P", "Play Voice Clip")
        playback_raw().unlink(missing_ok=True)
        w.activateWindow()
        qtbot.waitUntil(w.isActiveWindow, timeout=3000)
        qtbot.keyClick(w, Qt.Key.Key_P, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
        expect_played(1)

        # a voice with one clip, selected in the list, shows that clip alone, ready to play
        other = w.library.create("Dan", [(wavs[2], "Only clip.")])
        w.voices.refresh()
        w.voices.select(other.id)
        assert [details.clips.item(i).data(Qt.ItemDataRole.UserRole) for i in range(clips.count())] == ["c1"]
        assert details.header.text() == "<b>Dan</b>" and details.play_button.isEnabled()
    finally:
        w.player.close()
        w.close()
        w.ctx.host.shutdown()
