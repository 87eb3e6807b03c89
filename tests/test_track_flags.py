"""The timeline's per-line flags follow the layout asking only about lines that came onto it: a render of
several scenes at once places lines far apart, and the lines between them keep their flags. Counted."""

from __future__ import annotations

import numpy as np

from s2studio.audio.timeline import Timeline
from s2studio.ui.player.timeline_peaks import TimelinePeaks
from s2studio.ui.player.track_flags import TrackFlags


def test_lines_placed_far_apart_ask_about_themselves_only() -> None:
    order = [f"l{i}" for i in range(1000)]
    timeline = Timeline(gap_s=0.0)
    timeline.set_order(order, {k: np.zeros(100, np.float32) for k in order[::2]})  # every other line rendered
    flagged = set(order[::10])
    flags = TrackFlags(lambda line_id: line_id in flagged)
    flags.sync(timeline.layout)
    assert flags.asked == 500
    for k in ("l1", "l999", "l501"):  # three scenes' next lines, placed before the flags look again
        timeline.set_audio(k, np.zeros(100, np.float32))
        flagged.add(k)
    flags.update(["l501"])
    assert flags.asked == 500  # asked when the flags are next read
    flags.sync(timeline.layout)
    assert flags.asked == 500 + 3 + 1  # the new lines when they come onto the layout, one again as updated
    assert list(flags.flags) == [t.line_id in flagged for t in timeline.layout.tracks]
    timeline.set_audio("l0", None)  # a line leaves: nobody is asked
    flags.sync(timeline.layout)
    assert flags.asked == 504
    assert list(flags.flags) == [t.line_id in flagged for t in timeline.layout.tracks]


def test_flags_follow_any_changes_of_the_layout() -> None:
    rng = np.random.default_rng(5)
    order = [f"l{i}" for i in range(600)]
    timeline = Timeline(gap_s=0.0)
    timeline.set_order(order, {k: np.zeros(10, np.float32) for k in order if rng.random() < 0.5})
    flagged = {k for k in order if rng.random() < 0.3}
    flags = TrackFlags(lambda line_id: line_id in flagged)
    flags.sync(timeline.layout)
    for _ in range(40):
        changed = [order[i] for i in rng.integers(0, len(order), int(rng.integers(1, 6)))]
        for k in changed:  # placed, replaced or removed, several before the flags look again
            timeline.set_audio(k, None if rng.random() < 0.3 else np.zeros(int(rng.integers(5, 20)), np.float32))
        asked = flags.asked
        flags.sync(timeline.layout)
        assert flags.asked - asked <= len(changed)
        assert list(flags.flags) == [t.line_id in flagged for t in timeline.layout.tracks]


def test_packed_peaks_follow_any_changes_as_a_fresh_pack_would() -> None:
    rng = np.random.default_rng(8)
    order = [f"l{i}" for i in range(400)]
    timeline = Timeline(gap_s=0.0)
    timeline.set_order(order, {k: rng.uniform(-1, 1, int(rng.integers(300, 3000))).astype(np.float32)
                               for k in order if rng.random() < 0.5})
    peaks = TimelinePeaks()
    peaks.sync(timeline.layout)
    peaks.wait()  # a layout's many lines are summarised on a thread: taken in by the next sync
    peaks.sync(timeline.layout)
    for _ in range(30):
        changed = [order[i] for i in rng.integers(0, len(order), int(rng.integers(1, 6)))]
        for k in changed:  # placed, replaced or removed, several before the peaks look again
            audio = rng.uniform(-1, 1, int(rng.integers(300, 3000))).astype(np.float32)
            timeline.set_audio(k, None if rng.random() < 0.3 else audio)
        before = peaks.packed_changes
        peaks.sync(timeline.layout)
        assert peaks.packed_changes - before <= len(changed)
        fresh = TimelinePeaks()
        fresh.sync(timeline.layout)
        fresh.wait()
        fresh.sync(timeline.layout)
        for got, want in zip(peaks._pack.values + peaks._pack.offsets, fresh._pack.values + fresh._pack.offsets,
                             strict=True):
            assert np.array_equal(got, want)
