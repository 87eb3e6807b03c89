"""Checks on a `.s2voice` zip before anything of it reaches the library.

A voice file may come from anyone: only plain file names that a voice folder holds are accepted
(no `../`, no folders, no absolute paths), the unpacked size is bounded (zip bombs), every clip must
match the checksum in its voice.json and be a usable reference (`state.clips`), and cached codes that
cannot be the clips' are dropped (encoded again on first use).
"""

from __future__ import annotations

import hashlib
import logging
import re
import zipfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from s2studio.errors import UserError, printable

log = logging.getLogger(__name__)

CODES_FILE = "codes.safetensors"
VOICE_FILE = "voice.json"
MAX_CLIPS = 4
MAX_IMPORT_BYTES = 400_000_000
"""Uncompressed size limit of a `.s2voice` (four 30 s clips are ~20 MB): stops zip bombs."""
MAX_IMPORT_ENTRIES = 2 + 2 * MAX_CLIPS
CLIP_FILE = re.compile(r"^clip[1-9]\.flac$")


def check_entries(path: Path, infos: list[zipfile.ZipInfo]) -> None:
    path = printable(path)  # type: ignore[assignment] - only shown from here on
    if len(infos) > MAX_IMPORT_ENTRIES:
        raise UserError(f"{path} has {len(infos)} files; a .s2voice holds at most {MAX_IMPORT_ENTRIES}")
    total = 0
    for info in infos:
        name = info.filename
        if name != Path(name).name or "\\" in name or ":" in name or name in ("", ".", "..") or info.is_dir():
            raise UserError(f"{path} holds {name!r}, a path outside the voice folder; refusing to import it")
        if name not in (VOICE_FILE, CODES_FILE) and not CLIP_FILE.match(name):
            raise UserError(f"{path} holds an unexpected file {name!r}; refusing to import it")
        total += info.file_size
    if total > MAX_IMPORT_BYTES:
        raise UserError(f"{path} unpacks to {total / 1e6:.0f} MB; a voice is at most "
                        f"{MAX_IMPORT_BYTES // 1_000_000} MB, refusing to import it")
    if len({i.filename for i in infos}) != len(infos):
        raise UserError(f"{path} holds the same file twice; the voice file is damaged")


def verify_import(path: Path, folder: Path, clips: Sequence[Any]) -> tuple[Any, ...]:
    """Check the unpacked clips (`Clip`s as voice.json lists them) against their checksums and the rule
    every reference meets (`state.clips`); returns them with the duration and rate their files really
    have. Cached codes that cannot be these clips' are dropped with a warning (they are encoded again)."""
    from s2studio.state.clips import read_audio
    from s2studio.state.codes import codes_problem

    shown = printable(path)
    checked = []
    for clip in clips:
        if hashlib.sha256((folder / clip.file).read_bytes()).hexdigest() != clip.sha256:
            raise UserError(f"{shown}: {clip.file} does not match its checksum; the voice file is damaged")
        try:
            data, rate, _ = read_audio(folder / clip.file)
        except UserError as exc:
            raise UserError(f"{shown}: {exc}; the voice file is unusable") from None
        checked.append(replace(clip, duration_s=round(data.shape[0] / rate, 3), sample_rate=rate))
    codes = folder / CODES_FILE
    if codes.is_file():
        from safetensors import safe_open

        problem = None
        try:
            with safe_open(str(codes), framework="numpy") as f:
                durations = {c.id: c.duration_s for c in checked}
                for k in f.keys():
                    if k not in durations:
                        problem = f"codes for an unknown clip {printable(k, 20)}"
                    else:
                        problem = problem or codes_problem(f.get_tensor(k), durations[k])
        except Exception as exc:  # noqa: BLE001 - any damage means "encode again"
            problem = f"unreadable ({printable(exc, 80)})"
        if problem:
            log.warning("%s: dropping its cached codes (%s); they will be encoded again", shown, problem)
            codes.unlink()
    return tuple(checked)
