"""Checks on a `.s2voice` zip before anything of it reaches the library.

A voice file may come from anyone: only plain file names that a voice folder holds are accepted
(no `../`, no folders, no absolute paths), the unpacked size is bounded (zip bombs), and every clip
must match the checksum in its voice.json.
"""

from __future__ import annotations

import hashlib
import re
import zipfile
from pathlib import Path

import soundfile as sf

from s2studio.errors import UserError

CODES_FILE = "codes.safetensors"
VOICE_FILE = "voice.json"
MAX_CLIPS = 4
MAX_IMPORT_BYTES = 400_000_000
"""Uncompressed size limit of a `.s2voice` (four 30 s clips are ~20 MB): stops zip bombs."""
MAX_IMPORT_ENTRIES = 2 + 2 * MAX_CLIPS
CLIP_FILE = re.compile(r"^clip[1-9]\.flac$")


def check_entries(path: Path, infos: list[zipfile.ZipInfo]) -> None:
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


def verify_import(path: Path, folder: Path, clips: list[tuple[str, str]]) -> None:
    """`clips`: (file name, sha256) as voice.json lists them."""
    for file, sha in clips:
        if hashlib.sha256((folder / file).read_bytes()).hexdigest() != sha:
            raise UserError(f"{path}: {file} does not match its checksum; the voice file is damaged")
        try:
            sf.info(str(folder / file))
        except (sf.LibsndfileError, RuntimeError) as exc:
            raise UserError(f"{path}: {file} is not audio ({exc}); the voice file is damaged") from None
    codes = folder / CODES_FILE
    if codes.is_file():
        from safetensors import safe_open

        try:
            with safe_open(str(codes), framework="numpy") as f:
                for k in f.keys():
                    f.get_tensor(k)
        except Exception:  # noqa: BLE001 - report any damage the same way
            raise UserError(f"{path}: {CODES_FILE} is damaged; the voice file is damaged") from None
