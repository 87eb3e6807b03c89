"""The files a command writes: checked before any slow work, written through the one writer, committed
together.

Every command follows the same two steps. First `check_file` / `check_folder` refuse what cannot work
(a folder where a file must go, a missing folder, a wrong suffix) with one line naming the option, before
a model is loaded. Then the command stages each output in one `OutputSet` (`state/atomic.py`: hidden
temp file, fsync, the user's umask) and commits them together at the end, so a failure anywhere (a full
disk on the third file, a failed line, Ctrl+C) leaves no output under its final name and no temp file.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from s2studio.errors import UserError, printable


def check_file(path: Path | None, flag: str, suffixes: Sequence[str] = ()) -> None:
    """`path` can become a file: not a folder, its folder exists, its suffix is one of `suffixes`."""
    if path is None:
        return
    if path.is_dir():
        raise UserError(f"{flag} {printable(path)} is a folder; give a file name")
    parent = path.parent
    if not parent.exists():
        raise UserError(f"cannot write {flag} {printable(path)}: folder {printable(parent)} does not exist")
    if not parent.is_dir():
        raise UserError(f"cannot write {flag} {printable(path)}: {printable(parent)} is a file, not a folder")
    if suffixes and path.suffix.lower() not in suffixes:
        raise UserError(f"{flag} must end in {' or '.join(suffixes)}, got {printable(path.name)}")


def check_folder(path: Path | None, flag: str) -> None:
    """`path` is a folder, or can be created as one."""
    if path is None:
        return
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag} {printable(path)} exists and is not a folder")
    if not path.exists() and not path.parent.is_dir():
        raise UserError(f"cannot create {flag} {printable(path)}: folder {printable(path.parent)} does not exist")


def make_folder(path: Path) -> bool:
    """Create the folder `path` (checked by `check_folder`); True when this call created it."""
    from s2studio.state.disk import write_error

    if path.is_dir():
        return False
    try:
        path.mkdir()
    except OSError as exc:
        raise write_error(exc, path) from None
    return True


def npy_bytes(codes: np.ndarray) -> bytes:
    """Codes as the bytes of an int64 `.npy` file (never pickled)."""
    buf = io.BytesIO()
    np.save(buf, np.asarray(codes, dtype=np.int64), allow_pickle=False)
    return buf.getvalue()


def audio_bytes(path: Path, audio: np.ndarray, sample_rate: int, fmt: str | None = None) -> bytes:
    """The file `path` asks for: `.wav` is PCM16 exactly as upstream writes it, other suffixes the
    export's formats (`fmt`, from `audio.export.format_for`)."""
    from s2studio.audio.export import encode_audio, format_for
    from s2studio.audio.io import wav_bytes

    if path.suffix.lower() == ".wav":
        return wav_bytes(audio, sample_rate)
    return encode_audio(audio, fmt or format_for(path), sample_rate=sample_rate)  # type: ignore[arg-type]


def decoded_speech(codec, batches: Sequence[np.ndarray]) -> np.ndarray:  # noqa: ANN001 - a codec.Codec
    """Each batch decoded on its own and the waveforms joined, as upstream's server and studio do."""
    import torch

    with torch.inference_mode():
        pieces = [codec.decode(torch.from_numpy(b)[None]).reshape(-1).float().cpu().numpy()
                  for b in batches if b.shape[1]]
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
