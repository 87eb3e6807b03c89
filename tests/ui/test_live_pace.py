"""A render's pace (steady speed and ETA, the lead live playback needs) and a player that buffers when the render
falls behind instead of playing it chunk by chunk."""

from __future__ import annotations

import random

import numpy as np
import pytest

from s2studio.audio.timeline import Timeline
from s2studio.engine.api import SAMPLE_RATE
from s2studio.ui.control.pace import MIN_LEAD_S, Pace
from s2studio.ui.control.player import Player


def simulate(seed: int, prefill_s: float = 2.0, fps: float = 20.0) -> tuple[list[tuple[float, float | None]], float]:
    """A 10-line job on a slow engine: each line waits `prefill_s`, then makes frames at `fps`; the engine's
    estimate of a line's length is off by up to 25 % and, once outgrown, says one frame is left (as S2's does).
    Returns (time, ETA) after every report and the job's true length."""
    rng = random.Random(seed)
    chars = [rng.randint(20, 120) for _ in range(10)]
    frames = [int(c * 1.4 * rng.uniform(0.8, 1.25)) for c in chars]
    pace = Pace({f"l{i}": c for i, c in enumerate(chars)}, started=0.0)
    t, out = 0.0, []
    for i, n in enumerate(frames):
        t += prefill_s
        for made in range(0, n + 1, 5):
            t += 5 / fps
            pace.update(t, f"l{i}", made, max(int(chars[i] * 1.1), made + 1), 1.2)
            out.append((t, pace.eta_s))
    return out, t


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_eta_counts_down_steadily_and_is_never_zero_before_the_end(seed):
    etas, end = simulate(seed)
    shown = [(t, e) for t, e in etas if e is not None]
    assert shown[0][0] < 0.1 * end  # an estimate within the first tenth of the job
    rises = [e1 - e0 for (_t0, e0), (_t1, e1) in zip(shown, shown[1:]) if e1 > e0]
    assert max(rises, default=0.0) <= 4.0 and sum(rises) <= 0.12 * end  # no swings (the 348 → 57 s)
    for t, e in shown:
        if t >= 0.2 * end:  # once under way: within 40 % (plus 3 s) of the time really left
            assert abs(e - (end - t)) <= 0.4 * (end - t) + 3.0, (t, e, end - t)
    assert all(e >= 1.0 for _t, e in shown)  # never "ETA 0 s" while the job runs


def test_the_lead_covers_what_a_slow_render_will_lag_behind():
    pace = Pace({"a": 100, "b": 100})
    pace.update(0.5, "a", 0, 140, 2.0)
    pace.update(2.0, "a", 40, 140, 2.0)
    remaining = pace.remaining_audio_s()
    assert pace.lead_s() == pytest.approx(remaining * (1 - 1 / 2.0))
    pace.update(2.5, "a", 50, 140, 0.5)  # faster than real time: a short lead absorbs a slow frame
    assert pace.lead_s() == MIN_LEAD_S
    assert Pace().eta_text() == "ETA …"


def test_what_is_left_of_a_long_job_is_the_sum_over_the_lines_after_the_one_rendering():
    rng = random.Random(5)
    chars = {f"l{i}": rng.randint(0, 120) for i in range(3000)}
    pace = Pace(chars, started=0.0)
    ids = list(chars)
    for step, i in enumerate((0, 1, 2, 1500, 2998, 2999)):
        pace.update(1.0 + step, ids[i], 10, 90, 1.0)
        own = max(chars[ids[i]], 1)
        if pace._done_chars:
            per_char = pace._done_frames / pace._done_chars
            estimate = per_char * own
        else:
            per_char, estimate = 90 / own, 90
        after = sum(max(chars[k], 1) for k in ids[i + 1:])  # the sum the pace keeps as prefix sums
        assert pace.remaining_frames() == pytest.approx(max(estimate - 10, 1.0) + per_char * after)
        assert pace._later_lines() == len(ids) - i - 1


def test_a_player_that_runs_dry_buffers_until_the_lead_is_rendered(qtbot):
    timeline = Timeline(gap_s=0.0)
    timeline.set_lines(["a"], {})
    assert timeline.begin_stream("a")
    timeline.append("a", 0, np.full(SAMPLE_RATE, 0.1, np.float32))
    player = Player(timeline)
    player.set_wait_at_end(True)
    player.set_buffer_lead(0.5)
    told: list[bool] = []
    player.buffering_changed.connect(told.append)
    block = np.zeros((4096, 1), np.float32)
    player.seek(SAMPLE_RATE - 1000)
    player._applied_seek = player._seek[0] - 1  # as if the stream had just started
    player._callback(block, len(block), None, None)  # 1000 samples left: the play runs dry
    assert player.position == SAMPLE_RATE and np.count_nonzero(block) == 1000
    player._poll()
    assert told == [True] and player.buffering
    timeline.append("a", SAMPLE_RATE, np.full(SAMPLE_RATE // 4, 0.1, np.float32))  # 0.25 s: not enough
    block[:] = 1.0
    player._callback(block, len(block), None, None)
    assert not block.any() and player.position == SAMPLE_RATE  # silent, and the playhead waits
    player._poll()
    assert player.buffering
    timeline.append("a", SAMPLE_RATE + SAMPLE_RATE // 4, np.full(SAMPLE_RATE // 2, 0.1, np.float32))
    player._poll()
    assert told == [True, False] and not player.buffering
    player._callback(block, len(block), None, None)
    assert np.count_nonzero(block) == len(block) and player.position == SAMPLE_RATE + len(block)
