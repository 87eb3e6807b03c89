"""A `.s2voice` file, the zip of one voice folder that people exchange and a project saved with its voices packs:
`pack_voice` makes one from a voice folder, `peek_voice` reads which voice one holds without importing it. What
an import checks is `voice_archive.py`; the import itself (into a staged folder) is `VoiceLibrary.import_voice`."""

from __future__ import annotations

import io
import json
import zipfile
import zlib
from pathlib import Path

from s2studio.errors import UserError, printable
from s2studio.state.lora_file import LORA_FILE
from s2studio.state.voice_archive import CODES_FILE, VOICE_FILE, check_entries
from s2studio.state.voice_format import Voice, voice_from_json


def pack_voice(folder: Path, voice: Voice, compress: bool = True) -> bytes:
    """The voice in `folder` as the bytes of a `.s2voice` zip (voice.json, clips, cached codes if any, its LoRA).
    `compress=False` stores the FLAC clips as they are (they do not shrink): what a project saved with its voices
    packs."""
    names = [VOICE_FILE] + [c.file for c in voice.clips]
    if (folder / CODES_FILE).is_file():
        names.append(CODES_FILE)
    if voice.lora is not None:
        names.append(LORA_FILE)
    buf = io.BytesIO()
    try:
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as z:
            for n in names:  # float tensors do not deflate: the LoRA is stored as it is
                z.write(folder / n, n, zipfile.ZIP_STORED if n == LORA_FILE else None)
    except OSError as exc:
        raise UserError(f"cannot read voice {voice.name!r}: {exc.strerror or exc}") from None
    return buf.getvalue()


def peek_voice(path: Path) -> Voice:
    """The voice a `.s2voice` file holds (its voice.json, checked as an import checks it), without importing it:
    a project's packed voices are compared with the library's before anything is added."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as z:
            check_entries(path, z.infolist())
            raw = json.loads(z.read(VOICE_FILE).decode("utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path} does not exist") from None
    except KeyError:
        raise UserError(f"{path} has no voice.json; it is not a .s2voice file") from None
    except (zipfile.BadZipFile, OSError, UnicodeDecodeError, json.JSONDecodeError, zlib.error) as exc:
        raise UserError(f"{path} is not a readable .s2voice file ({printable(exc, 80)})") from None
    return voice_from_json(raw, str(path))
