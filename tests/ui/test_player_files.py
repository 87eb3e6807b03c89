"""The player on takes that live in their files: its audio callback never decodes (a block not decoded yet plays
as silence and the playhead waits), the prefetcher decodes ahead of it, and what the callback hands the device
is exactly the timeline's samples."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from s2studio.audio.timeline import Timeline
from s2studio.state import take_audio
from s2studio.state.project import Project, Take
from s2studio.state.project_files import read_project
from s2studio.state.project_folder import ProjectFolder
from s2studio.state.project_journal import capture
from s2studio.state.take_audio import BLOCK, BlockCache
from s2studio.ui.control.player import Player


@pytest.fixture
def book(tmp_path, monkeypatch):
    """(timeline of three takes in their files, what the files hold end to end, the cache)."""
    cache = BlockCache(4 << 20)
    monkeypatch.setattr(take_audio, "CACHE", cache)
    project = Project(line_ids=["a", "b", "c"])
    rng = np.random.default_rng(3)
    for i, (line, n) in enumerate(zip("abc", (BLOCK + 999, 3000, 2 * BLOCK + 5))):
        audio = (0.3 * rng.standard_normal(n)).clip(-0.9, 0.9).astype(np.float32)
        project.add_take(Take(f"t{i}", line, "x", audio, np.zeros((10, 1), np.int64), i))
    ProjectFolder(tmp_path / "p.s2proj").save(capture(project))
    opened = read_project(tmp_path / "p.s2proj").project
    cache.clear()
    timeline = Timeline(gap_s=0.0)
    timeline.set_lines("abc", {k: opened.current(k).sound for k in "abc"})
    files = np.concatenate([sf.read(opened.current(k).files.audio, dtype="float32")[0] for k in "abc"])
    return timeline, files, cache


def test_the_callback_never_decodes_and_plays_what_the_files_hold(qtbot, book):
    timeline, files, cache = book
    player = Player(timeline)
    player.prefetcher.wake = lambda: None  # the test runs the prefetcher's passes itself
    player.seek(BLOCK - 2000)
    player._applied_seek = player._seek[0]
    block = np.ones((4096, 1), np.float32)
    player._callback(block, len(block), None, None)
    assert not block.any() and player.position == BLOCK - 2000  # not decoded: silence, the playhead waits
    assert cache.decoded_bytes == 0
    played = []
    while player.position < len(files):
        player.prefetcher.step()
        before = cache.decoded_bytes
        player._callback(block, len(block), None, None)
        assert cache.decoded_bytes == before  # the callback decoded nothing
        played.append(block[:, 0].copy())
    heard = np.concatenate(played)[:len(files) - (BLOCK - 2000)]
    assert np.array_equal(heard, files[BLOCK - 2000:])


def test_a_play_through_the_sound_device_decodes_ahead_of_the_playhead(qtbot, book):
    timeline, files, cache = book
    player = Player(timeline)
    if not player.available:
        pytest.skip(player.unavailable_reason)
    with qtbot.waitSignal(player.started_audio, timeout=10000):
        assert player.play()
    qtbot.waitUntil(lambda: not player.playing, timeout=20000)  # the end of the timeline stops it
    assert player.position == len(files)
    assert cache.decoded_bytes == files.nbytes  # every block decoded once, by the prefetcher
    player.close()
