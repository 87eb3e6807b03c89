"""Codec codes as data: `(codebooks, frames)` integer matrices read from `.npy` files and caches.

A codes file may come from anyone (a `--reference-codes` argument, a project's take, a voice's cache),
so it is read without ever unpickling and checked before use: a `.npz`, a text file or a pickled
object array is one clear `UserError` (never numpy's advice to load "unsafely"), and `check_codes` is
the one shape and range check every reader applies.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import BinaryIO

import numpy as np

from s2studio.errors import UserError, printable
from s2studio.units import FRAME_SAMPLES, NUM_CODEBOOKS, SAMPLE_RATE
MAX_CODEBOOK_SIZE = 4096
"""S2's largest codebook (the semantic one): no code of any S2 codec reaches it."""
NPY_MAGIC = b"\x93NUMPY"
MAX_CODES_BYTES = 512 * 1024 * 1024
"""No codes file of S2 is near this (an hour of audio is 1.2 MB of int64 codes)."""


def check_codes(codes: np.ndarray, what: str, num_codebooks: int = NUM_CODEBOOKS,
                codebook_size: int | None = None) -> np.ndarray:
    """Validate a (codebooks, frames) integer matrix and return it as int64."""
    arr = np.asarray(codes)
    if arr.ndim != 2 or arr.shape[0] != num_codebooks:
        raise UserError(f"{what} must have shape ({num_codebooks}, frames), got {tuple(arr.shape)}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise UserError(f"{what} must hold integers, got {arr.dtype}")
    if arr.size and arr.min() < 0:
        raise UserError(f"{what} holds a negative code ({int(arr.min())})")
    if codebook_size is not None and arr.size and arr.max() >= codebook_size:
        raise UserError(f"{what} holds code {int(arr.max())}, beyond the codebook size {codebook_size}")
    return arr.astype(np.int64)


def codes_problem(codes: object, duration_s: float | None = None) -> str | None:
    """Why cached codes cannot be S2 codes of a clip lasting `duration_s` (None when they can): not a
    (10, N ≥ 1) integer matrix, a code outside every S2 codebook, or far more frames than the clip has."""
    if not isinstance(codes, np.ndarray) or codes.ndim != 2 or codes.shape[0] != NUM_CODEBOOKS:
        return f"shape {getattr(codes, 'shape', None)} is not ({NUM_CODEBOOKS}, frames)"
    if not np.issubdtype(codes.dtype, np.integer) or codes.shape[1] == 0:
        return f"{codes.dtype} {codes.shape} is not a non-empty integer matrix"
    if codes.min() < 0 or codes.max() >= MAX_CODEBOOK_SIZE:
        return f"codes range over {int(codes.min())}…{int(codes.max())}, outside 0…{MAX_CODEBOOK_SIZE - 1}"
    if duration_s is not None:
        frames = duration_s * SAMPLE_RATE / FRAME_SAMPLES
        if codes.shape[1] > 1.5 * frames + 8:
            return f"{codes.shape[1]} frames for a {duration_s:.1f} s clip (about {frames:.0f} expected)"
    return None


def read_codes_file(path: Path, what: str = "codes") -> np.ndarray:
    """The one array of a `.npy` file (no pickles, ever); the shape is checked by the caller."""
    path = Path(path)
    name = f"{what} {printable(path)}"
    if path.is_dir():
        raise UserError(f"{name} is a folder; give a .npy file")
    try:
        with path.open("rb") as f:
            data = f.read(MAX_CODES_BYTES + 1)
    except FileNotFoundError:
        raise UserError(f"{what} file not found: {printable(path)}") from None
    except OSError as exc:
        raise UserError(f"cannot read {name}: {printable(exc.strerror or exc)}") from None
    if len(data) > MAX_CODES_BYTES:
        raise UserError(f"{name} is larger than {MAX_CODES_BYTES >> 20} MB; it is not a codes file")
    buf = io.BytesIO(data)
    npy_header(buf, name)
    try:
        buf.seek(0)
        return np.lib.format.read_array(buf, allow_pickle=False)
    except (ValueError, OSError, EOFError, TypeError) as exc:
        raise UserError(f"{name} is damaged ({_reason(exc)})") from None


_PLAIN_HEADER = re.compile(rb"\x93NUMPY\x01\x00..\{'descr': '([<|][iuf][1248])', 'fortran_order': False, "
                           rb"'shape': \(((?:\d+, )*\d*,?)\), \} *\n", re.DOTALL)
"""The header numpy.save writes for a plain C-order array of numbers (read without numpy's parser, which
evaluates the header as a Python literal: a thousand times slower, for the takes of a book)."""


def npy_header(f: BinaryIO, name: str) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) from the header of the `.npy` array `f` holds, read from its start, without reading the
    array; one `UserError` for a `.npz`, a file that is no `.npy` and an array of Python objects."""
    first = f.read(256)
    plain = _PLAIN_HEADER.match(first)
    if plain is not None:
        shape = tuple(int(n) for n in plain.group(2).decode().replace(",", " ").split())
        return shape, np.dtype(plain.group(1).decode())
    f.seek(0)
    head = f.read(len(NPY_MAGIC))
    if head[:4] == b"PK\x03\x04":
        raise UserError(f"{name} is a .npz archive; give one (10, frames) array saved with numpy.save (.npy)")
    if head != NPY_MAGIC:
        raise UserError(f"{name} is not a .npy array; give one (10, frames) array saved with numpy.save")
    f.seek(0)
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(f)
    except (ValueError, OSError, EOFError, TypeError) as exc:
        raise UserError(f"{name} is damaged ({_reason(exc)})") from None
    if dtype.hasobject:
        raise UserError(f"{name} holds Python objects, not numbers; refusing to read it")
    return shape, dtype


def _reason(exc: BaseException) -> str:
    detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return printable("it holds Python objects" if "pickle" in detail else detail, 80)
