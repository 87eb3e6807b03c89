"""Timeline: lines placed with gaps, a line streaming in at the end, take swaps that move only what
follows, snapshots a reader can hold while the writer goes on."""

from __future__ import annotations

import numpy as np
import pytest

from s2studio.audio.timeline import Segment, Timeline


def const(n: int, value: float) -> np.ndarray:
    return np.full(n, value, np.float32)


def test_lines_are_placed_with_gaps_and_lines_without_audio_take_no_room() -> None:
    tl = Timeline(gap_s=0.5, sample_rate=100)
    assert tl.gap == 50
    tl.set_lines(["a", "b", "c", "d"], {"a": const(30, 0.25), "c": const(10, 0.5), "d": const(5, 0.75)})
    assert tl.segments() == [Segment("a", 0, 30, True), Segment("c", 80, 10, True), Segment("d", 140, 5, True)]
    assert tl.layout.end == 145
    mix = tl.mix()
    assert len(mix) == 145
    np.testing.assert_array_equal(mix[:30], 0.25)
    np.testing.assert_array_equal(mix[30:80], 0.0)
    np.testing.assert_array_equal(mix[80:90], 0.5)
    np.testing.assert_array_equal(mix[140:], 0.75)
    assert tl.layout.bounds("b") is None and tl.layout.bounds("c") == (80, 90)
    assert [tl.layout.line_at(s) for s in (0, 29, 30, 79, 80, 139, 144, 145)] == [
        "a", "a", "a", "a", "c", "c", "d", None]


def test_a_line_streams_in_at_the_end_only() -> None:
    tl = Timeline(gap_s=0.1, sample_rate=100)
    tl.set_lines(["a", "b", "c"], {"a": const(20, 0.25)})
    assert not tl.can_stream("a")  # it has audio: a re-render keeps it until the new take is finished
    assert tl.begin_stream("b")
    assert tl.append("b", 0, const(7, 0.5)) == 30
    assert tl.append("b", 7, const(3, 0.5)) == 37
    assert tl.segments() == [Segment("a", 0, 20, True), Segment("b", 30, 10, False)]
    assert tl.layout.growing and tl.layout.end == 40
    with pytest.raises(ValueError, match="expected 10"):
        tl.append("b", 5, const(1, 0.5))
    with pytest.raises(ValueError, match="not streaming"):
        tl.append("c", 0, const(1, 0.5))
    tl.end_stream("b", const(12, 0.75))  # the final audio replaces the chunks
    assert tl.segments() == [Segment("a", 0, 20, True), Segment("b", 30, 12, True)]
    np.testing.assert_array_equal(tl.line_audio("b"), 0.75)
    tl.set_lines(["a", "b", "c"], {"c": const(5, 1.0)})
    assert not tl.can_stream("a") and not tl.can_stream("b")  # c has audio after them


def test_a_line_landing_after_a_stream_stops_it_where_it_is_and_its_take_moves_what_follows() -> None:
    """Scenes rendered side by side: a later scene's line lands while an earlier line streams. The stream stops
    (it may not grow under that line), its take replaces it whole, and the later line moves by the difference."""
    tl = Timeline(gap_s=0.1, sample_rate=100)
    tl.set_lines(["a", "b", "c", "d"], {})
    assert tl.begin_stream("a")
    tl.append("a", 0, const(10, 0.25))
    assert not tl.can_stream("c")  # one stream at a time: the earliest line's
    tl.set_audio("c", const(5, 1.0))
    assert not tl.streaming("a") and tl.partial("a") and not tl.layout.growing
    assert tl.segments() == [Segment("a", 0, 10, True), Segment("c", 20, 5, True)]
    assert not tl.can_stream("b")
    tl.end_stream("a", const(30, 0.25))  # its take: what streamed and the rest
    assert not tl.partial("a")
    assert tl.segments() == [Segment("a", 0, 30, True), Segment("c", 40, 5, True)]
    np.testing.assert_array_equal(tl.mix()[:30], 0.25)
    np.testing.assert_array_equal(tl.mix()[40:], 1.0)
    assert tl.begin_stream("d") and tl.partial("d")
    tl.end_stream("d", None)  # cancelled: nothing of it stays
    assert tl.segments() == [Segment("a", 0, 30, True), Segment("c", 40, 5, True)]


def test_the_wait_point_of_a_line_is_where_the_timeline_plays_to_before_it_lands() -> None:
    tl = Timeline(gap_s=0.1, sample_rate=100)
    tl.set_lines(["a", "b", "c", "d", "e"], {"a": const(20, 0.5), "d": const(5, 1.0)})
    assert tl.wait_point("b") == 20 and tl.wait_point("c") == 20  # the end of a: b and c come before d
    assert tl.wait_point("d") == 30  # an old take waits at its start (its new take comes whole)
    assert tl.wait_point("a") == 0 and tl.wait_point("gone") is None
    assert tl.begin_stream("e")
    assert tl.wait_point("e") is None  # streaming at the end: the end is where playback waits
    tl.append("e", 0, const(8, 0.25))
    tl.set_lines(["a", "b", "c", "d", "e"], {"a": const(20, 0.5)})
    assert tl.begin_stream("b")
    tl.append("b", 0, const(7, 0.25))
    tl.set_audio("d", const(5, 1.0))  # lands after b: b stops, and its audio so far is playable
    assert tl.wait_point("b") == 30 + 7 and tl.wait_point("c") == 37


def test_a_stream_that_grows_past_its_buffer_keeps_every_sample() -> None:
    tl = Timeline(gap_s=0.0, sample_rate=10)  # an 8 s first buffer is 80 samples here
    tl.set_lines(["a"], {})
    tl.begin_stream("a")
    first = tl.layout
    chunks = [np.arange(k * 30, (k + 1) * 30, dtype=np.float32) for k in range(10)]
    for k, chunk in enumerate(chunks):
        tl.append("a", 30 * k, chunk)
    assert tl.layout is first  # appending never builds a new layout
    np.testing.assert_array_equal(tl.mix(), np.concatenate(chunks))


def test_a_take_swap_moves_only_the_lines_after_it_and_copies_no_audio() -> None:
    tl = Timeline(gap_s=0.1, sample_rate=100)
    audio = {k: const(20, v) for k, v in zip("abcd", (0.125, 0.25, 0.375, 0.5), strict=True)}
    tl.set_lines(list("abcd"), audio)
    before = tl.layout
    longer = const(50, 0.875)
    tl.set_audio("b", longer)
    after = tl.layout
    assert [s.start for s in before.segments()] == [0, 30, 60, 90]
    assert [s.start for s in after.segments()] == [0, 30, 90, 120]
    assert after.tracks[0] is before.tracks[0] and after.tracks[2] is before.tracks[2]
    assert after.tracks[1].data is longer  # the take's own array, not a copy
    # the old snapshot is untouched: a reader holding it goes on reading the old layout
    np.testing.assert_array_equal(before.read(30, 20), 0.25)
    np.testing.assert_array_equal(after.read(30, 50), 0.875)
    np.testing.assert_array_equal(after.read(90, 20), 0.375)
    tl.set_audio("b", None)
    assert [s.line_id for s in tl.segments()] == ["a", "c", "d"]


def test_the_take_a_line_holds_already_changes_nothing() -> None:
    tl = Timeline(gap_s=0.1, sample_rate=100)
    audio = {k: const(20, v) for k, v in zip("ab", (0.125, 0.25), strict=True)}
    tl.set_lines(list("ab"), audio)
    before = tl.layout
    tl.set_audio("a", audio["a"])  # e.g. its check came back: the same audio
    assert tl.layout is before
    tl.set_audio("a", audio["a"].copy())  # another take, equal samples: placed
    assert tl.layout is not before and tl.layout.tracks[1] is before.tracks[1]


def test_read_into_fills_gaps_and_the_end_with_zeros() -> None:
    tl = Timeline(gap_s=0.2, sample_rate=10)
    tl.set_lines(["a", "b"], {"a": const(4, 0.5), "b": const(4, 0.25)})
    out = np.full(10, 9.0, np.float32)
    assert tl.layout.read_into(out, 2) == 8  # a[2:], the gap, b: ends at sample 10
    np.testing.assert_array_equal(out, [0.5, 0.5, 0, 0, 0.25, 0.25, 0.25, 0.25, 0, 0])
    assert tl.layout.read_into(out, 50) == 0
    np.testing.assert_array_equal(out, 0)


def test_order_changes_keep_audio_and_stop_a_stream_that_is_no_longer_last() -> None:
    tl = Timeline(gap_s=0.0, sample_rate=100)
    tl.set_lines(["a", "b"], {"a": const(10, 0.125)})
    tl.begin_stream("b")
    tl.append("b", 0, const(5, 0.25))
    tl.set_order(["b", "a", "c"])  # the streaming line moved above a line with audio
    assert [(s.line_id, s.start, s.length, s.finished) for s in tl.segments()] == [
        ("b", 0, 5, True), ("a", 5, 10, True)]
    assert not tl.streaming("b")
    tl.set_order(["c", "a"])
    assert [(s.line_id, s.start) for s in tl.segments()] == [("a", 0)]
    with pytest.raises(ValueError, match="unique"):
        tl.set_order(["a", "a"])
    with pytest.raises(ValueError, match="not on this timeline"):
        tl.set_audio("zz", const(1, 0.5))


def test_gap_changes_move_every_line() -> None:
    tl = Timeline(gap_s=0.0, sample_rate=100)
    tl.set_lines(["a", "b"], {"a": const(10, 0.5), "b": const(10, 0.5)})
    tl.set_gap(1.23)
    assert [s.start for s in tl.segments()] == [0, 10 + 123]
    with pytest.raises(ValueError, match="gap"):
        tl.set_gap(float("nan"))


def test_a_line_that_comes_back_brings_its_audio() -> None:
    tl = Timeline(gap_s=0.0, sample_rate=100)
    takes = {"a": const(10, 0.25), "b": const(5, 0.5)}
    tl.set_lines(["a", "b"], takes)
    tl.set_order(["a"], takes)
    tl.set_order(["a", "b"], takes)  # Undo of the delete
    assert [(s.line_id, s.start) for s in tl.segments()] == [("a", 0), ("b", 10)]


def test_a_new_order_asks_only_the_lines_that_came_and_may_have_audio() -> None:
    """A pasted book brings 10,000 lines without takes: `set_order` asks for the audio of the lines that came and
    have some (the source's `keys`), not of every line without a track."""

    class Asked(dict):
        def get(self, key, default=None):
            asked.append(key)
            return super().get(key, default)

    asked: list[str] = []
    order = [f"l{i}" for i in range(100)]
    takes = Asked({k: const(10, 0.5) for k in order[:5]})
    tl = Timeline(gap_s=0.0, sample_rate=100)
    tl.set_lines(order, takes)
    asked.clear()
    takes["n7"] = const(4, 0.25)
    tl.set_order(order[:50] + [f"n{i}" for i in range(50)], takes)
    assert asked == ["n7"]
    assert [(s.line_id, s.start) for s in tl.segments()] == [("l0", 0), ("l1", 10), ("l2", 20), ("l3", 30),
                                                             ("l4", 40), ("n7", 50)]


def test_a_tracks_peaks_follow_it_as_it_streams_and_equal_the_peaks_of_its_whole_audio():
    from s2studio.audio.timeline import PEAK_BIN

    t = Timeline(gap_s=0.0)
    t.set_lines(["a"], {})
    assert t.begin_stream("a")
    rng = np.random.default_rng(3)
    audio = rng.uniform(-1, 1, 5 * PEAK_BIN + 17).astype(np.float32)
    track = t.layout.tracks[0]
    for lo in range(0, len(audio), 300):  # chunks that end inside bins: the partial last bin is redone
        t.append("a", lo, audio[lo:lo + 300])
        n = track.length
        whole = np.pad(np.abs(audio[:n]), (0, (-n) % PEAK_BIN)).reshape(-1, PEAK_BIN).max(axis=1)
        np.testing.assert_array_equal(track.peaks(), whole)
    np.testing.assert_array_equal(track.read(PEAK_BIN, 10), audio[PEAK_BIN:PEAK_BIN + 10])
    assert len(track.read(len(audio) - 4, 10)) == 4


def test_takes_landing_in_any_order_lay_out_as_a_fresh_layout_would() -> None:
    import random

    from s2studio.audio.layout import build

    rng = random.Random(3)
    order = [f"l{i}" for i in range(40)]
    tl = Timeline(gap_s=0.1, sample_rate=100)
    tl.set_lines(order, {})
    for line_id in rng.sample(order, 25) + order[30:]:  # anywhere, then in order at the end (a render)
        before = tl.layout
        tl.set_audio(line_id, const(rng.randint(1, 30), 0.5))
        fresh = build([tl._tracks[k] for k in order if k in tl._tracks], tl.gap, 0)
        assert tl.layout.tracks == fresh.tracks and dict(tl.layout.index) == dict(fresh.index)
        np.testing.assert_array_equal(tl.layout.starts, fresh.starts)
        if line_id == order[-1]:
            assert all(tl.layout.index[k] == i for k, i in before.index.items())  # nothing before it moved


def test_a_project_laid_out_a_slice_a_step_shows_when_done_and_a_change_meanwhile_finishes_it_first(monkeypatch) -> None:
    from s2studio.audio import timeline as timeline_module
    from s2studio.audio.layout import Track

    monkeypatch.setattr(timeline_module, "LAYOUT_SLICE", 4)
    made: list[str] = []
    real = Track.__init__
    monkeypatch.setattr(Track, "__init__", lambda self, line_id, *a, **k: (made.append(line_id), real(self, line_id, *a, **k))[1])
    order = [f"l{i}" for i in range(18)]
    audio = {k: const(10 + i, 0.1) for i, k in enumerate(order) if i % 3}
    whole = Timeline(gap_s=0.1, sample_rate=100)
    whole.set_lines(order, audio)
    made.clear()
    tl = Timeline(gap_s=0.1, sample_rate=100)
    steps, before = tl.lay_out(order, audio), 0
    for looked in steps:
        assert len(made) - before <= 4 and set(made) <= set(order[:looked]) and tl.layout.tracks == ()  # shown when done
        assert tl.order == tuple(order) and "l5" in tl
        before = len(made)
    assert sorted(made) == sorted(audio)
    assert [t.line_id for t in tl.layout.tracks] == [t.line_id for t in whole.layout.tracks]
    np.testing.assert_array_equal(tl.layout.starts, whole.layout.starts)
    assert tl.layout.lineage != whole.layout.lineage  # a new lineage: views start over, they compare nothing
    steps = tl.lay_out(order, audio)
    next(steps)
    tl.set_audio("l3", const(7, 0.5))  # a take lands meanwhile: the rest laid out first, then the take
    whole.set_audio("l3", const(7, 0.5))
    assert next(steps, None) is None and [t.line_id for t in tl.layout.tracks] == [t.line_id for t in whole.layout.tracks]
    np.testing.assert_array_equal(tl.layout.starts, whole.layout.starts)
    lineage = tl.layout.lineage
    tl.set_gap(0.2)
    assert tl.layout.lineage == lineage  # the same tracks, moved: views compare them
