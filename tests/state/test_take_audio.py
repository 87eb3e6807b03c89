"""Takes in their files: a file-backed take and a timeline of them read exactly the samples the files hold, in
blocks, within the cache's budget; what the audio callback reads is never decoded on its thread; peaks come
from the take's stored peaks, never from its audio."""

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
from s2studio.state.take_audio import BLOCK, PEAK_BIN, BlockCache, peaks_of


@pytest.fixture
def cache(monkeypatch):
    """A fresh cache of 2 MB for the test (the process's one is shared by every test)."""
    fresh = BlockCache(2 << 20)
    monkeypatch.setattr(take_audio, "CACHE", fresh)
    return fresh


def noise(n: int, seed: int) -> np.ndarray:
    return (0.5 * np.random.default_rng(seed).standard_normal(n)).clip(-0.99, 0.99).astype(np.float32)


def saved(tmp_path, lengths: list[int]) -> tuple[Project, list[np.ndarray]]:
    """A project with one take per length, saved and opened again (its takes in their files); and what the
    takes' FLAC files hold, read whole by soundfile."""
    p = Project(line_ids=[f"l{i}" for i in range(len(lengths))])
    for i, n in enumerate(lengths):
        p.add_take(Take(f"t{i:04d}", f"l{i}", "x", noise(n, i), np.zeros((10, 1), np.int64), i))
    ProjectFolder(tmp_path / "p.s2proj").save(capture(p))
    opened = read_project(tmp_path / "p.s2proj").project
    files = [sf.read(opened.lines[f"l{i}"].takes[0].files.audio, dtype="float32")[0] for i in range(len(lengths))]
    return opened, files


def test_a_take_in_its_file_reads_what_the_file_holds(tmp_path, cache):
    project, files = saved(tmp_path, [3 * BLOCK + 1234, 700])
    take = project.lines["l0"].takes[0]
    sound = take.sound
    assert not sound.in_memory and sound.length == len(files[0])
    assert cache.decoded_bytes == 0  # opening decodes nothing
    assert np.array_equal(sound.peaks(), peaks_of(files[0])) and cache.decoded_bytes == 0
    for offset, n in ((0, 10), (BLOCK - 5, 10), (2 * BLOCK + 7, BLOCK + 5000), (3 * BLOCK + 1000, 999)):
        assert np.array_equal(sound.read(offset, n), files[0][offset:offset + n])
    assert np.array_equal(take.audio, files[0])
    assert np.array_equal(take.codes, np.zeros((10, 1)))


def test_the_callbacks_read_never_decodes_and_prefetch_makes_it_ready(tmp_path, cache):
    project, files = saved(tmp_path, [2 * BLOCK + 10])
    sound = project.lines["l0"].takes[0].sound
    out = np.full(1000, 7.0, np.float32)
    assert not sound.ready(BLOCK + 50, 1000)
    assert sound.read_into(out, BLOCK + 50, wait=False) is False
    assert cache.decoded_bytes == 0 and np.all(out == 7.0)  # untouched
    keys = sound.prefetch(BLOCK + 50, 1000)
    assert keys == [(sound.key, 1)] and cache.decoded_bytes == BLOCK * 4
    assert sound.ready(BLOCK + 50, 1000) and sound.read_into(out, BLOCK + 50, wait=False)
    assert np.array_equal(out, files[0][BLOCK + 50:BLOCK + 1050])


def test_the_cache_keeps_its_budget_and_pinned_blocks(tmp_path, cache):
    project, files = saved(tmp_path, [4 * BLOCK] * 3)
    sounds = [project.lines[f"l{i}"].takes[0].sound for i in range(3)]
    cache.pin(sounds[0].prefetch(0, BLOCK))
    for s in sounds:
        for b in range(4):
            s.read(b * BLOCK, BLOCK)
    assert cache.held_bytes <= cache.budget + BLOCK * 4
    assert cache.peek((sounds[0].key, 0)) is not None  # pinned: kept
    assert cache.decoded_bytes == 12 * BLOCK * 4


def test_a_timeline_of_file_backed_takes_reads_like_one_of_arrays(tmp_path, cache):
    lengths = [BLOCK + 300, 500, 2 * BLOCK, 12_000]
    project, files = saved(tmp_path, lengths)
    order = [f"l{i}" for i in range(len(lengths))]
    from_files, in_memory = Timeline(gap_s=0.1), Timeline(gap_s=0.1)
    from_files.set_lines(order, {k: project.current(k).sound for k in order})
    in_memory.set_lines(order, dict(zip(order, files)))
    assert from_files.segments() == in_memory.segments()
    end = from_files.layout.end
    for start, n in ((0, end), (BLOCK - 100, 9000), (end - 50, 400)):
        assert np.array_equal(from_files.layout.read(start, n), in_memory.layout.read(start, n))
    track = from_files.layout.tracks[0]
    assert np.array_equal(track.peaks(), in_memory.layout.tracks[0].peaks())
    empty = np.zeros(100, np.float32)
    assert from_files.layout.read_into(empty, end + 5) == 0


def test_a_long_book_reads_through_in_bounded_memory(tmp_path, cache):
    """Hundreds of long silent takes (17 minutes) opened and read through as export reads them: the work is
    the decoding, the memory is the cache (2 MB here, 1 % of the audio)."""
    silence = np.zeros(5 * 44100, np.float32)  # 5 s each; one take written, linked as 200 (a quick test)
    one = Take("s0000", "l0", "x", silence, np.zeros((10, 1), np.int64), 0)
    (tmp_path / "one").mkdir()
    ProjectFolder(tmp_path / "one").write_takes([one])
    project = Project(line_ids=[f"l{i}" for i in range(200)])
    for i in range(200):
        project.add_take(Take(f"s{i:04d}", f"l{i}", "x", seed=i, sound=one.sound, files=one.files))
    ProjectFolder(tmp_path / "book.s2proj").save(capture(project))
    cache.clear()
    cache.decoded_bytes = 0
    book = read_project(tmp_path / "book.s2proj").project
    assert cache.decoded_bytes == 0
    timeline = Timeline(gap_s=0.4)
    timeline.set_lines(book.line_ids, {k: book.current(k).sound for k in book.line_ids})
    assert all(len(t.peaks()) == -(-len(silence) // PEAK_BIN) for t in timeline.layout.tracks)
    assert cache.decoded_bytes == 0  # drawing needs no audio
    block = np.zeros(10 * 44100, np.float32)
    for start in range(0, timeline.layout.end, len(block)):
        timeline.layout.read_into(block, start)
        assert not block.any()
    audio_bytes = 200 * len(silence) * 4
    assert cache.decoded_bytes == audio_bytes  # every sample decoded once
    assert cache.held_bytes <= cache.budget + BLOCK * 4  # and never more than the budget kept


def test_stored_samples_of_broken_audio_are_silence_at_nan_and_full_scale_at_infinity() -> None:
    import numpy as np

    from s2studio.state.take_audio import pcm24, rounded

    audio = np.array([0.5, np.nan, np.inf, -np.inf, 2.0, -2.0, 1.0, -1.0, 0.25 / (1 << 23), 2.6 / (1 << 23)],
                     np.float32)
    held = rounded(audio)
    pcm = pcm24(held)
    top = (1 << 23) - 1
    assert pcm.tolist() == [v << 8 for v in (1 << 22, 0, top, -(1 << 23), top, -(1 << 23), top, -(1 << 23), 0, 3)]
    np.testing.assert_array_equal(held, (pcm >> 8).astype(np.float32) / np.float32(1 << 23))
