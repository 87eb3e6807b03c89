"""A take's files inside a project folder: written once, when the take arrives, and never again (design.md §7).

    takes/<first two characters of the id>/<take id>.flac        the audio, FLAC 24-bit
    takes/<…>/<take id>.npy                                       the codes, (10, frames) integers
    takes/<…>/<take id>.peaks.npy                                 max |sample| per `PEAK_BIN` samples

The first two characters of an id (engines make hex ids) spread a book's 30,000 files over at most a few
hundred folders: file managers, archivers and FAT-formatted disks (whose folders hold about 20,000 long names
at most) cope, and no folder is listed whole to find one take. Projects saved before (format 1) keep their
takes flat in `takes/` without peaks; they are read where they are and moved into the layout above by their
first save.

Take ids match `TAKE_ID` (letters, digits, `-`, `_`), so a name never climbs out of its folder; files are
opened only when they are plain files, never through a link (a project may come from someone else). Checking
a take when a project opens reads none of its files: its row holds what they held as written (`FileSizes`), and
two `lstat`s say each is still a plain file of that size (`open_take`). A take whose row does not say (saved
before it did) or whose files differ is checked from their headers (the FLAC's STREAMINFO, the codes' `.npy`
header), never its audio. Its peaks are read when first drawn.
"""

from __future__ import annotations

import errno
import functools
import io
import os
import re
import stat
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from s2studio.units import SAMPLE_RATE
from s2studio.errors import Cancelled, UserError, printable
from s2studio.state.atomic import OutputSet, copy_files, link_file, write_bytes_atomic
from s2studio.state.disk import OPEN_FLAGS, WriteError, fsync_dir, in_parallel, remove_quietly, write_error
from s2studio.state.codes import NUM_CODEBOOKS, npy_header
from s2studio.state.project import FileSizes, Take, TakeFiles
from s2studio.state.take_audio import Audio, pcm24

TAKE_ID = re.compile(r"^(?!(?:con|prn|aux|nul|com[1-9]|lpt[1-9])$)[0-9a-z][0-9a-z_-]{0,63}$")
"""What the studio and the engines make (hex uuids); a take id names files, so nothing else (nor a name that is
a device on Windows: `con.flac` would be the console there)."""
TAKES = "takes"
_NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)
MAX_TAKE_SECONDS = 3600.0
_STREAMINFO = struct.Struct(">4sB3sHH3s3sQ")
"""`fLaC`, the first metadata block's header (type 0: STREAMINFO, 34 bytes long), then its fields up to the
64 bits that hold sample rate (20), channels - 1 (3), bits - 1 (5) and total samples (36)."""


def shard(take_id: str) -> str:
    return take_id[:2].ljust(2, "_")


def take_files(folder: Path, take_id: str) -> TakeFiles:
    """Where a take of `folder` keeps its files (the layout above)."""
    return TakeFiles(folder, f"{_takes_root(folder)}{shard(take_id)}{os.sep}{take_id}")


@functools.lru_cache(maxsize=64)
def _takes_root(folder: Path) -> str:
    """`folder`'s takes folder as text, with a separator at its end: worked out once for the takes of a book."""
    return os.path.join(folder, TAKES, "")


def flat_take_files(folder: Path, take_id: str) -> TakeFiles:
    """Where a project saved before the layout above keeps a take (no peaks)."""
    return TakeFiles(folder, os.path.join(folder, TAKES, take_id), flat=True)


# ----------------------------------------------------------------------------- folders


def plain_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def make_folder(path: Path) -> bool:
    """`path` as a plain folder of ours (a link or a file in its place is removed first); True when made now."""
    if plain_folder(path):
        return False
    if os.path.lexists(path):
        remove_quietly(path)
    try:
        os.mkdir(path)
    except FileExistsError:
        if not plain_folder(path):
            raise write_error(OSError(f"{path.name} is not a folder"), path) from None
        return False
    except OSError as exc:
        raise write_error(exc, path) from None
    return True


def _shard_folder(folder: Path, take_id: str) -> Path:
    made = make_folder(folder / TAKES)
    target = folder / TAKES / shard(take_id)
    if make_folder(target) or made:
        fsync_dir(target.parent)
    return target


# ----------------------------------------------------------------------------- writing


def flac_bytes(pcm: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, pcm, SAMPLE_RATE, format="FLAC", subtype="PCM_24")
    return buf.getvalue()


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


WRITE_BATCH = 64
"""Takes written at a time: a batch's files stay open, and its encoded audio in memory, until the batch is
through (an autosave after an instant render of a book writes 10,000 takes: 30,000 files at once would pass
the open-files limit)."""


def write_takes(takes: Sequence[Take], folder: Path) -> list[tuple[Take, TakeFiles, Audio, Audio]]:
    """Write the in-memory `takes` into `folder`, `WRITE_BATCH` at a time, each batch's files together or none
    (encoded on `disk.CPU_THREADS` threads, made durable side by side: `disk.in_parallel`); returns each take with
    its files, its peaks and the samples its FLAC holds. After a failure, the batches written before it are files no
    document names yet: the takes stay in memory, and a later write of them replaces those files."""
    done: list[tuple[Take, TakeFiles, Audio, Audio]] = []
    for first in range(0, len(takes), WRITE_BATCH):
        done += _write_batch(takes[first:first + WRITE_BATCH], folder)
    return done


def _write_batch(takes: Sequence[Take], folder: Path) -> list[tuple[Take, TakeFiles, Audio, Audio]]:
    encoded: dict[str, tuple[bytes, Audio]] = {}

    def encode(take: Take) -> None:  # libsndfile lets go of the GIL while it encodes
        held = take.sound.samples()  # rounded to what the file holds when the take was made (`TakeSound.of`)
        encoded[take.take_id] = flac_bytes(pcm24(held)), held

    in_parallel(encode, takes, cpu=True)
    done = []
    with OutputSet() as out:
        for take in takes:
            flac, held = encoded.pop(take.take_id)
            codes = npy_bytes(np.asarray(take.codes, np.int64))
            peaks = take.sound.peaks()
            files = take_files(folder, take.take_id)
            _shard_folder(folder, take.take_id)
            out.add(files.audio, flac)
            out.add(files.codes, codes)
            out.add(files.peaks, npy_bytes(peaks))
            take.sizes = FileSizes(len(held), len(flac), len(codes))  # the same bytes wherever they are written
            done.append((take, files, peaks, held))
    return done


COPY_BATCH = 96
"""Files copied (and made durable side by side) at a time, when links cannot be made."""


def share_takes(takes: Sequence[Take], folder: Path, progress: Callable[[int, bool], None] | None = None,
                cancel: Any = None) -> bool:
    """Give `folder` the files of `takes` from where they are: linked, or copied where the disk cannot link
    (takes without stored peaks get them written). `progress(takes done, copying)` every few takes; `cancel` (an
    Event) stops with `Cancelled`. Returns whether anything was copied."""
    waiting: list[tuple[Path, Path]] = []
    copied = False
    for i, take in enumerate(takes):
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        source = take.files
        if source is None:
            raise ValueError(f"take {take.take_id} has no files yet")
        files = take_files(folder, take.take_id)
        _shard_folder(folder, take.take_id)
        try:
            pairs = [(source.audio, files.audio), (source.codes, files.codes)]
            if source.peaks is not None and os.path.lexists(source.peaks):
                pairs.append((source.peaks, files.peaks))
            else:
                write_bytes_atomic(files.peaks, npy_bytes(take.sound.peaks()))
            waiting += [pair for pair in pairs if not link_file(*pair)]
            if len(waiting) >= COPY_BATCH or (waiting and i == len(takes) - 1):
                copy_files(waiting)
                waiting, copied = [], True
        except OSError as exc:
            if isinstance(exc, WriteError):
                raise
            raise UserError(f"Cannot copy take {take.take_id}: {printable(exc.strerror or exc)} "
                            f"({printable(source.audio)}).") from None
        if progress is not None and (i % 50 == 0 or i == len(takes) - 1):
            progress(i + 1, copied)
    return copied


# ----------------------------------------------------------------------------- reading


def _head(path: str | Path, size: int) -> tuple[bytes, int]:
    """The first `size` bytes of the plain file `path` (never through a link) and its length."""
    name = os.path.basename(path)
    if _NO_FOLLOW == 0 and os.path.islink(path):  # (where open cannot refuse a link itself)
        raise ValueError(f"{name} is a link; a project's take files must be plain files inside it")
    try:
        fd = os.open(path, os.O_RDONLY | OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError(f"{name} is a link; a project's take files must be plain files inside it") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{name} is not a plain file")
        return os.read(fd, size), st.st_size
    finally:
        os.close(fd)


def flac_length(path: str | Path) -> tuple[int, int]:
    """The samples of the take's FLAC, from its STREAMINFO header, and the file's bytes (ValueError when it cannot
    be a take's audio: not FLAC, not mono 44.1 kHz, longer than `MAX_TAKE_SECONDS`)."""
    name = os.path.basename(path)
    head, size = _head(path, _STREAMINFO.size)
    if len(head) == _STREAMINFO.size:
        magic, kind, length, _, _, _, _, bits = _STREAMINFO.unpack(head)
        if magic == b"fLaC" and kind & 0x7F == 0 and int.from_bytes(length, "big") == 34:
            rate, channels, frames = bits >> 44, ((bits >> 41) & 7) + 1, bits & ((1 << 36) - 1)
            if frames == 0:  # "unknown" in the header: libsndfile counts
                frames = _counted(path, name)
            if rate != SAMPLE_RATE or channels != 1 or frames > MAX_TAKE_SECONDS * SAMPLE_RATE:
                raise ValueError(f"{name} is {channels}-channel {rate} Hz audio of {frames} samples; a "
                                 f"take is mono {SAMPLE_RATE} Hz")
            return int(frames), size
    raise ValueError(f"{name} is not readable audio (not a FLAC stream)")


def _counted(path: str | Path, name: str) -> int:
    fd = os.open(path, os.O_RDONLY | OPEN_FLAGS)
    try:
        with os.fdopen(fd, "rb") as f:
            return int(sf.info(f).frames)
    except (sf.LibsndfileError, RuntimeError, TypeError) as exc:
        raise ValueError(f"{name} is not readable audio ({printable(str(exc), 80)})") from None


def check_codes_file(path: str | Path) -> int:
    """The codes file is a plain `.npy` of (10, frames) integers (its header only is read); returns its bytes."""
    name = os.path.basename(path)
    head, size = _head(path, 512)  # numpy writes a codes header in 128 bytes
    try:
        shape, dtype = npy_header(io.BytesIO(head), name)
    except UserError as exc:
        raise ValueError(str(exc)) from None
    if len(shape) != 2 or shape[0] != NUM_CODEBOOKS or not np.issubdtype(dtype, np.integer):
        raise ValueError(f"{name} holds {dtype} {shape}, not ({NUM_CODEBOOKS}, frames) codes")
    return size


def open_take(folders: Sequence[Path], take_id: str, plain: dict[str, bool],
              sizes: FileSizes | None = None) -> tuple[TakeFiles, FileSizes]:
    """The take's files in the first of `folders` that has them (in the layout above, or flat: format 1, also
    while its first save moves them) and what they hold; ValueError/OSError with a short reason when they cannot
    be used. `sizes`: what the take's row says its files held as written (returned as is when they still do);
    files that are still plain files of those sizes are taken at their word, others are checked from their
    headers. `plain` remembers which folders are plain folders (never read through one that is a link)."""
    if sizes is not None:
        for folder in folders:
            files = take_files(folder, take_id)
            if _as_written(files.stem, take_id, sizes, plain):
                return files, sizes
    missing: OSError | ValueError | None = None
    for folder in folders:
        for layout in (take_files, flat_take_files):
            files = layout(folder, take_id)
            if not _plain_parent(files.stem, take_id, plain):
                parent = os.path.dirname(files.stem)
                if os.path.lexists(parent):  # a link or a file where the folder should be: never read through
                    missing = missing or ValueError(f"the takes folder {os.path.basename(parent)} is not a plain "
                                                    "folder")
                continue
            try:
                samples, audio = flac_length(files.stem + ".flac")
                codes = check_codes_file(files.stem + ".npy")
            except FileNotFoundError as exc:
                missing = missing or exc
                continue
            return files, FileSizes(samples, audio, codes)
    raise missing or FileNotFoundError(2, "No such file or directory")


def _plain_parent(stem: str, take_id: str, plain: dict[str, bool]) -> bool:
    parent = stem[:len(stem) - len(take_id) - 1]
    known = plain.get(parent)
    if known is None:
        known = plain[parent] = plain_folder(Path(parent))
    return known


def _as_written(stem: str, take_id: str, sizes: FileSizes, plain: dict[str, bool]) -> bool:
    """The take's audio and codes are plain files (not links) of the sizes they were written with."""
    if not _plain_parent(stem, take_id, plain):
        return False
    try:
        audio, codes = os.lstat(stem + ".flac"), os.lstat(stem + ".npy")
    except OSError:
        return False
    return (audio.st_size == sizes.audio and codes.st_size == sizes.codes
            and stat.S_ISREG(audio.st_mode) and stat.S_ISREG(codes.st_mode))
