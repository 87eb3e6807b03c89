"""A take's audio where it lives: in memory while the take is new, then in its FLAC file, decoded in blocks
on demand (design.md §6, §7).

A book of 10,000 lines is about 11 hours of audio: 6–7 GB as float32, far more than a studio may hold. So a
take whose file is written keeps only its peaks (`PEAK_BIN` samples per value, stored beside the take, so
drawing never decodes) and reads its samples through one process-wide `BlockCache`: blocks of `BLOCK`
samples decoded on demand, the least recently used dropped when the cache is over its budget. Whoever reads
decides how: `read`/`read_into(wait=True)` decode what is missing (the GUI zoomed in, export, a take's whole
audio); `read_into(wait=False)` never decodes (the player's audio callback, which must not block), and
`prefetch` decodes ahead of the playhead on the player's own thread and pins those blocks, so the callback
finds them.

A take is immutable, so its blocks never go stale: a block is keyed by its `TakeSound` and its index.
"""

from __future__ import annotations

import io
import itertools
import logging
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import soundfile as sf

from s2studio.errors import UserError, printable
from s2studio.state.disk import OPEN_FLAGS
from s2studio.state.codes import npy_header

log = logging.getLogger(__name__)

Audio = npt.NDArray[np.float32]

BLOCK = 1 << 16
"""Samples a decoded block holds (1.5 s, 256 KB): about a FLAC seek's worth of work per block."""
PEAK_BIN = 256
"""Samples per value of a take's peaks (and of `Track.peaks`): what a view draws from when a pixel spans a bin
or more."""
CACHE_BYTES = 96 << 20
"""Decoded audio the process keeps (about 9 minutes), beyond the blocks pinned ahead of the playhead."""

BlockKey = tuple[int, int]
_SCALE = float(1 << 23)


def rounded(audio: Audio) -> Audio:
    """The samples as a take's 24-bit FLAC holds them (what the file decodes to: n / 2^23), rounded and clipped
    here, so that a take's samples are known exactly without a decode and do not change when it moves into its file
    (NaN becomes silence, an infinity full scale; products with powers of two are exact in float32)."""
    scaled = np.asarray(audio, np.float32).reshape(-1) * np.float32(_SCALE)  # a new array: worked on in place
    np.rint(scaled, out=scaled)
    np.clip(scaled, -_SCALE, _SCALE - 1, out=scaled)  # infinities to the ends (as nan_to_num's float max would go)
    if np.isnan(scaled.sum()):  # NaN to 0; one pass without a copy for a take without any (nan_to_num: ~2 ms)
        scaled[np.isnan(scaled)] = 0.0
    scaled *= np.float32(1 / _SCALE)
    return scaled


def pcm24(held: Audio) -> npt.NDArray[np.int32]:
    """What the encoder is given for samples already `rounded` (libsndfile writes an int32's top 24 bits): exact,
    with no second rounding."""
    pcm = (np.asarray(held, np.float32) * np.float32(_SCALE)).astype(np.int32)
    pcm <<= 8
    return pcm


def peaks_of(audio: Audio) -> Audio:
    """Max |sample| per `PEAK_BIN` samples of `audio` (the last bin may be partial)."""
    audio = np.asarray(audio, np.float32)
    full = len(audio) // PEAK_BIN * PEAK_BIN
    peaks = np.abs(audio[:full].reshape(-1, PEAK_BIN)).max(axis=1)
    if full < len(audio):
        peaks = np.append(peaks, np.abs(audio[full:]).max())
    return peaks.astype(np.float32, copy=False)


class BlockCache:
    """Decoded blocks of file-backed takes, least recently used first, within `budget` bytes plus the
    pinned blocks (those the player will play next). Thread-safe; `peek` takes no lock (the audio callback
    calls it: one dict lookup)."""

    def __init__(self, budget: int = CACHE_BYTES) -> None:
        self.budget = budget
        self._blocks: OrderedDict[BlockKey, Audio] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._pinned: frozenset[BlockKey] = frozenset()
        self.decoded_bytes = 0
        """Bytes of audio decoded since start (what a test of memory and work counts, not wall time)."""

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def peek(self, key: BlockKey) -> Audio | None:
        return self._blocks.get(key)

    def get(self, key: BlockKey) -> Audio | None:
        with self._lock:
            block = self._blocks.get(key)
            if block is not None:
                self._blocks.move_to_end(key)
            return block

    def put(self, key: BlockKey, block: Audio, decoded: bool = True) -> None:
        with self._lock:
            old = self._blocks.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._blocks[key] = block
            self._bytes += block.nbytes
            if decoded:
                self.decoded_bytes += block.nbytes
            self._evict()

    def pin(self, keys: Iterable[BlockKey]) -> None:
        """Keep these blocks whatever the budget (they replace the blocks pinned before)."""
        self._pinned = frozenset(keys)

    def clear(self) -> None:
        with self._lock:
            self._blocks.clear()
            self._bytes = 0

    def _evict(self) -> None:
        pinned = self._pinned
        while self._bytes > self.budget:
            key = next((k for k in self._blocks if k not in pinned), None)  # the oldest not pinned
            if key is None:
                return
            self._bytes -= self._blocks.pop(key).nbytes


CACHE = BlockCache()
"""The process's one cache of decoded take audio."""
_tokens = itertools.count(1)


class UnreadableTake(UserError):
    """A take's audio file could not be decoded (damaged or removed since the project was opened)."""


class TakeSound:
    """One take's audio: `length` samples, in memory (`data`) or in the FLAC file `path`. Switching from
    memory to the file (`to_file`, once the take's files are written) keeps every sample readable at every
    instant: the file's blocks are in the cache before the array is dropped."""

    __slots__ = ("key", "length", "data", "path", "peaks_path", "_peaks", "problem", "__weakref__")

    def __init__(self, length: int, data: Audio | None = None, path: str | Path | None = None,
                 peaks: Audio | None = None, peaks_path: str | Path | None = None) -> None:
        self.key = next(_tokens)
        self.length = int(length)
        self.data = data
        self.path = path
        self.peaks_path = peaks_path
        """Where the take's peaks are stored (read on the first `peaks()`)."""
        self._peaks = peaks
        self.problem = ""
        """Why the file could not be decoded (empty while it could)."""

    @classmethod
    def of(cls, audio: Audio | None) -> TakeSound:
        """A new take's audio (None: none), held as its file will hold it (`rounded`), with its peaks (what the
        timeline draws and the take's files store: worked out where the take is made, once)."""
        data = rounded(audio if audio is not None else np.zeros(0, np.float32))
        return cls(len(data), data=data, peaks=peaks_of(data))

    @classmethod
    def from_file(cls, path: str | Path, length: int, peaks_path: str | Path | None) -> TakeSound:
        return cls(length, path=path, peaks_path=peaks_path)

    @property
    def in_memory(self) -> bool:
        return self.data is not None

    def __len__(self) -> int:
        return self.length

    # -- reading -----------------------------------------------------------------------------------

    def _blocks(self, offset: int, frames: int) -> range:
        lo, hi = max(0, offset), min(self.length, offset + frames)
        return range(lo // BLOCK, (hi - 1) // BLOCK + 1) if hi > lo else range(0)

    def ready(self, offset: int, frames: int) -> bool:
        """True when `offset .. offset + frames` can be read without decoding."""
        if self.data is not None:
            return True
        return all(CACHE.peek((self.key, b)) is not None for b in self._blocks(offset, frames))

    def read_into(self, out: Audio, offset: int, wait: bool = True) -> bool:
        """Copy samples `offset ..` into `out` (the part past the end is left alone). Without `wait`, a block
        not decoded yet is left alone too and False is returned; with it, missing blocks are decoded
        (`UnreadableTake` when the file cannot be)."""
        data = self.data
        if data is not None:
            lo, hi = max(0, offset), min(self.length, offset + len(out))
            if hi > lo:
                out[lo - offset:hi - offset] = data[lo:hi]
            return True
        complete = True
        for b in self._blocks(offset, len(out)):
            block = CACHE.peek((self.key, b)) if not wait else self._block(b)
            if block is None:
                complete = False
                continue
            at = b * BLOCK
            lo, hi = max(offset, at), min(offset + len(out), at + len(block))
            out[lo - offset:hi - offset] = block[lo - at:hi - at]
        return complete

    def read(self, offset: int, frames: int) -> Audio:
        """Samples `offset .. offset + frames` (fewer at the end), decoded as needed."""
        lo, hi = max(0, offset), min(self.length, offset + frames)
        out = np.zeros(max(0, hi - lo), np.float32)
        self.read_into(out, lo)
        return out

    def prefetch(self, offset: int, frames: int) -> list[BlockKey]:
        """Decode the blocks of `offset .. offset + frames` that are not in the cache; returns their keys
        (to pin). An unreadable file gives silent blocks and a `problem` (logged once)."""
        if self.data is not None:
            return []
        keys = []
        for b in self._blocks(offset, frames):
            try:
                self._block(b)
            except UnreadableTake:
                n = min(BLOCK, self.length - b * BLOCK)
                CACHE.put((self.key, b), np.zeros(n, np.float32), decoded=False)
            keys.append((self.key, b))
        return keys

    def samples(self) -> Audio:
        """The whole take (the array itself while in memory; decoded into a new one from the file)."""
        data = self.data
        if data is not None:
            return data
        return self.read(0, self.length)

    def peaks(self) -> Audio:
        """Max |sample| per `PEAK_BIN` samples: stored with the take (read once), or computed once."""
        peaks = self._peaks
        if peaks is None:
            data = self.data
            if data is None and self.peaks_path is not None:
                peaks = stored_peaks(self.peaks_path, self.length)
            if peaks is None:  # none stored (an old project), or not what they should be: from the audio
                peaks = peaks_of(data if data is not None else self.read(0, self.length))
            self._peaks = peaks
        return peaks

    def _block(self, b: int) -> Audio:
        key = (self.key, b)
        block = CACHE.get(key)
        if block is not None:
            return block
        block = self._decode(b)
        CACHE.put(key, block)
        return block

    def _decode(self, b: int) -> Audio:
        path = self.path
        start = b * BLOCK
        n = min(BLOCK, self.length - start)
        if path is None:
            raise UnreadableTake("this take's audio is neither in memory nor in a file")
        try:
            fd = os.open(path, os.O_RDONLY | OPEN_FLAGS)
            with os.fdopen(fd, "rb") as f, sf.SoundFile(f) as snd:
                snd.seek(start)
                block = snd.read(n, dtype="float32", always_2d=False)
        except (OSError, RuntimeError, TypeError, ValueError, sf.LibsndfileError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            if not self.problem:
                self.problem = f"{printable(os.path.basename(path))} cannot be read ({printable(reason, 80)})"
                log.warning("take audio %s: %s", path, reason)
            raise UnreadableTake(f"The take's audio {printable(path)} cannot be read "
                                 f"({printable(reason, 80)}); render the line again.") from None
        if block.ndim != 1:
            block = block[:, 0]
        if len(block) < n:  # the file is shorter than it said: the rest is silence
            block = np.concatenate([block, np.zeros(n - len(block), np.float32)])
        return np.ascontiguousarray(block, np.float32)

    # -- switching ---------------------------------------------------------------------------------

    def to_file(self, path: str | Path, peaks: Audio, blocks: Audio | None = None,
                peaks_path: str | Path | None = None) -> None:
        """The take's file is written: read from it from now on. `blocks`: the file's decoded samples (they
        seed the cache, so nothing audible waits for a decode); the in-memory array is dropped last."""
        self.path = path
        self.peaks_path = peaks_path
        self._peaks = peaks
        if blocks is not None and self.data is not None:
            for b in range(0, (self.length + BLOCK - 1) // BLOCK):
                CACHE.put((self.key, b), np.ascontiguousarray(blocks[b * BLOCK:(b + 1) * BLOCK]), decoded=False)
        self.data = None

    def hold(self) -> None:
        """Keep the samples in memory from now on (a deleted take that Undo may bring back after its file
        is gone)."""
        if self.data is None:
            self.data = self.read(0, self.length)


def stored_peaks(path: str | Path, length: int) -> Audio | None:
    """The peaks stored for a take of `length` samples (a plain `.npy` file, never through a link); None when
    missing or not what they should be (they are computed again then: peaks never make a take unusable)."""
    try:
        fd = os.open(path, os.O_RDONLY | OPEN_FLAGS)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            data = f.read(4096 + 4 * (length // PEAK_BIN + 1))
        shape, dtype = npy_header(io.BytesIO(data), os.path.basename(path))
        n = -(-length // PEAK_BIN)
        start = 10 + int.from_bytes(data[8:10], "little") if data[6] == 1 else 12 + int.from_bytes(data[8:12], "little")
        if dtype != np.float32 or shape != (n,) or len(data) < start + 4 * n:
            return None
        return np.frombuffer(data, np.float32, n, start).copy()
    except (OSError, ValueError, UserError):
        return None
