"""Timeline: line placement with gaps, streaming chunks, rendered-up-to, re-takes."""

from __future__ import annotations

import numpy as np
import pytest

from s2studio.audio.timeline import Segment, Timeline


def ramp(n: int, value: float) -> np.ndarray:
    return np.full(n, value, np.float32)


def test_lines_are_placed_with_gaps_while_streaming() -> None:
    tl = Timeline(["a", "b", "c"], gap_s=0.5, sample_rate=100)
    assert tl.gap == 50 and tl.rendered_until == 0 and not tl.complete
    tl.append("a", 0, ramp(30, 0.125))
    tl.append("a", 30, ramp(20, 0.25))
    assert tl.rendered_until == 50
    assert tl.segments() == [Segment("a", 0, 50, False)]
    assert tl.line_start("b") is None
    tl.finish_line("a", np.concatenate([ramp(30, 0.125), ramp(20, 0.25)]))
    assert tl.rendered_until == 100  # line a plus the decided gap before b
    assert tl.line_start("b") == 100
    tl.append("b", 0, ramp(10, 0.375))
    assert tl.rendered_until == 110
    tl.finish_line("b", ramp(10, 0.375))
    tl.finish_line("c", ramp(5, 0.5))
    assert tl.complete and tl.rendered_until == 165  # no gap after the last line
    assert [(s.line_id, s.start, s.end) for s in tl.segments()] == [("a", 0, 50), ("b", 100, 110), ("c", 160, 165)]
    mix = tl.mix()
    assert len(mix) == 165
    np.testing.assert_array_equal(mix[50:100], 0)
    np.testing.assert_array_equal(mix[100:110], 0.375)
    np.testing.assert_array_equal(mix[160:165], 0.5)


def test_read_into_pads_with_zeros_and_reports_rendered() -> None:
    tl = Timeline(["a"], gap_s=0.0, sample_rate=10)
    tl.append("a", 0, ramp(8, 0.5))
    out = np.full(5, 9.0, np.float32)
    assert tl.read_into(out, 6) == 2
    np.testing.assert_array_equal(out, [0.5, 0.5, 0, 0, 0])
    np.testing.assert_array_equal(tl.read(100, 3), 0)


def test_retake_shifts_later_lines_and_grows_buffer() -> None:
    tl = Timeline(["a", "b"], gap_s=0.1, sample_rate=100)
    tl.finish_line("a", ramp(20, 0.125))
    tl.finish_line("b", ramp(20, 0.25))
    tl.finish_line("a", ramp(500, 0.375))  # a longer take of line a
    assert [(s.start, s.end) for s in tl.segments()] == [(0, 500), (510, 530)]
    mix = tl.mix()
    np.testing.assert_array_equal(mix[:500], 0.375)
    np.testing.assert_array_equal(mix[510:530], 0.25)
    tl.clear_line("a")
    assert tl.rendered_until == 0 and tl.segments() == [Segment("a", 0, 0, False)]


def test_final_audio_replaces_chunks_even_if_shorter() -> None:
    tl = Timeline(["a", "b"], gap_s=0.0, sample_rate=100)
    tl.append("a", 0, ramp(40, 0.5))
    tl.finish_line("a", ramp(30, 0.25))
    tl.finish_line("b", ramp(10, 0.75))
    np.testing.assert_array_equal(tl.mix(), np.concatenate([ramp(30, 0.25), ramp(10, 0.75)]))


def test_out_of_order_chunks_are_refused() -> None:
    tl = Timeline(["a"], sample_rate=100)
    tl.append("a", 0, ramp(10, 0.125))
    with pytest.raises(ValueError, match="expected 10"):
        tl.append("a", 5, ramp(10, 0.125))
    with pytest.raises(ValueError, match="not an unfinished line"):
        tl.append("zzz", 0, ramp(1, 0.125))
    with pytest.raises(ValueError, match="unique"):
        tl.set_plan(["a", "a"])


def test_set_plan_keeps_audio_of_surviving_lines() -> None:
    tl = Timeline(["a", "b"], gap_s=0.0, sample_rate=100)
    tl.finish_line("a", ramp(10, 0.125))
    tl.finish_line("b", ramp(10, 0.25))
    tl.set_plan(["b", "c"])
    assert [(s.line_id, s.start, s.end, s.finished) for s in tl.segments()] == [("b", 0, 10, True), ("c", 10, 10, False)]
    np.testing.assert_array_equal(tl.line_audio("b"), 0.25)
