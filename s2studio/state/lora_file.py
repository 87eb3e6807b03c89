"""A voice's LoRA file checked without reading its tensors: safetensors only, LoRA names and shapes only.

A voice may carry the LoRA it was fine-tuned with (`lora.safetensors` beside its clips, design.md §7), and a
`.s2voice` from anyone may hold one, so the file is checked before it enters the library: the safetensors
header (8 bytes of length, then JSON) is parsed here, in plain Python, and must describe only float tensors named
`<layer>.lora_A` / `<layer>.lora_B`, two-dimensional, whose byte ranges tile the rest of the file exactly. A
pickle, a torch `.pt`, a truncated or padded file never passes. Whether the LoRA fits a model is the engine's
check when it is applied (`engine.weights.lora.check_lora_fits`); here is only what the state layer can know.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from pathlib import Path

from s2studio.errors import UserError, printable

LORA_FILE = "lora.safetensors"
MAX_LORA_BYTES = 1_500_000_000
"""A voice's LoRA is at most this big: S2 Pro's `r_8_alpha_16` in float32 is 74 MB, rank 128 about 1.2 GB."""
MAX_HEADER_BYTES = 50_000_000
DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2}
TENSOR_NAME = re.compile(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*\.lora_[AB]$")


def file_sha256(path: Path) -> str:
    """The file's sha256, read in blocks (a LoRA may be hundreds of MB)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def lora_file_problem(path: Path) -> str | None:
    """What makes the file at `path` no LoRA safetensors file (one short phrase), or None when it is one."""
    try:
        size = path.stat().st_size
        if size > MAX_LORA_BYTES:
            return _too_big(size)
        with open(path, "rb") as f:
            head = f.read(8 + MAX_HEADER_BYTES)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    return _problem(head, size)


def lora_bytes_problem(data: bytes) -> str | None:
    """`lora_file_problem` for a file's bytes (checked before they are written into a voice)."""
    return _too_big(len(data)) if len(data) > MAX_LORA_BYTES else _problem(data[: 8 + MAX_HEADER_BYTES], len(data))


def _too_big(size: int) -> str:
    return f"it is {size / 1e6:.0f} MB, over the {MAX_LORA_BYTES // 1_000_000} MB a voice's LoRA may have"


def _problem(head: bytes, size: int) -> str | None:
    """The check on the file's first bytes (`head`: at least its header) and its total `size`."""
    if len(head) < 8:
        return "it is not a safetensors file"
    (length,) = struct.unpack("<Q", head[:8])
    if not 2 <= length <= min(MAX_HEADER_BYTES, size - 8) or len(head) < 8 + length:
        return "it is not a safetensors file"
    raw = head[8: 8 + length]
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return "it is not a safetensors file"
    if not isinstance(header, dict):
        return "it is not a safetensors file"
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        return "its metadata is damaged"
    if not header:
        return "it holds no tensors"
    spans = []
    for name, entry in header.items():
        if not TENSOR_NAME.match(name):
            return f"it holds {printable(name, 60)!r}, which is not a LoRA weight"
        if not isinstance(entry, dict):
            return "its header is damaged"
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if dtype not in DTYPE_BYTES:
            return f"{printable(name, 60)} is {printable(str(dtype), 20)}, not float32, float16 or bfloat16"
        if (not isinstance(shape, list) or len(shape) != 2 or not all(isinstance(n, int) and n > 0 for n in shape)
                or not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(n, int) and n >= 0 for n in offsets)):
            return f"{printable(name, 60)} is not a two-dimensional tensor"
        if offsets[1] - offsets[0] != shape[0] * shape[1] * DTYPE_BYTES[dtype]:
            return f"{printable(name, 60)} does not have the size its shape says"
        spans.append((offsets[0], offsets[1]))
    end = 0
    for start, stop in sorted(spans):
        if start != end:
            return "its tensors overlap or leave gaps; the file is damaged"
        end = stop
    if end != size - 8 - length:
        return "its length does not match its tensors; the file is truncated or damaged"
    names = set(header)
    unpaired = sorted(n for n in names if (n[:-1] + ("B" if n.endswith("A") else "A")) not in names)
    if unpaired:
        return f"{printable(unpaired[0], 60)} has no partner; the file is damaged"
    return None


def check_lora_file(path: Path, what: str = "") -> None:
    """A UserError naming `path` (or `what`) unless it is a LoRA safetensors file."""
    problem = lora_file_problem(Path(path))
    if problem:
        raise UserError(f"{what or printable(path)} is not a usable LoRA: {problem}; pick the lora.safetensors "
                        "that `s2studio train` wrote")
