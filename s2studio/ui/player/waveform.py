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

import weakref
from collections.abc import Callable, Collection, Mapping
from time import perf_counter

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QImage, QMouseEvent, QPainter, QPaintEvent, QPalette, QPen, QPixmap, QWheelEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

from s2studio.audio.timeline import Timeline
from s2studio.state.script import Script
from s2studio.ui.control.slices import pass_budget
from s2studio.ui.player.timeline_peaks import TimelinePeaks
from s2studio.ui.player.track_flags import TrackFlags
from s2studio.ui.player.waveform_image import WaveformImage
from s2studio.ui.player.waveform_range import MIN_SPAN, ZOOM_STEP, ViewRange
from s2studio.ui.player.waveform_marks import RULER, TOP, draw_marks, ruler_marks


MAX_REPAINT_HZ = 10
REPAINT_SHARE = 0.2
"""At most this share of the window's thread goes to repainting the timeline as it changes: a view that takes
longer to compose (a whole book fitted) is repainted less often than `MAX_REPAINT_HZ`."""


class WaveformView(ViewRange, QWidget):
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
        self._rendering_lines: Callable[[], Collection[str]] | None = lambda: ()
        self.stale_flags = TrackFlags(lambda line_id: line_id in self._stale, lambda: self._stale)
        self.rendering_flags = TrackFlags(lambda line_id: self._rendering(line_id), lambda: self._rendering_now())
        ready = weakref.WeakMethod(self._emit_peaks_ready)  # the worker holds the peaks: never this widget
        self.image = WaveformImage(TimelinePeaks(on_ready=lambda: (emit := ready()) is not None and emit()), TOP, RULER)
        self._peaks_ready.connect(self.refresh)
        self._composed: QPixmap | None = None
        """The image with the marks over it, drawn again when either changed (the playhead goes on top)."""
        self.ruler_cache: tuple[tuple, QPixmap] | None = None
        self._throttle = QTimer(self, singleShot=True, interval=1000 // MAX_REPAINT_HZ)
        self._throttle.timeout.connect(self._throttled)
        self._waiting = False
        self._recompose = False
        """The timeline changed since `_composed` was composed: a turn of the pass budget composes it again."""

    # -- the view --------------------------------------------------------------------------------

    @property
    def peaks(self) -> TimelinePeaks:
        return self.image.peaks

    @property
    def columns_drawn(self) -> int:
        """Pixel columns of the waveform computed, counted (what a change cost)."""
        return self.image.columns_drawn

    @property
    def selected_line(self) -> str | None:
        return self._selected

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

    def speaker_of(self, line_id: str) -> str:
        return self._speaker_of.get(line_id, "")

    def speaker_colour(self, speaker: str) -> QColor | None:
        return self._colours.get(speaker)

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
        """Composed again in a turn of the window's pass budget (`ui.control.slices`), not in the paint that
        follows: a pass that took in the takes that moved the timeline leaves it to the next (the picture on
        screen until then is the last one composed)."""
        if not self._fit:
            lo, hi = self.range()
            self._origin = min(max(self._origin, lo), max(float(lo), hi - self.visible))
        self._recompose = True
        pass_budget().ask(self._compose_turn)
        self.view_changed.emit()

    def _compose_turn(self, _until: float) -> None:
        if not self._recompose:
            return
        if self._composed is not None and self.isVisible():
            self._composed = self._compose()
        else:  # hidden (composed when next shown) or already to compose at the next paint
            self._composed = None
        self._recompose = False
        self.update()

    def set_labels(self, script: Script, colours: Mapping[str, QColor], changed: Collection[str] | None = None) -> None:
        """Each line's speaker and each speaker's colour; `changed`: the only lines whose speaker may have
        changed (None: any)."""
        colours = dict(colours)
        if changed is None or colours != self._colours:
            self._speaker_of = dict(zip(script.line_ids, script.line_speakers, strict=True))
            self._colours = colours
            self.image.forget()
        else:
            for line_id in changed:
                line = script.line(line_id)
                if line is not None and self._speaker_of.get(line_id) != line.speaker:
                    self._speaker_of[line_id] = line.speaker
                    if (bounds := self.timeline.layout.bounds(line_id)) is not None:
                        self.image.damage(*bounds)
        self._composed = None
        self.update()

    def set_stale(self, stale: Collection[str], changed: Collection[str] | None = None) -> None:
        """The lines whose picked take is stale (hatched); `changed`: those that entered or left it."""
        self._stale = stale
        layout = self.timeline.layout
        self.stale_flags.update(changed)
        if changed is None or any(i in layout.index for i in changed):
            self.refresh()

    def set_rendering(self, rendering: Callable[[str], bool], busy: Callable[[], bool] | None = None,
                      lines: Callable[[], Collection[str]] | None = None) -> None:
        """How to tell a line being rendered (the render session's `rendering`), whether a render runs, and the
        lines being rendered (`lines`, if known: what a layout laid out afresh looks up)."""
        self._rendering = rendering
        self._busy = busy or (lambda: False)
        self._rendering_lines = lines
        self.rendering_flags.update(None)

    def _rendering_now(self) -> Collection[str] | None:
        return self._rendering_lines() if self._rendering_lines is not None else None

    def rendering_changed(self, line_ids: Collection[str]) -> None:
        """These lines started or stopped rendering (a render's start: all of its lines, once); repainted as
        `refresh` repaints (a render ends a line many times a second)."""
        self.rendering_flags.update(line_ids)
        self.refresh()

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
        self._composed = None
        self.image.forget()
        super().changeEvent(event)

    # -- painting --------------------------------------------------------------------------------

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        if self._composed is None or self._composed.size() != self.size() * self.devicePixelRatioF():
            self._composed = self._compose()
            self._recompose = False
        p = QPainter(self)
        p.drawPixmap(0, 0, self._composed)
        x = self.x_of(self._playhead)
        if 0 <= x <= self.width():
            p.setPen(QPen(self.palette().color(QPalette.ColorRole.Highlight), 2))
            p.drawLine(QPointF(x, 0), QPointF(x, self.height() - RULER))
        p.end()

    def _compose(self) -> QPixmap:
        started = perf_counter()
        pix = self._composed_now()
        took_ms = 1000 * (perf_counter() - started)
        self._throttle.setInterval(min(max(1000 // MAX_REPAINT_HZ, round(took_ms / REPAINT_SHARE)), 1000))
        return pix

    def _composed_now(self) -> QPixmap:
        image = self.image.update(self)
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
