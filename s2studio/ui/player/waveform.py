"""The waveform of the timeline: each line in its speaker's colour, stale lines hatched, the lines being
rendered marked, the rendered-up-to marker, the playhead; zoom (Ctrl+wheel, +/−, fit) and horizontal
scroll; a click seeks and selects the line under it. Its range is the whole timeline or one chapter's lines
(`set_scope`).

What it draws costs the pixels that changed, not the lines of the script (a book has 10,000):

- the waveform itself is an image of pixel columns, each column's peak found in one vectorised pass over
  the whole timeline's packed peaks (`timeline_peaks`) or, zoomed in, over the few lines on screen
  (`Track.peaks`, `Track.read`); when the timeline changes it redraws only the columns that moved: the new
  tail while a line streams in, the span of a swapped take (to the end when its length changed);
- the marks over it (stale, rendering, the selected, heard and looped line, names, separators) are drawn
  from the lines concerned only, names and separators only where a line is wide enough to show them;
- the playhead is drawn over the cached result at every frame;
- changes of the timeline repaint at most `MAX_REPAINT_HZ` times a second (a render sends a chunk every
  few milliseconds).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QImage, QMouseEvent, QPainter, QPaintEvent, QPalette, QPen, QPixmap, QWheelEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

from s2studio.audio.timeline import Layout, Timeline
from s2studio.engine.api import SAMPLE_RATE
from s2studio.state.script import Script
from s2studio.ui.player.timeline_peaks import BINS, TimelinePeaks, common_ends
from s2studio.ui.player.waveform_marks import RULER, TOP, draw_marks, ruler_marks
from s2studio.ui.player.track_flags import TrackFlags
from s2studio.ui.player.waveform_paint import (edges_of, paint_columns, runs, track_columns, track_ends,
                                               visible_tracks)

MIN_SPAN = SAMPLE_RATE * 8
"""Fitted, the view spans at least this much, so the first chunks of a render do not fill the width."""
MIN_SAMPLES_PER_PIXEL = 2.0
ZOOM_STEP = 1.5
MAX_REPAINT_HZ = 10


def _argb(colour: QColor) -> int:
    """The colour, opaque, as a pixel of an ARGB32 image."""
    return 0xFF000000 | (colour.rgb() & 0xFFFFFF)


class WaveformView(QWidget):
    seek_requested = Signal(int)
    """A click asks to move the playhead to this sample."""
    line_clicked = Signal(str)
    """A click landed on this line's audio (or the gap after it)."""
    view_changed = Signal()
    """The visible range or the zoom changed (the scroll bar follows)."""
    _peaks_ready = Signal()

    def __init__(self, timeline: Timeline, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("waveform")
        self.setAccessibleName("Waveform of the script: click a line to select it; Ctrl+wheel zooms")
        self.setMinimumHeight(90)
        self.setMinimumWidth(120)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.timeline = timeline
        self._playhead = 0
        self._current: str | None = None
        self._selected: str | None = None
        self._loop: str | None = None
        self._speaker_of: dict[str, str] = {}
        self._colours: dict[str, QColor] = {}
        self._stale: Collection[str] = frozenset()
        self._rendering: Callable[[str], bool] = lambda _line: False
        self._busy: Callable[[], bool] = lambda: False
        self._scope: tuple[str, ...] | None = None
        self._fit = True
        self._spp = MIN_SPAN / 1000
        self._origin = 0.0
        self._grown_span = 0
        """Fitted while the timeline grows: the span shown, widened in steps (not at every chunk)."""
        self.follow = True
        """Keep the playhead in view while it moves (page by page)."""
        self.stale_flags = TrackFlags(lambda line_id: line_id in self._stale)
        self.rendering_flags = TrackFlags(lambda line_id: self._rendering(line_id))
        self.peaks = TimelinePeaks(on_ready=self._emit_peaks_ready)
        self._peaks_ready.connect(self.refresh)
        self._image: np.ndarray | None = None
        """The waveform's pixels (rows × columns of 0xAARRGGBB), for `_image_key`."""
        self._image_key: tuple = ()
        self._drawn: tuple[Layout, int] | None = None
        """The layout the image shows, and the length its last line had then."""
        self._damage: list[tuple[float, float]] = []
        """Sample ranges whose columns must be drawn again (colours of lines that changed)."""
        self._composed: QPixmap | None = None
        self.ruler_cache: tuple[tuple, QPixmap] | None = None
        self.columns_drawn = 0
        """Pixel columns of the waveform computed, counted (what a change cost)."""
        self._throttle = QTimer(self, singleShot=True, interval=1000 // MAX_REPAINT_HZ)
        self._throttle.timeout.connect(self._throttled)
        self._waiting = False

    # -- the view --------------------------------------------------------------------------------

    @property
    def samples_per_pixel(self) -> float:
        return self._fit_spp() if self._fit else self._spp

    @property
    def origin(self) -> int:
        """The sample at the left edge."""
        return self.range()[0] if self._fit else int(self._origin)

    @property
    def visible(self) -> int:
        """Samples across the width."""
        return int(self.samples_per_pixel * max(1, self.width()))

    @property
    def fitted(self) -> bool:
        return self._fit

    @property
    def selected_line(self) -> str | None:
        return self._selected

    @property
    def scope(self) -> tuple[str, ...] | None:
        """The lines the view is limited to (a chapter's), None for the whole timeline."""
        return self._scope

    @property
    def stale_lines(self) -> frozenset[str]:
        """Lines drawn stale (hatched)."""
        return frozenset(i for i in self._stale if i in self.timeline.layout.index)

    @property
    def rendering_lines(self) -> frozenset[str]:
        """Lines drawn as being rendered."""
        layout = self.timeline.layout
        self.rendering_flags.sync(layout)
        return frozenset(layout.tracks[i].line_id for i in np.nonzero(self.rendering_flags.flags)[0])

    @property
    def current_line(self) -> str | None:
        return self._current

    @property
    def loop_line(self) -> str | None:
        return self._loop

    @property
    def stale_set(self) -> Collection[str]:
        return self._stale

    def is_rendering(self, line_id: str) -> bool:
        return self._rendering(line_id)

    def busy(self) -> bool:
        """A render is running (lines may be marked as rendering)."""
        return self._busy()

    def speaker_of(self, line_id: str) -> str:
        return self._speaker_of.get(line_id, "")

    def colour_of(self, line_id: str) -> QColor | None:
        """The colour the line's speaker is drawn in."""
        return self._colours.get(self._speaker_of.get(line_id, ""))

    def notice(self) -> str:
        """What the view says instead of a waveform, if anything."""
        if self._scope is not None and self.range() == (0, 0):
            return "No audio in this chapter yet: render it to hear and see it."
        if self.peaks.pending:
            return "Drawing the waveform…"
        return ""

    def ruler_marks(self, w: int) -> list[tuple[float, QRectF, str]]:
        return ruler_marks(self, w)

    def range(self) -> tuple[int, int]:
        """Samples [lo, hi) the view can show: the timeline, or the scope's lines."""
        layout = self.timeline.layout
        if self._scope is None:
            return 0, layout.end
        at = [i for line_id in self._scope if (i := layout.index.get(line_id)) is not None]
        if not at:
            return 0, 0
        first, last = min(at), max(at)
        return int(layout.starts[first]), int(layout.starts[last]) + layout.tracks[last].length

    def span(self) -> int:
        """Samples the scroll bar covers: the range, or the view when that is longer."""
        lo, hi = self.range()
        return max(hi - lo, self.visible)

    def _fit_spp(self) -> float:
        lo, hi = self.range()
        length = hi - lo
        if self._scope is None and (self.timeline.layout.growing or (self._grown_span and self._busy())):
            # grown in steps while a render appends lines (between two lines too), not at every chunk
            if not self._grown_span or length * 1.05 > self._grown_span or self._grown_span > max(MIN_SPAN, length * 4):
                self._grown_span = max(MIN_SPAN, int(length * 1.5))
            span = self._grown_span
        else:
            self._grown_span = 0
            span = MIN_SPAN if length == 0 else int(length * 1.01) + 1
        return span / max(1, self.width())

    def x_of(self, sample: float) -> float:
        return (sample - self.origin) / self.samples_per_pixel

    def sample_at(self, x: float) -> int:
        return max(0, int(round(self.origin + x * self.samples_per_pixel)))

    def zoom(self, factor: float, anchor_x: float | None = None) -> None:
        """Samples per pixel times 1/`factor` (> 1 zooms in), keeping the sample under `anchor_x` (the
        playhead when it is on screen, else the middle) where it is."""
        if anchor_x is None:
            px = self.x_of(self._playhead)
            anchor_x = px if 0 <= px <= self.width() else self.width() / 2
        anchor = self.origin + anchor_x * self.samples_per_pixel
        widest = max(self._fit_spp(), MIN_SAMPLES_PER_PIXEL)
        spp = min(max(self.samples_per_pixel / factor, MIN_SAMPLES_PER_PIXEL), widest)
        if spp >= widest and factor < 1:
            self.fit()
            return
        self._fit, self._spp = False, spp
        self._set_origin(anchor - anchor_x * spp)

    def zoom_in(self) -> None:
        self.zoom(ZOOM_STEP)

    def zoom_out(self) -> None:
        self.zoom(1 / ZOOM_STEP)

    def fit(self) -> None:
        """The whole range across the width (and it stays fitted while it grows)."""
        self._fit, self._origin = True, float(self.range()[0])
        self._changed()

    def set_scope(self, line_ids: Sequence[str] | None) -> None:
        """Show only these lines' stretch of the timeline (a chapter), or the whole timeline (None)."""
        self._scope = tuple(line_ids) if line_ids is not None else None
        self.fit()

    def scroll_to(self, sample: int) -> None:
        """Put `sample` at the left edge (zoomed in; fitted there is nothing to scroll)."""
        if not self._fit:
            self._set_origin(sample)

    def ensure_visible(self, sample: int, margin: float = 0.1) -> None:
        """Scroll so that `sample` is on screen, a page at a time (as a DAW follows its playhead)."""
        if self._fit:
            return
        left, width = self.origin, self.visible
        if not left + width * margin <= sample <= left + width * (1 - margin):
            self._set_origin(sample - width * margin)

    def _set_origin(self, origin: float) -> None:
        lo, hi = self.range()
        self._origin = min(max(origin, float(lo)), max(float(lo), hi - self.visible))
        self._changed()

    def _changed(self) -> None:
        self._composed = None
        self.update()
        self.view_changed.emit()

    # -- what to draw ----------------------------------------------------------------------------

    def refresh(self, lines_moved: bool = True) -> None:
        """The timeline changed (lines moved, a take swapped, the streaming line grew): repainted at most
        `MAX_REPAINT_HZ` times a second, the columns that changed only."""
        del lines_moved  # what changed is found by comparing layouts
        if self._throttle.isActive():
            self._waiting = True
            return
        self._repaint_timeline()
        self._throttle.start()

    def _throttled(self) -> None:
        if self._waiting:
            self._waiting = False
            self._repaint_timeline()
            self._throttle.start()

    def _repaint_timeline(self) -> None:
        if not self._fit:
            lo, hi = self.range()
            self._origin = min(max(self._origin, lo), max(float(lo), hi - self.visible))
        self._composed = None
        self.update()
        self.view_changed.emit()

    def set_labels(self, script: Script, colours: Mapping[str, QColor], changed: Collection[str] | None = None) -> None:
        """Each line's speaker and each speaker's colour; `changed`: the only lines whose speaker may have
        changed (None: any)."""
        colours = dict(colours)
        if changed is None or colours != self._colours:
            self._speaker_of = dict(zip(script.line_ids, script.line_speakers, strict=True))
            self._colours = colours
            self._image_key = ()
        else:
            for line_id in changed:
                line = script.line(line_id)
                if line is not None and self._speaker_of.get(line_id) != line.speaker:
                    self._speaker_of[line_id] = line.speaker
                    if (bounds := self.timeline.layout.bounds(line_id)) is not None:
                        self._damage.append(bounds)
        self._composed = None
        self.update()

    def set_stale(self, stale: Collection[str], changed: Collection[str] | None = None) -> None:
        """The lines whose picked take is stale (hatched); `changed`: those that entered or left it."""
        self._stale = stale
        layout = self.timeline.layout
        self.stale_flags.update(layout, changed)
        if changed is None or any(i in layout.index for i in changed):
            self._composed = None
            self.update()

    def set_rendering(self, rendering: Callable[[str], bool], busy: Callable[[], bool] | None = None) -> None:
        """How to tell a line being rendered (the render session's `rendering`), and whether a render runs."""
        self._rendering = rendering
        self._busy = busy or (lambda: False)
        self.rendering_flags.update(self.timeline.layout, None)

    def rendering_changed(self, line_ids: Collection[str]) -> None:
        """These lines started or stopped rendering (a render's start: all of its lines, once)."""
        self.rendering_flags.update(self.timeline.layout, line_ids)
        self._composed = None
        self.update()
        self.view_changed.emit()

    def set_follow(self, on: bool) -> None:
        self.follow = on

    def set_playhead(self, sample: int, moving: bool = False) -> None:
        """The playhead; `moving` (playing): the view follows it when `follow` is on."""
        self._playhead = sample
        if moving and self.follow:
            self.ensure_visible(sample)
        self.update()

    def set_current_line(self, line_id: str | None) -> None:
        """The line being heard."""
        if line_id != self._current:
            self._current = line_id
            self._composed = None
            self.update()

    def set_selected_line(self, line_id: str | None) -> None:
        """The line selected in the editor: outlined, and scrolled into view when none of it is in view (a line
        clicked here, or longer than the view, stays where it is)."""
        if line_id != self._selected:
            self._selected = line_id
            bounds = self.timeline.layout.bounds(line_id) if line_id else None
            if bounds is not None and not self._fit:
                if bounds[1] <= self.origin or self.origin + self.visible <= bounds[0]:
                    self._set_origin(bounds[0] - self.visible * 0.1)
            self._composed = None
            self.update()

    def set_loop_line(self, line_id: str | None) -> None:
        if line_id != self._loop:
            self._loop = line_id
            self._composed = None
            self.update()

    def _emit_peaks_ready(self) -> None:
        try:
            self._peaks_ready.emit()
        except RuntimeError:  # the window closed while the worker summarised
            pass

    # -- input -----------------------------------------------------------------------------------

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt override
        if event.button() != Qt.MouseButton.LeftButton:
            return
        self.setFocus(Qt.FocusReason.MouseFocusReason)
        sample = self.sample_at(event.position().x())
        line_id = self.timeline.layout.line_at(sample)
        self.seek_requested.emit(min(sample, self.timeline.layout.end))
        if line_id is not None:
            self.line_clicked.emit(line_id)

    def wheelEvent(self, event: QWheelEvent) -> None:  # noqa: N802 - Qt override
        steps = event.angleDelta().y() / 120 or event.angleDelta().x() / 120
        if not steps:
            return
        if event.modifiers() & Qt.KeyboardModifier.ControlModifier:
            self.zoom(ZOOM_STEP ** steps, event.position().x())
        elif not self._fit:
            self._set_origin(self._origin - steps * self.visible / 8)
        event.accept()

    def resizeEvent(self, event) -> None:  # noqa: ANN001, N802 - Qt override
        self._composed = None
        super().resizeEvent(event)
        self.view_changed.emit()

    def changeEvent(self, event) -> None:  # noqa: ANN001, N802 - Qt override: palette switches
        self._composed, self._image_key = None, ()
        super().changeEvent(event)

    # -- painting --------------------------------------------------------------------------------

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        if self._composed is None or self._composed.size() != self.size() * self.devicePixelRatioF():
            self._composed = self._compose()
        p = QPainter(self)
        p.drawPixmap(0, 0, self._composed)
        x = self.x_of(self._playhead)
        if 0 <= x <= self.width():
            p.setPen(QPen(self.palette().color(QPalette.ColorRole.Highlight), 2))
            p.drawLine(QPointF(x, 0), QPointF(x, self.height() - RULER))
        p.end()

    def _compose(self) -> QPixmap:
        image = self._update_image()
        ratio = self.devicePixelRatioF()
        pix = QPixmap(self.size() * ratio)
        pix.setDevicePixelRatio(ratio)
        pix.fill(self.palette().color(QPalette.ColorRole.Base))
        p = QPainter(pix)
        h, w = image.shape[:2]
        p.drawImage(QRectF(0, 0, w, h), QImage(image.data, w, h, 4 * w, QImage.Format.Format_ARGB32_Premultiplied))
        draw_marks(self, p)
        p.end()
        return pix

    def _update_image(self) -> np.ndarray:
        """The waveform's pixels, redrawn where the timeline changed since they were drawn."""
        layout = self.timeline.layout
        w, h = max(1, self.width()), max(1, self.height())
        spp, origin = self.samples_per_pixel, self.origin
        pal = self.palette()
        key = (w, h, spp, origin, pal.color(QPalette.ColorRole.Base).rgba(), pal.color(QPalette.ColorRole.Text).rgba())
        changed = self.peaks.sync(layout)
        if key != self._image_key or self._image is None:
            self._image = np.empty((h, w), np.uint32)
            self._image_key = key
            self._damage.clear()
            self._draw_columns(0, w)
        else:
            spans = self._layout_damage(layout)
            if changed is not None and changed[1] > changed[0] and len(layout.tracks):
                i, j = changed
                spans.append((int(layout.starts[i]), int(layout.starts[j - 1]) + layout.tracks[j - 1].length))
            spans += self._damage
            self._damage.clear()
            columns = [(max(int(np.floor(self.x_of(a))) - 1, 0), min(int(np.ceil(self.x_of(b))) + 2, w))
                       for a, b in spans]
            for x0, x1 in _merged(columns):
                self._draw_columns(x0, x1)
        self._drawn = (layout, layout.tracks[-1].length if layout.tracks else 0)
        return self._image

    def _layout_damage(self, layout: Layout) -> list[tuple[float, float]]:
        """Sample ranges where `layout` differs from the one drawn."""
        if self._drawn is None:
            return [(0, max(layout.end, 1))]
        old, old_last = self._drawn
        if old is layout:
            if layout.tracks and layout.tracks[-1].length != old_last:
                end = int(layout.starts[-1])
                return [(end + min(old_last, layout.tracks[-1].length), layout.end)]
            return []
        a, b = len(old.tracks), len(layout.tracks)
        p, s = common_ends(old.tracks, layout.tracks)
        if b and layout.tracks[-1].length != old_last and old.tracks and old.tracks[-1] is layout.tracks[-1]:
            p, s = min(p, b - 1), max(s - 1, 0)  # the last line grew since it was drawn
        moved = np.nonzero(old.starts[:p] != layout.starts[:p])[0]
        p = int(moved[0]) if len(moved) else p
        moved = np.nonzero(old.starts[a - s:] != layout.starts[b - s:])[0] if s else moved[:0]
        s = s - int(moved[-1]) - 1 if len(moved) else s
        lo = min(_start(old, p), _start(layout, p))
        hi = max(_end(old, a - s - 1), _end(layout, b - s - 1))
        return [(lo, hi)] if hi > lo else []

    def _draw_columns(self, x0: int, x1: int) -> None:
        layout, image = self.timeline.layout, self._image
        spp, origin = self.samples_per_pixel, self.origin
        edges = edges_of(origin, spp, x0, x1)
        if spp >= BINS[0]:
            amps, at = self.peaks.columns(layout, edges, spp)
            if layout.growing:  # the line streaming in is not packed: drawn from its track
                amps = np.maximum(amps, track_columns(layout.tracks[-1], int(layout.starts[-1]), edges, spp))
        else:
            amps = np.zeros(x1 - x0, np.float32)
            for i in visible_tracks(layout, edges[0], edges[-1]):
                amps = np.maximum(amps, track_columns(layout.tracks[i], int(layout.starts[i]), edges, spp))
            at = np.searchsorted(layout.starts, (edges[:-1] + edges[1:]) / 2, side="right") - 1
        text = self.palette().color(QPalette.ColorRole.Text)
        palette: dict[str, int] = {}
        pixel = np.empty(len(layout.tracks) + 1, np.uint32)  # by track index (+1: -1 before the first)
        shown = np.unique(at)
        for i in shown:
            speaker = self._speaker_of.get(layout.tracks[i].line_id, "") if i >= 0 else ""
            argb = palette.get(speaker)
            if argb is None:
                argb = palette[speaker] = _argb(self._colours.get(speaker, text))
            pixel[i + 1] = argb
        colours = pixel[at + 1]
        faint = QColor(text)
        faint.setAlpha(40)
        base = self.palette().color(QPalette.ColorRole.Base)
        bottom = self.height() - RULER
        paint_columns(image, x0, amps, colours, TOP, max(bottom, TOP + 1), _argb(base), _blend(faint, base),
                      self.x_of(layout.end))
        self.columns_drawn += x1 - x0

    def line_spans(self, line_ids: Collection[str]) -> list[tuple[float, float]]:
        """Pixel spans of these lines (a few: the selected, the heard, the looped one) where on screen."""
        layout = self.timeline.layout
        idx = sorted(i for line_id in line_ids if (i := layout.index.get(line_id)) is not None)
        return self._spans(np.asarray(idx, np.int64))

    def flag_spans(self, flags: TrackFlags) -> list[tuple[float, float]]:
        """Pixel spans of the flagged lines on screen, merged (at most one a pixel, however many lines)."""
        layout = self.timeline.layout
        flags.sync(layout)
        shown = visible_tracks(layout, self.origin, self.origin + self.visible)
        return self._spans(np.nonzero(flags.flags[shown.start:shown.stop])[0] + shown.start)

    def _spans(self, idx: np.ndarray) -> list[tuple[float, float]]:
        if not len(idx):
            return []
        layout = self.timeline.layout
        starts = layout.starts[idx].astype(np.float64)
        ends = track_ends(layout, self.timeline.gap, idx).astype(np.float64)
        spp, origin = self.samples_per_pixel, self.origin
        return runs((starts - origin) / spp, (ends - origin) / spp, self.width())


def _start(layout: Layout, i: int) -> float:
    if i < len(layout.tracks):
        return float(layout.starts[i])
    return float(layout.end)


def _end(layout: Layout, i: int) -> float:
    if 0 <= i < len(layout.tracks):
        return float(layout.starts[i]) + layout.tracks[i].length
    return 0.0


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Column ranges merged where they overlap or touch (each column drawn once)."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _blend(colour: QColor, base: QColor) -> int:
    """`colour` over `base`, opaque, as an ARGB32 pixel."""
    a = colour.alphaF()
    r, g, b = (round(a * c + (1 - a) * d) for c, d in ((colour.red(), base.red()), (colour.green(), base.green()),
                                                      (colour.blue(), base.blue())))
    return 0xFF000000 | (r << 16) | (g << 8) | b
