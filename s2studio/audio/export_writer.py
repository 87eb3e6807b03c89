"""The export's audio, written block by block: memory stays bounded whatever the book's length.

The timeline is walked in blocks of `BLOCK` samples through `Layout.read_into` (the reader the player's
audio callback uses): each block is levelled (gain, then clipped to full scale) and handed to every file
that covers it — the mix, the chapter files (slices of the same block), and the speaker stems, each read
from a layout of that speaker's lines only. Every file is a `SoundFile` open on its staged temp file of the
one writer (`state/atomic.OutputSet.stage`), never an in-memory buffer, so nothing full-length is ever
allocated: a 12-hour book with 20 stems holds a few blocks and one encoder per file.

Errors: anything libsndfile or the disk reports while writing (a full disk, a file too large for the file
system) becomes the one writer's `WriteError` for the file concerned; the caller discards every staged
file, so an existing file is never replaced by part of a new one.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import soundfile as sf

from s2studio import threads
from s2studio.audio import SAMPLE_RATE
from s2studio.audio.chapters import append_riff_markers, tag_chapters
from s2studio.audio.dsp import Audio, LoudnessMeter, Resampler
from s2studio.audio.timeline import Layout
from s2studio.errors import Cancelled
from s2studio.state.atomic import OutputSet
from s2studio.state.disk import write_error

BLOCK = 8 * SAMPLE_RATE
"""Samples per step of the walk: 1.4 MB of float32, a few thousand steps for a book."""
OPUS_RATE = 48000
"""Opus only runs at 8/12/16/24/48 kHz; 44.1 kHz is resampled to 48 kHz for it."""
WAV_LIMIT = 0xFFFFFFFF - 64 * 1024 * 1024
"""Bytes of audio past which a WAV's 32-bit sizes overflow (less room for its other chunks): RF64 then."""
FORMATS: dict[str, tuple[str, str, str]] = {
    # name: (soundfile format, subtype, file suffix)
    "wav": ("WAV", "PCM_16", ".wav"),
    "flac": ("FLAC", "PCM_24", ".flac"),
    "ogg": ("OGG", "VORBIS", ".ogg"),
    "opus": ("OGG", "OPUS", ".opus"),
    "mp3": ("MP3", "MPEG_LAYER_III", ".mp3"),
}
DEFAULT_KBPS = {"mp3": 192, "opus": 96}
"""Transparent speech at a fraction of the WAV's size."""
Progress = Callable[[float], None]


def compression_level(fmt: str, kbps: int) -> float:
    """libsndfile's 0..1 compression level that gives `kbps` (libsndfile 1.2 maps it linearly: MP3 from
    320 kbps at 0 to 32 kbps at 1, Opus from 256 kbps to 6 kbps per channel)."""
    if fmt == "mp3":
        return (320 - kbps) / 288
    if fmt == "opus":
        return 1 - (kbps - 6) / 250
    raise ValueError(f"{fmt} has no bitrate")


def encoder_options(fmt: str, bitrate_kbps: int | None) -> dict[str, object]:
    """The `SoundFile` keywords for `fmt`'s bitrate (`DEFAULT_KBPS` when None)."""
    if fmt not in DEFAULT_KBPS:
        return {}
    options: dict[str, object] = {"compression_level": compression_level(fmt, bitrate_kbps or DEFAULT_KBPS[fmt])}
    if fmt == "mp3":
        options["bitrate_mode"] = "CONSTANT"
    return options


def tag(f: sf.SoundFile, fields: dict[str, str]) -> None:
    """Set what the container can carry; libsndfile refuses some fields on some formats."""
    for name, value in fields.items():
        if value:
            try:
                setattr(f, name, value)
            except (RuntimeError, sf.LibsndfileError):
                pass


_ERRNOS = {os.strerror(code): code for code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS)}


def _as_os_error(exc: BaseException) -> OSError:
    """libsndfile's "System error : No space left on device." as the `OSError` it stands for."""
    if isinstance(exc, OSError):
        return exc
    text = str(exc)
    for message, code in _ERRNOS.items():
        if message in text:
            return OSError(code, message)
    return OSError(None, text.strip() or "the audio encoder stopped writing")


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """Errors while encoding to `path` become the one writer's `WriteError` for it."""
    try:
        yield
    except (OSError, RuntimeError, AssertionError) as exc:  # soundfile asserts that every frame was written
        raise write_error(_as_os_error(exc), path) from None


class AudioSink:
    """One audio file of the export, written block by block into its staged temp file."""

    def __init__(self, files: OutputSet, path: Path, fmt: str, fields: dict[str, str], frames: int,
                 bitrate_kbps: int | None = None) -> None:
        self.fmt = fmt
        self.staged = files.stage(path)
        sf_format, subtype, _ = FORMATS[fmt]
        self.rf64 = fmt == "wav" and frames * 2 > WAV_LIMIT
        self.rate = OPUS_RATE if fmt == "opus" else SAMPLE_RATE
        self._resampler = Resampler(SAMPLE_RATE, OPUS_RATE) if fmt == "opus" else None
        with writing(path):
            self.file = sf.SoundFile(self.staged.fd, "w", samplerate=self.rate, channels=1,
                                     format="RF64" if self.rf64 else sf_format, subtype=subtype, closefd=False,
                                     **encoder_options(fmt, bitrate_kbps))
        tag(self.file, fields)

    @contextmanager
    def _encoding(self) -> Iterator[None]:
        """`writing`, with the system's reason when libsndfile only says "System error." (it keeps the reason,
        "File too large", for `sf_strerror`)."""
        try:
            yield
        except RuntimeError as exc:
            reason = str(exc)
            try:
                from soundfile import _ffi, _snd

                reason = _ffi.string(_snd.sf_strerror(self.file._file)).decode("utf-8", "replace") or reason
            except Exception:  # noqa: BLE001 - a closed handle or another soundfile: the first message stands
                pass
            raise write_error(_as_os_error(RuntimeError(reason)), self.staged.target) from None
        except (OSError, AssertionError) as exc:
            raise write_error(_as_os_error(exc), self.staged.target) from None

    def write(self, block: Audio) -> None:
        """`block` at `SAMPLE_RATE`, already levelled and within full scale."""
        with self._encoding():
            if self._resampler is not None:
                block = np.clip(self._resampler.push(block), -1.0, 1.0)
            self.file.write(block)

    def close(self, chapters: Sequence[tuple[float, float, str]] = ()) -> None:
        """Finish the file, with `chapters` ((start s, end s, title)) as the format's markers, and make it durable."""
        with self._encoding():
            if self._resampler is not None:
                self.file.write(np.clip(self._resampler.finish(), -1.0, 1.0))
            self.file.close()
            if chapters and self.fmt == "wav":
                append_riff_markers(self.staged.fd, [(round(s * SAMPLE_RATE), t) for s, _, t in chapters])
            elif chapters:
                with os.fdopen(os.dup(self.staged.fd), "r+b") as fileobj:
                    tag_chapters(fileobj, self.fmt, chapters)
        self.staged.finish()

    def abandon(self) -> None:
        """Close the encoder without finishing (the staged file is discarded by its `OutputSet`)."""
        try:
            self.file.close()
        except Exception:  # noqa: BLE001 - already failing; the first error is the one reported
            pass


def level(block: Audio, gain: np.float32) -> Audio:
    """Apply the export's gain (skipped at 1) and clip to full scale, in place."""
    if gain != 1:
        np.multiply(block, gain, out=block)
    return np.clip(block, -1.0, 1.0, out=block)


def speaker_layout(layout: Layout, line_ids: set[str]) -> Layout:
    """The lines of `layout` in `line_ids`, where they are on the whole timeline (silence elsewhere)."""
    keep = [i for i, t in enumerate(layout.tracks) if t.line_id in line_ids]
    tracks = tuple(layout.tracks[i] for i in keep)
    return Layout(tracks, layout.starts[keep], {t.line_id: k for k, t in enumerate(tracks)})


def _check(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise Cancelled()


def measure(layout: Layout, loudness: bool, progress: Progress | None = None,
            cancel: threading.Event | None = None) -> tuple[float, float]:
    """The mix's peak and (when asked, else -inf) integrated loudness, read block by block."""
    meter = LoudnessMeter(SAMPLE_RATE) if loudness else None
    buf = np.empty(BLOCK, np.float32)
    top = 0.0
    end = layout.end
    for start in range(0, end, BLOCK):
        _check(cancel)
        block = buf[:min(BLOCK, end - start)]
        layout.read_into(block, start)
        top = max(top, float(np.max(np.abs(block))))
        if meter is not None:
            meter.push(block)
        if progress is not None:
            progress((start + len(block)) / end)
    return top, meter.result() if meter is not None else float("-inf")


def write_timeline(layout: Layout, gain: np.float32, mix: AudioSink | None,
                   parts: Sequence[tuple[int, int, Callable[[], AudioSink]]], stems: Sequence[tuple[Layout, AudioSink]],
                   progress: Progress | None = None, cancel: threading.Event | None = None) -> None:
    """Walk the timeline once and feed the mix, the stems and the chapter files: `parts` holds (start, end,
    open) in order, each opened when the walk reaches it and finished when it has passed, so a book of 200
    chapters keeps one chapter file open at a time. The stems are encoded side by side on the machine's cores
    (libsndfile runs without Python's lock), each from its own block buffer."""
    buf = np.empty(BLOCK, np.float32)
    own_bufs = [np.empty(BLOCK, np.float32) for _ in stems]
    end = layout.end
    first, current = 0, None

    def write_stem(k: int, start: int, stop: int) -> None:
        own, sink = stems[k]
        block = own_bufs[k][:stop - start]
        own.read_into(block, start)
        sink.write(level(block, gain))

    workers = max(1, min(len(stems), threads.usable_cores()))
    with ThreadPoolExecutor(workers, thread_name_prefix="export-stem") as pool:
        for start in range(0, end, BLOCK):
            _check(cancel)
            stop = min(end, start + BLOCK)
            pending = [pool.submit(write_stem, k, start, stop) for k in range(len(stems))]
            try:
                if mix is not None or parts:
                    block = buf[:stop - start]
                    layout.read_into(block, start)
                    level(block, gain)
                    if mix is not None:
                        mix.write(block)
                    while first < len(parts) and parts[first][0] < stop:
                        lo, hi, opener = parts[first]
                        current = current or opener()
                        a, b = max(lo, start), min(hi, stop)
                        if b > a:
                            current.write(block[a - start:b - start])
                        if hi > stop:
                            break
                        current.close()
                        first, current = first + 1, None
            finally:
                for future in pending:
                    future.result()  # the first stem's error is raised here, once every stem's block is done
            if progress is not None:
                progress(stop / end)


def write_track(layout: Layout, line_id: str, gain: np.float32, sink: AudioSink,
                cancel: threading.Event | None = None) -> None:
    """One line's take alone, read through its track in blocks."""
    i = layout.index.get(line_id)
    if i is None:  # a line without audio: an empty file
        return
    track = layout.tracks[i]
    buf = np.empty(min(BLOCK, max(track.length, 1)), np.float32)
    for offset in range(0, track.length, BLOCK):
        _check(cancel)
        piece = track.read(offset, BLOCK)
        block = buf[:len(piece)]
        block[:] = piece
        sink.write(level(block, gain))
