"""A voice's cached codec codes (`<voice-id>/codes.safetensors`): each clip's (10, N) int64 codes under the clip's
id, keyed in the metadata by "<clip sha256>:<codec fingerprint>", so codes are encoded lazily by whatever encoder
the engine provides and again only when a clip's bytes or the codec change. A missing, damaged or crafted cache
is an empty one: it never breaks a render, its clips are encoded again."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from s2studio.errors import UserError, printable
from s2studio.state.atomic import write_bytes_atomic
from s2studio.state.codes import codes_problem
from s2studio.state.voice_archive import CODES_FILE
from s2studio.state.voice_format import Clip, Voice, sha256_of

log = logging.getLogger(__name__)

Encoder = Callable[[Path], np.ndarray]


def voice_codes(folder: Path, voice: Voice, encoder: Encoder, fingerprint: str,
                save_voice: Callable[[Voice], object]) -> list[np.ndarray]:
    """Each clip of the voice in `folder`: its codes from the cache when the clip's bytes and the codec
    fingerprint match what was cached, otherwise from `encoder(clip path)` (then cached, and the clips' checksums
    given to `save_voice`). A cache that cannot be written is logged: the codes are returned all the same."""
    from safetensors.numpy import save

    cached, meta = load_codes(folder / CODES_FILE)
    out: dict[str, np.ndarray] = {}
    clips = []
    changed = False
    for number, clip in enumerate(voice.clips, 1):
        path = folder / clip.file
        if not path.is_file():
            raise UserError(f"voice {printable(voice.name)!r} is damaged: its clip {number} ({clip.file}) is "
                            "missing; remove the voice and add it again")
        sha = sha256_of(path)
        key = f"{sha}:{fingerprint}"
        if clip.id in cached and meta.get(clip.id) == key and usable(voice, clip, cached[clip.id]):
            out[clip.id] = cached[clip.id]
        else:
            try:
                codes = np.asarray(encoder(path))
            except UserError as exc:  # the reader's words name the file; the person knows the voice
                raise UserError(f"voice {printable(voice.name)!r}, clip {number}: {exc}") from None
            if codes.ndim != 2 or codes.shape[1] == 0 or not np.issubdtype(codes.dtype, np.integer):
                raise ValueError(f"encoder returned {codes.dtype} {codes.shape}, expected (10, N) integers")
            out[clip.id] = np.ascontiguousarray(codes, dtype=np.int64)
            meta[clip.id] = key
            changed = True
        clips.append(replace(clip, sha256=sha))
    if changed:
        meta = {k: v for k, v in meta.items() if k in out}
        meta["format"] = "s2studio-codes-1"
        try:
            write_bytes_atomic(folder / CODES_FILE, save(out, metadata=meta))
            if tuple(clips) != voice.clips:
                save_voice(replace(voice, clips=tuple(clips)))
        except (OSError, UserError) as exc:
            log.warning("cannot cache codes of voice %s: %s", voice.id, exc)
    return [out[c.id] for c in voice.clips]


def uncached_clips(folder: Path, voice: Voice, fingerprint: str) -> list[Clip]:
    """The clips `voice_codes` would have to encode for this codec (read-only: what an encode job does)."""
    cached, meta = load_codes(folder / CODES_FILE)
    return [c for c in voice.clips
            if c.id not in cached or meta.get(c.id) != f"{sha256_of(folder / c.file)}:{fingerprint}"
            or not usable(voice, c, cached[c.id])]


def usable(voice: Voice, clip: Clip, codes: np.ndarray) -> bool:
    """Cached codes that can be this clip's (shape, range, length for its duration); a bad entry is logged
    and re-encoded, so a damaged or crafted cache never breaks a render."""
    problem = codes_problem(codes, clip.duration_s)
    if problem:
        log.warning("voice %s, clip %s: dropping its cached codes (%s); they will be encoded again",
                    printable(voice.name), clip.id, problem)
    return problem is None



def load_codes(path: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Cached codes and their keys; a missing or damaged cache is an empty one."""
    if not path.is_file():
        return {}, {}
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = dict(f.metadata() or {})
            return {k: f.get_tensor(k) for k in f.keys()}, meta
    except Exception as exc:  # noqa: BLE001 - any damage means "re-encode"
        log.warning("ignoring damaged codes cache %s: %s", path, exc)
        return {}, {}
