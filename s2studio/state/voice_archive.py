"""Checks on a `.s2voice` zip before anything of it reaches the library.

A voice file may come from anyone: only plain file names that a voice folder holds are accepted
(no `../`, no folders, no absolute paths), the unpacked size is bounded (zip bombs), every clip must
match the checksum in its voice.json and be a usable reference (`state.clips`), cached codes that
cannot be the clips' are dropped (encoded again on first use), and a LoRA must match its checksum and be a
LoRA safetensors file (`state.lora_file`: header parsed in plain Python, never a pickle).
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
from s2studio.state.lora_file import LORA_FILE, MAX_LORA_BYTES, file_sha256, lora_file_problem

log = logging.getLogger(__name__)

CODES_FILE = "codes.safetensors"
VOICE_FILE = "voice.json"
MAX_CLIPS = 4
MAX_IMPORT_BYTES = 400_000_000
"""Uncompressed size limit of a `.s2voice` (four 30 s clips are ~20 MB): stops zip bombs."""
MAX_IMPORT_ENTRIES = 3 + 2 * MAX_CLIPS
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
        if name not in (VOICE_FILE, CODES_FILE, LORA_FILE) and not CLIP_FILE.match(name):
            raise UserError(f"{path} holds an unexpected file {name!r}; refusing to import it")
        if name == LORA_FILE:  # bounded on its own: a LoRA is bigger than clips, and no reason to allow bigger clips
            if info.file_size > MAX_LORA_BYTES:
                raise UserError(f"{path}: its LoRA unpacks to {info.file_size / 1e6:.0f} MB, over the "
                                f"{MAX_LORA_BYTES // 1_000_000} MB allowed; refusing to import it")
            continue
        total += info.file_size
    if total > MAX_IMPORT_BYTES:
        raise UserError(f"{path} unpacks to {total / 1e6:.0f} MB; a voice is at most "
                        f"{MAX_IMPORT_BYTES // 1_000_000} MB, refusing to import it")
    if len({i.filename for i in infos}) != len(infos):
        raise UserError(f"{path} holds the same file twice; the voice file is damaged")


def verify_lora(path: Path, folder: Path, lora: Any) -> None:
    """The unpacked `lora.safetensors` is the one voice.json lists (`VoiceLora` or None) and a LoRA file."""
    shown = printable(path)
    file = folder / LORA_FILE
    if lora is None:
        if file.exists():
            raise UserError(f"{shown} holds a {LORA_FILE} that its voice.json does not list; the voice file is damaged")
        return
    if not file.is_file():
        raise UserError(f"{shown} lacks {LORA_FILE}, which its voice.json lists; the voice file is damaged")
    if file_sha256(file) != lora.sha256:
        raise UserError(f"{shown}: {LORA_FILE} does not match its checksum; the voice file is damaged")
    problem = lora_file_problem(file)
    if problem:
        raise UserError(f"{shown}: its {LORA_FILE} is not a usable LoRA ({problem}); refusing to import it")


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
