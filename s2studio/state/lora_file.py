"""A voice's LoRA file checked before it enters the library, in plain Python and numpy (no torch, no pickle).

A voice may carry the LoRA it was fine-tuned with (`lora.safetensors` beside its clips), and a `.s2voice` from
anyone may hold one, so the file is checked when it is attached or imported: the safetensors header (8 bytes of
length, then JSON) must describe only float tensors named `<layer>.lora_A` / `<layer>.lora_B` of a layer S2's
LoRA presets wrap, two-dimensional, whose byte ranges tile the rest of the file exactly; each pair must agree on
its rank, one rank of at most `MAX_RANK` for the file; layers of one kind (every `layers.N.attention.wqkv`, ...)
must have the same shapes and the shapes must agree on one width per transformer; and every value must be
finite. A pickle, a torch `.pt`, a truncated or padded file, NaNs, or a mix of two models' layers never passes.
Whether the LoRA fits the model it is used with is the engine's check when it is applied
(`engine.weights.lora.check_lora_fits`) and `s2studio train attach`'s when it knows the model.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

from s2studio.errors import printable

LORA_FILE = "lora.safetensors"
MAX_LORA_BYTES = 1_500_000_000
"""A voice's LoRA is at most this big: S2 Pro's `r_8_alpha_16` in float32 is 74 MB, rank 128 about 1.2 GB."""
MAX_HEADER_BYTES = 50_000_000
DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2}
TENSOR_NAME = re.compile(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*\.lora_[AB]$")
LAYER = re.compile(r"^(?:(embeddings|codebook_embeddings|fast_embeddings|output|fast_output)|"
                   r"(layers|fast_layers)\.\d{1,4}\.(attention\.wqkv|attention\.wo|feed_forward\.w[123]))$")
"""The layers S2's LoRA presets wrap (`train.presets.lora_targets`), by their module paths."""
MAX_RANK = 256
"""Largest LoRA rank the loader applies (upstream's presets use 8 and 32)."""
CHUNK = 1 << 24


def file_sha256(path: Path) -> str:
    """The file's sha256, read in blocks (a LoRA may be hundreds of MB)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def lora_file_problem(path: Path) -> str | None:
    """What makes the file at `path` no usable LoRA file (one short phrase), or None when it is one."""
    try:
        size = path.stat().st_size
        if size > MAX_LORA_BYTES:
            return _too_big(size)
        with open(path, "rb") as f:
            head = f.read(8 + MAX_HEADER_BYTES)
            problem = _problem(head, size)
            if problem:
                return problem

            def read(start: int, stop: int) -> bytes:
                f.seek(start)
                return f.read(stop - start)

            return _content_problem(_header(head), 8 + struct.unpack("<Q", head[:8])[0], read)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"


def lora_bytes_problem(data: bytes) -> str | None:
    """`lora_file_problem` for a file's bytes (checked before they are written into a voice)."""
    if len(data) > MAX_LORA_BYTES:
        return _too_big(len(data))
    problem = _problem(data[: 8 + MAX_HEADER_BYTES], len(data))
    if problem:
        return problem
    return _content_problem(_header(data), 8 + struct.unpack("<Q", data[:8])[0], lambda a, b: data[a:b])


def _header(head: bytes) -> dict:
    """The tensors' entries of a header `_problem` accepted."""
    (length,) = struct.unpack("<Q", head[:8])
    header = json.loads(head[8: 8 + length].decode("utf-8"))
    header.pop("__metadata__", None)
    return header


def _content_problem(header: dict, base: int, read: Callable[[int, int], bytes]) -> str | None:
    """The checks of names, ranks, shapes and values on a header that passed `_problem`; `read(start, stop)`
    gives the file's bytes (the tensors start at `base`)."""
    shapes: dict[str, tuple[int, int]] = {}
    for name, entry in header.items():
        layer = name[: -len(".lora_A")]
        if not LAYER.match(layer):
            return f"{printable(layer, 60)} is not a layer S2's LoRA presets train"
        shapes[name] = (entry["shape"][0], entry["shape"][1])
    ranks = {shapes[n][0] for n in shapes if n.endswith("A")} | {shapes[n][1] for n in shapes if n.endswith("B")}
    if len(ranks) != 1:
        return f"its pairs disagree on their rank ({', '.join(map(str, sorted(ranks)[:4]))}); the file is damaged"
    rank = ranks.pop()
    if rank > MAX_RANK:
        return f"its rank is {rank}, above the {MAX_RANK} this program applies; train it with a smaller rank"
    kinds: dict[str, tuple[int, int]] = {}
    widths: dict[str, int] = {}
    for name in sorted(n for n in shapes if n.endswith("A")):
        layer = name[: -len(".lora_A")]
        n_in, n_out = shapes[name][1], shapes[layer + ".lora_B"][0]
        kind = re.sub(r"\.\d+\.", ".", layer)
        if kinds.setdefault(kind, (n_in, n_out)) != (n_in, n_out):
            return f"its {kind} layers have different shapes; it mixes two models' layers"
        stack = "fast" if layer.startswith("fast") else "slow"
        width = n_out if layer.endswith(("embeddings", "wo", "w2")) else n_in
        if widths.setdefault(stack, width) != width:
            return f"its layers disagree on the model's width ({widths[stack]} and {width}); it is damaged"
    for name, entry in header.items():
        start, stop = entry["data_offsets"]
        for offset in range(start, stop, CHUNK):
            if not np.isfinite(_floats(read(base + offset, base + min(stop, offset + CHUNK)), entry["dtype"])).all():
                return f"{printable(name, 60)} holds NaN or infinite values; train it again from an earlier checkpoint"
    return None


def _floats(raw: bytes, dtype: str) -> np.ndarray:
    if dtype == "BF16":
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    return np.frombuffer(raw, "<f4" if dtype == "F32" else "<f2")


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
