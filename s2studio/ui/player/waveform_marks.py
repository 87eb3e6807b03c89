"""What the waveform draws over the audio: the line being heard, stale and rendering lines, the selected and
looped line, line separators and names (only where a line is wide enough to show them), the ruler and the
rendered-up-to marker. Each mark is drawn for the lines it concerns, from the view's pixel spans, so a
fitted book of 10,000 lines draws at most a span per pixel, never a rectangle per line."""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

import numpy as np
from PySide6.QtCore import QLineF, QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFontMetrics, QFontMetricsF, QPainter, QPalette, QPen, QPixmap

from s2studio.audio.timeline import Timeline
from s2studio.engine.api import SAMPLE_RATE
from s2studio.ui.player.track_flags import TrackFlags
from s2studio.ui.player.waveform_paint import runs, track_ends, visible_tracks

RULER = 16
TOP = 18
LABEL_MIN_PX = 24
SEPARATOR_MIN_PX = 6
LABEL_GAP = 6
"""Pixels at least between two of the ruler's time labels."""
STALE = QColor("#e8590c")
RENDERING = QColor("#1c7ed6")
END_MARK = QColor("#e0a030")


class WaveformView(Protocol):
    """What the marks read of the view (`waveform.WaveformView`)."""

    timeline: Timeline
    origin: int
    visible: int
    samples_per_pixel: float
    current_line: str | None
    selected_line: str | None
    loop_line: str | None
    stale_flags: TrackFlags
    rendering_flags: TrackFlags
    ruler_cache: tuple[tuple, QPixmap] | None

    def palette(self) -> QPalette: ...
    def width(self) -> int: ...
    def height(self) -> int: ...
    def fontMetrics(self) -> QFontMetrics: ...  # noqa: N802 - Qt's name
    def devicePixelRatioF(self) -> float: ...  # noqa: N802 - Qt's name
    def x_of(self, sample: float) -> float: ...
    def speaker_of(self, line_id: str) -> str: ...
    def colour_of(self, line_id: str) -> QColor | None: ...
    def notice(self) -> str: ...


def _alpha(colour: QColor, alpha: int) -> QColor:
    c = QColor(colour)
    c.setAlpha(alpha)
    return c


def draw_marks(view: WaveformView, p: QPainter) -> None:
    pal = view.palette()
    w, h = view.width(), view.height()
    bottom = h - RULER
    accent, text = pal.color(QPalette.ColorRole.Highlight), pal.color(QPalette.ColorRole.Text)
    grid = _alpha(text, 60)

    def band(x0: float, x1: float) -> QRectF:
        return QRectF(x0, TOP, max(x1 - x0, 1.0), bottom - TOP)

    if view.current_line is not None:
        for x0, x1 in line_spans(view, [view.current_line]):
            p.fillRect(band(x0, x1), _alpha(accent, 45))
    wash = _alpha(pal.color(QPalette.ColorRole.Base), 110)
    for x0, x1 in flag_spans(view, view.stale_flags):
        p.fillRect(band(x0, x1), wash)
        p.fillRect(band(x0, x1), QBrush(_alpha(STALE, 60), Qt.BrushStyle.BDiagPattern))
    for x0, x1 in flag_spans(view, view.rendering_flags):
        p.fillRect(band(x0, x1), _alpha(RENDERING, 35))
    _draw_lines(view, p, bottom, grid, accent)
    _draw_ruler(view, p, w, bottom, grid, pal.color(QPalette.ColorRole.PlaceholderText))
    layout = view.timeline.layout
    end_x = view.x_of(layout.end)
    if layout.growing and 0 <= end_x <= w:  # rendered-up-to marker
        p.setPen(QPen(END_MARK, 2))
        p.drawLine(QPointF(end_x, TOP), QPointF(end_x, bottom))
    notice = view.notice()
    if notice:
        p.setPen(pal.color(QPalette.ColorRole.PlaceholderText))
        p.drawText(QRectF(0, TOP, w, bottom - TOP), Qt.AlignmentFlag.AlignCenter, notice)


def fit_label(name: str, marks: Sequence[str], width: float, metrics: QFontMetricsF) -> str:
    """The line's label in `width` pixels, never cut mid-word: "Bob · stale · rendering…", else with fewer marks
    (the last ones first), else the name alone, else the name shortened with an ellipsis ("Ali…"), else ""."""
    for keep in range(len(marks), -1, -1):
        label = " · ".join([name, *marks[:keep]]) if name else " · ".join(marks[:keep])
        if label and metrics.horizontalAdvance(label) <= width:
            return label
    short = metrics.elidedText(name, Qt.TextElideMode.ElideRight, width)
    return short if len(short) > 1 else ""


def _draw_lines(view: WaveformView, p: QPainter, bottom: float, grid: QColor, accent: QColor) -> None:
    """Separators, names and outlines of the lines wide enough on screen to show them."""
    layout = view.timeline.layout
    shown = visible_tracks(layout, view.origin, view.origin + view.visible)
    if not len(shown):
        return
    idx = np.arange(shown.start, shown.stop)
    starts = layout.starts[idx].astype(np.float64)
    ends = np.empty_like(starts)
    ends[:-1] = layout.starts[idx[1:]] - view.timeline.gap
    last = idx[-1]
    ends[-1] = layout.starts[last] + layout.tracks[last].length
    spp, origin = view.samples_per_pixel, view.origin
    x0s, x1s = (starts - origin) / spp, (ends - origin) / spp
    wide = np.nonzero(x1s - np.maximum(x0s, 0) >= SEPARATOR_MIN_PX)[0]
    p.setPen(QPen(_alpha(grid, grid.alpha() // 2), 1))  # solid: a dotted pen costs more than the waveform
    p.drawLines([QLineF(float(x0s[k]), TOP - 14, float(x0s[k]), bottom) for k in wide if x0s[k] >= 0])
    text = view.palette().color(QPalette.ColorRole.Text)
    for k in wide:
        x0f, x1f = float(x0s[k]), float(x1s[k])
        left = max(x0f, 0.0)  # the name stays in view while the line's start is scrolled off
        if x1f - left < LABEL_MIN_PX:
            continue
        line_id = layout.tracks[int(idx[k])].line_id
        marks = [m for m, on in (("⟳ loop", line_id == view.loop_line), ("stale", view.stale_flags.flags[int(idx[k])]),
                                 ("rendering…", view.rendering_flags.flags[int(idx[k])])) if on]
        label = fit_label(view.speaker_of(line_id), marks, x1f - left - 6, QFontMetricsF(p.font()))
        if label:
            colour = view.colour_of(line_id) or text
            p.setPen(QColor(colour.red(), colour.green(), colour.blue()))
            p.drawText(QRectF(left + 4, 2, max(x1f - left - 6, 10), 14),
                       Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, label)
    for line_id, solid in ((view.selected_line, False), (view.loop_line, True)):
        if line_id is None:
            continue
        p.setPen(QPen(accent, 2, Qt.PenStyle.SolidLine if solid else Qt.PenStyle.DashLine))
        p.setBrush(Qt.BrushStyle.NoBrush)
        for x0, x1 in line_spans(view, [line_id]):
            p.drawRect(QRectF(x0, TOP, max(x1 - x0, 1.0), bottom - TOP).adjusted(1, 1, -1, -1))


def ruler_marks(view: WaveformView, w: int) -> list[tuple[float, QRectF, str]]:
    """The ruler's ticks: (x of the tick, the rectangle of its label, the label). A label sits right of
    its tick, or left of it where the right would leave the view (the last one), never clipped; a label that
    would then touch the one before it, or start left of the view, is left out (an empty rectangle at its
    tick, no text): its tick alone still marks the time."""
    metrics = view.fontMetrics()
    seconds_visible = view.visible / SAMPLE_RATE
    steps = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600)
    step = next((s for s in steps if seconds_visible / s <= max(w / 70, 1)), 7200)
    first = np.ceil(view.origin / SAMPLE_RATE / step) * step
    marks = []
    shown_to = -LABEL_GAP  # the right edge of the last label kept
    t = float(first)
    while t * SAMPLE_RATE <= view.origin + view.visible:
        x = view.x_of(t * SAMPLE_RATE)
        if step < 1:
            text = f"{int(t // 60)}:{t % 60:04.1f}"
        elif t >= 3600:
            text = f"{int(t // 3600)}:{int(t % 3600 // 60):02d}:{int(round(t % 60)):02d}"
        else:
            text = f"{int(t // 60)}:{int(round(t % 60)):02d}"
        width = metrics.horizontalAdvance(text) + 2
        left = x + 3 if x + 3 + width <= w else x - 3 - width
        if left < shown_to + LABEL_GAP:
            marks.append((x, QRectF(x, 0, 0, 0), ""))
        else:
            marks.append((x, QRectF(left, 0, width, RULER - 1), text))
            shown_to = left + width
        t += step
    return marks


def _draw_ruler(view: WaveformView, p: QPainter, w: int, bottom: float, grid: QColor, muted: QColor) -> None:
    """The ruler strip under the waveform, drawn once per view (origin, zoom, size, colours) and kept."""
    key = (view.origin, view.samples_per_pixel, w, bottom, grid.rgba(), muted.rgba(), view.devicePixelRatioF())
    cached = view.ruler_cache
    if cached is None or cached[0] != key:
        ratio = view.devicePixelRatioF()
        pix = QPixmap(int(w * ratio), int((RULER + 1) * ratio))
        pix.setDevicePixelRatio(ratio)
        pix.fill(Qt.GlobalColor.transparent)
        q = QPainter(pix)
        q.setPen(QPen(grid, 1))
        q.drawLine(QPointF(0, 0.5), QPointF(w, 0.5))
        for x, rect, text in ruler_marks(view, w):
            q.setPen(QPen(grid, 1))
            q.drawLine(QPointF(x, 0), QPointF(x, 4))
            q.setPen(muted)
            q.drawText(rect.translated(0, 1), Qt.AlignmentFlag.AlignLeft, text)
        q.end()
        cached = view.ruler_cache = (key, pix)
    p.drawPixmap(QPointF(0, bottom - 0.5), cached[1])


def line_spans(view: WaveformView, line_ids: Collection[str]) -> list[tuple[float, float]]:
    """Pixel spans of these lines (a few: the selected, the heard, the looped one) where on screen."""
    layout = view.timeline.layout
    return _spans(view, np.asarray(sorted(i for line_id in line_ids if (i := layout.index.get(line_id)) is not None),
                                   np.int64))


def flag_spans(view: WaveformView, flags: TrackFlags) -> list[tuple[float, float]]:
    """Pixel spans of the flagged lines on screen, merged (at most one a pixel, however many lines)."""
    layout = view.timeline.layout
    flags.sync(layout)
    shown = visible_tracks(layout, view.origin, view.origin + view.visible)
    return _spans(view, np.nonzero(flags.flags[shown.start:shown.stop])[0] + shown.start)


def _spans(view: WaveformView, idx: np.ndarray) -> list[tuple[float, float]]:
    if not len(idx):
        return []
    layout = view.timeline.layout
    starts = layout.starts[idx].astype(np.float64)
    ends = track_ends(layout, view.timeline.gap, idx).astype(np.float64)
    spp, origin = view.samples_per_pixel, view.origin
    return runs((starts - origin) / spp, (ends - origin) / spp, view.width())
