"""The waveform's pixels, vectorised: the peak of each pixel column and the image of a run of columns,
with no Python loop over lines or columns (numpy; colours are opaque 0xAARRGGBB values, the layout of Qt's
ARGB32 images, so the image is drawn without a conversion)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from s2studio.audio.timeline import PEAK_BIN, Layout, Track

MIN_WIDTH_TO_DRAW = 0.25
"""Half-heights below this (in pixels) draw nothing but the centre line."""


def edges_of(origin: float, spp: float, x0: int, x1: int) -> npt.NDArray[np.float64]:
    """Timeline samples at the left edge of columns x0..x1 (x1 - x0 + 1 values)."""
    return origin + np.arange(x0, x1 + 1, dtype=np.float64) * spp


def track_columns(track: Track, start: int, edges: npt.NDArray[np.float64], spp: float) -> npt.NDArray[np.float32]:
    """Peak (0..1) of one line's audio (starting at timeline sample `start`) in each column between `edges`:
    from its peaks when a column spans a bin or more, else from its samples on screen (zoomed in)."""
    n = track.length
    e = np.clip(edges - start, 0, n).astype(np.int64)
    if spp >= PEAK_BIN:
        values = track.peaks()
        lo, hi = e[:-1] // PEAK_BIN, -(-e[1:] // PEAK_BIN)
    else:
        first = int(e[0])
        values = np.abs(track.read(first, int(e[-1]) - first))
        lo, hi = e[:-1] - first, e[1:] - first
    values = np.append(values, np.float32(0))  # a zero past the end, so every index is in range
    last = len(values) - 1
    lo = np.minimum(lo, last)
    hi = np.minimum(np.maximum(hi, lo + 1), last)
    pairs = np.empty(2 * len(lo), np.int64)
    pairs[0::2], pairs[1::2] = lo, hi
    out = np.maximum.reduceat(values, pairs)[0::2] if len(pairs) else np.zeros(0, np.float32)
    out[(e[:-1] >= n) | (e[1:] <= 0)] = 0.0
    return np.minimum(out, 1.0)


def visible_tracks(layout: Layout, lo: float, hi: float) -> range:
    """Indices of the layout's tracks that may overlap samples [lo, hi)."""
    first = max(int(np.searchsorted(layout.starts, lo, side="right")) - 1, 0)
    last = int(np.searchsorted(layout.starts, hi, side="right"))
    return range(first, min(last, len(layout.tracks)))


def track_ends(layout: Layout, gap: int, idx: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """End samples of the tracks at `idx` (sorted), vectorised: a track ends a gap before the next begins."""
    ends = np.empty(len(idx), np.int64)
    n = len(layout.tracks)
    inner = idx < n - 1
    ends[inner] = layout.starts[idx[inner] + 1] - gap
    if len(idx) and idx[-1] == n - 1:
        ends[-1] = int(layout.starts[-1]) + layout.tracks[-1].length
    return ends


def paint_columns(image: npt.NDArray[np.uint32], x0: int, amps: npt.NDArray[np.float32],
                  colours: npt.NDArray[np.uint32], top: int, bottom: int, background: int, faint: int,
                  line_until: float) -> None:
    """Columns x0.. of `image` (rows × columns of 0xAARRGGBB): a bar of half-height `amps` (0..1 of the band
    between `top` and `bottom`) in each column's colour, the centre line up to x `line_until`, the rest
    background."""
    count = len(amps)
    if count == 0:
        return
    block = image[:, x0:x0 + count]
    block[:] = background
    mid = (top + bottom) / 2
    half = (bottom - top) / 2 - 2
    rows = np.arange(top, bottom, dtype=np.float32)[:, None] + 0.5
    reach = amps[None, :] * half
    xs = np.arange(x0, x0 + count)
    centre = int(mid)
    block[centre, xs < line_until] = faint
    mask = (np.abs(rows - mid) <= np.maximum(reach, 0.5)) & (reach > MIN_WIDTH_TO_DRAW)
    band = block[top:bottom]
    band[mask] = np.broadcast_to(colours[None, :], (bottom - top, count))[mask]


def runs(x0: npt.NDArray[np.float64], x1: npt.NDArray[np.float64], width: int) -> list[tuple[float, float]]:
    """Pixel spans [x0, x1) merged where they touch or overlap (within a pixel) and clipped to the view:
    what to fill for a set of lines, at most one span per pixel however many lines."""
    if len(x0) == 0:
        return []
    order = np.argsort(x0, kind="stable")
    a, b = np.clip(x0[order], 0, width), np.clip(np.maximum(x1[order], x0[order] + 1), 0, width)
    reach = np.maximum.accumulate(b)
    starts = np.concatenate([[True], a[1:] > reach[:-1] + 1])
    lo = a[starts]
    hi = np.maximum.reduceat(b, np.nonzero(starts)[0])
    return [(float(x), float(y)) for x, y in zip(lo, hi, strict=True) if y > x]
