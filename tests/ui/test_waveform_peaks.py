"""The waveform of a long timeline: each column's peak from the packed multi-resolution peaks is the audio's
(within a bin at each edge), a fitted view of 2,000 lines reads no line's audio one by one, a growing line
redraws its new tail only, and a burst of timeline changes repaints at the rate limit. Counted, not timed."""

from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest
from PySide6.QtWidgets import QApplication

from s2studio.audio.timeline import Timeline
from s2studio.ui.player import timeline_peaks
from s2studio.ui.player import waveform_image as image_module
from s2studio.ui.player.timeline_peaks import BINS, TimelinePeaks
from s2studio.ui.player.waveform import MAX_REPAINT_HZ, WaveformView


def lines(count: int, seed: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for i in range(count):
        n = int(rng.integers(2_000, 40_000))
        out[f"l{i}"] = (rng.uniform(0.05, 0.9) * np.sin(np.arange(n) / (3 + i % 7))).astype(np.float32)
    return out


def drawn_now(view: WaveformView) -> None:
    """The passes that draw a change: the rate limit's (its interval set to 0), the pass budget's turn that composes
    the picture, the paint."""
    for _ in range(3):
        QApplication.processEvents()
    view.grab()


def test_packed_peaks_hold_each_columns_peak_within_a_bin() -> None:
    audio = lines(300)
    timeline = Timeline(gap_s=0.05)
    timeline.set_lines(list(audio), audio)
    layout = timeline.layout
    mix = np.abs(timeline.mix())
    peaks = TimelinePeaks()
    peaks.sync(layout)
    assert peaks.pending == len(layout.tracks)  # too many to summarise on the GUI thread: the worker does
    peaks.wait()
    peaks.sync(layout)
    assert peaks.pending == 0
    for spp in (BINS[0] * 1.3, BINS[1] * 2.0, BINS[2] * 1.01):
        edges = np.arange(0, layout.end + spp, spp)
        got, at = peaks.columns(layout, edges, spp)
        k = max(i for i, b in enumerate(BINS) if b <= spp)
        for c in range(len(edges) - 1):
            a, b = int(edges[c]), int(edges[c + 1])
            exact = mix[a:b].max(initial=0.0)
            wider = mix[max(a - BINS[k], 0):b + BINS[k]].max(initial=0.0)
            assert exact - 1e-6 <= got[c] <= wider + 1e-6


def test_a_fitted_book_reads_no_line_alone_and_a_growing_line_redraws_its_tail(qtbot, monkeypatch) -> None:
    audio = lines(2000)
    timeline = Timeline(gap_s=0.05)
    timeline.set_lines([*audio, "new"], audio)
    view = WaveformView(timeline)
    qtbot.addWidget(view)
    view.resize(800, 150)
    view.show()
    reads: list[str] = []
    real = image_module.track_columns
    monkeypatch.setattr(image_module, "track_columns",
                        lambda track, *a: reads.append(track.line_id) or real(track, *a))
    view.grab()
    assert view.peaks.pending == 2000 and view.notice() == "Drawing the waveform…"
    view.peaks.wait()
    drawn = view.columns_drawn
    qtbot.waitUntil(lambda: view.grab() and view.peaks.pending == 0)  # the worker's "ready" reached the view
    assert view.columns_drawn - drawn >= 790 and reads == []  # a pass over packed peaks
    view._throttle.setInterval(0)  # no rate limit here (its own test below): every change is drawn
    assert timeline.begin_stream("new")
    view.refresh()
    drawn_now(view)
    drawn, chunk = view.columns_drawn, np.full(4096, 0.5, np.float32)
    spp = view.samples_per_pixel
    for k in range(5):
        timeline.append("new", k * 4096, chunk)
        view.refresh()
        drawn_now(view)
    assert reads and set(reads) == {"new"}  # the streaming line is drawn from its track
    assert view.columns_drawn - drawn <= 5 * (4096 / spp + 4)


def test_a_burst_of_timeline_changes_repaints_at_the_rate_limit(qtbot) -> None:
    timeline = Timeline()
    view = WaveformView(timeline)
    qtbot.addWidget(view)
    repaints: list[int] = []
    view.view_changed.connect(lambda: repaints.append(1))
    for _ in range(200):
        view.refresh(lines_moved=False)
        QApplication.processEvents()
    assert 1 <= len(repaints) <= 2  # the first at once, then at most one per 1/MAX_REPAINT_HZ s
    qtbot.wait(int(2000 / MAX_REPAINT_HZ))
    assert len(repaints) <= 3


@pytest.mark.parametrize("scope", [None, ("l5", "l6", "l7")])
def test_a_click_selects_the_line_under_it_whatever_the_scope(qtbot, scope) -> None:
    audio = lines(20)
    timeline = Timeline(gap_s=0.1)
    timeline.set_lines(list(audio), audio)
    view = WaveformView(timeline)
    qtbot.addWidget(view)
    view.resize(600, 120)
    view.set_scope(scope)
    clicked: list[str] = []
    view.line_clicked.connect(clicked.append)
    start, end = timeline.layout.bounds("l6")
    from PySide6.QtCore import QPoint, Qt

    qtbot.mouseClick(view, Qt.MouseButton.LeftButton, pos=QPoint(int(view.x_of((start + end) / 2)), 60))
    assert clicked == ["l6"]


def test_summaries_that_arrive_for_lines_far_apart_repack_those_lines_not_all_between() -> None:
    """A render places takes in several scenes at once; their summaries come from the worker. Packing them in
    touches their tracks (and short stretches between), not every track from the first to the last of them."""
    audio = lines(300)
    timeline = Timeline(gap_s=0.05)
    timeline.set_lines(list(audio), audio)
    peaks = TimelinePeaks()
    peaks.sync(timeline.layout)
    peaks.wait()
    peaks.sync(timeline.layout)
    changed = [*range(0, 40), *range(250, 290)]  # each more than are summarised on the GUI thread
    louder = lines(300, seed=9)
    for i in changed:
        timeline.set_audio(f"l{i}", louder[f"l{i}"])
    layout = timeline.layout
    before = peaks.packed_changes
    peaks.sync(layout)
    waiting = peaks.pending  # (those the worker summarised before the sync packed them are packed already)
    assert waiting <= len(changed)
    peaks.wait()
    peaks.sync(layout)
    assert peaks.pending == 0 and peaks.packed_changes - before == len(changed) + waiting
    fresh = TimelinePeaks()
    fresh.sync(layout)
    fresh.wait()
    fresh.sync(layout)
    edges = np.arange(0, layout.end + BINS[0] * 2.0, BINS[0] * 2.0)
    assert np.array_equal(peaks.columns(layout, edges, BINS[0] * 2.0)[0], fresh.columns(layout, edges, BINS[0] * 2.0)[0])


def _calls_of(action) -> int:  # noqa: ANN001
    """Python calls `action` makes on this thread (what it costs, counted)."""
    import sys

    calls = [0]

    def count(_frame, event, _arg) -> None:  # noqa: ANN001
        if event in ("call", "c_call"):
            calls[0] += 1

    sys.setprofile(count)
    try:
        action()
    finally:
        sys.setprofile(None)
    return calls[0]


def test_the_first_drawing_of_a_book_laid_out_afresh_costs_the_same_at_any_length(qtbot) -> None:
    """The window's thread draws a fresh layout from what is packed (nothing yet) and looks up the lines flagged,
    not each line: a book of 4,000 lines costs what one of 1,000 does; the worker packs them and the view takes
    its packs in, each in one assignment."""
    costs, flags_asked = {}, {}
    for count in (100, 1000, 4000):  # the first warms up (what a first paint loads once)
        gc.collect()  # widgets of the tests before: not collected on the worker's thread while this one paints
        timeline = Timeline(gap_s=0.05)
        view = WaveformView(timeline)
        qtbot.addWidget(view)
        view.resize(800, 150)
        view.show()
        view.grab()
        ids = [f"l{i}" for i in range(count)]
        timeline.set_lines(ids, {k: np.full(3000, 0.5, np.float32) for k in ids})
        view.set_stale({"l7", "l9"}, {"l7", "l9"})
        view.refresh()  # composed in a turn of the pass budget
        costs[count] = _calls_of(lambda v=view: v._compose_turn(0.0))
        flags_asked[count] = view.stale_flags.asked + view.rendering_flags.asked
        assert view.peaks.pending == count
        qtbot.waitUntil(lambda v=view: v.grab() and v.peaks.pending == 0, timeout=30000)  # the event loop runs
        assert view.stale_lines == {"l7", "l9"}
    assert costs[4000] <= costs[1000] * 1.1 + 50, costs
    assert flags_asked[4000] <= 4, flags_asked


def test_packs_made_by_the_worker_follow_changes_meanwhile_as_a_fresh_pack_would() -> None:
    rng = np.random.default_rng(5)
    order = [f"l{i}" for i in range(300)]

    def audio() -> np.ndarray:
        return rng.uniform(-1, 1, int(rng.integers(300, 3000))).astype(np.float32)

    timeline = Timeline(gap_s=0.0)
    peaks = TimelinePeaks()
    for round_ in range(6):
        if round_ % 3 == 0:  # laid out afresh: the worker packs it all
            timeline.set_lines(order, {k: audio() for k in order if rng.random() < 0.8})
        peaks.sync(timeline.layout)
        for k in rng.choice(order, int(rng.integers(1, 50 if round_ % 2 else 5))):  # takes land meanwhile
            timeline.set_audio(str(k), None if rng.random() < 0.2 else audio())
            if rng.random() < 0.3:
                peaks.sync(timeline.layout)
        peaks.sync(timeline.layout)
        peaks.wait()
        peaks.sync(timeline.layout)
        assert peaks.pending == 0
        fresh = TimelinePeaks()
        fresh.sync(timeline.layout)
        fresh.wait()
        fresh.sync(timeline.layout)
        assert peaks._pack.tracks == timeline.layout.tracks
        for got, want in zip(peaks._pack.values + peaks._pack.offsets, fresh._pack.values + fresh._pack.offsets,
                             strict=True):
            assert np.array_equal(got, want)


def test_a_take_landing_while_the_worker_packs_a_book_leaves_the_rest_to_the_worker(monkeypatch) -> None:
    """A project just opened is packed by the worker; a take landing meanwhile (a line's check, a render) is
    packed by the window's thread alone, and the lines not packed yet stay with the worker, which goes on from
    what it handed over: the window never waits for them one by one."""
    monkeypatch.setattr(timeline_peaks, "HANDOVER_S", 0.0)  # a pack handed over at every line
    gate, calls, real = threading.Event(), [0], timeline_peaks.summarise

    def held(values):  # noqa: ANN001, ANN202 - the worker stops at its 100th line until the take has landed
        calls[0] += 1
        if calls[0] == 100:
            gate.wait(30)
        return real(values)

    monkeypatch.setattr(timeline_peaks, "summarise", held)
    audio = lines(300)
    timeline = Timeline(gap_s=0.05)
    timeline.set_lines(list(audio), audio)
    peaks = TimelinePeaks()
    peaks.sync(timeline.layout)
    deadline = time.monotonic() + 30
    while calls[0] < 100 and time.monotonic() < deadline:
        time.sleep(0.01)
    handed = len(peaks._job.built.tracks)  # (the worker hands a pack over now and then)
    assert 50 < handed < 100
    timeline.set_audio("l5", lines(6, seed=9)["l5"])
    layout = timeline.layout
    peaks.sync(layout)
    assert not peaks._missing and peaks.pending == 300 - handed  # the worker packs the rest, in order
    gate.set()
    peaks.wait()
    assert _calls_of(lambda: peaks.sync(layout)) < 40  # its last pack taken in at once
    assert peaks.pending == 0
    fresh = TimelinePeaks()
    fresh.sync(layout)
    fresh.wait()
    fresh.sync(layout)
    assert peaks._pack.tracks == layout.tracks
    for got, want in zip(peaks._pack.values + peaks._pack.offsets, fresh._pack.values + fresh._pack.offsets,
                         strict=True):
        assert np.array_equal(got, want)


def test_the_peaks_which_the_worker_holds_do_not_keep_the_waveform_alive(qtbot) -> None:
    """The summarising thread holds the peaks while it works: were the widget reachable from them, the thread
    letting go of them last (or a collection it runs) would free a QWidget off the window's thread."""
    import weakref

    audio = lines(3)
    timeline = Timeline(gap_s=0.05)
    timeline.set_lines(audio, audio)
    view = WaveformView(timeline)
    peaks, gone = view.peaks, weakref.ref(view)  # what the worker's frame holds
    del view
    gc.collect()  # here, on the window's thread
    assert gone() is None
    peaks._on_ready()  # the worker says it is done after the widget went: nothing happens


FIRST_DRAWING = """
import sys, threading
import numpy as np
from PySide6.QtWidgets import QApplication
from s2studio.audio.timeline import Timeline
from s2studio.ui.player.waveform import WaveformView

app = QApplication([])
timeline = Timeline(gap_s=0.05)
audio = {f"l{i}": np.full(4000, 0.1 * (i % 9), np.float32) for i in range(300)}
timeline.set_lines(list(audio), audio)
view = WaveformView(timeline)
view.resize(800, 150)
view.show()
imported = []


class Watch:
    def find_spec(self, name, path=None, target=None):
        if threading.current_thread() is threading.main_thread():
            imported.append(name)
        return None


sys.meta_path.insert(0, Watch())
view.grab()
view.peaks.wait()
for _ in range(5):
    QApplication.processEvents()
    view.grab()
print("drawn", view.columns_drawn, "imported", imported)
"""


def test_the_timelines_first_drawing_imports_nothing_on_the_windows_thread() -> None:
    """An import on the window's thread holds it (numpy's first np.unique imports numpy.ma: a tenth of a second)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run([sys.executable, "-c", FIRST_DRAWING], capture_output=True, text=True, timeout=120, env=env)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("drawn")), None)
    assert line is not None, done.stdout + done.stderr
    drawn = int(line.split()[1])
    assert drawn >= 800 and line.endswith("imported []"), line
