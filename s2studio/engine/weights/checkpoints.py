"""Loading a DualAR checkpoint folder (spec s2-language-model §1.1, §1.5, §1.6).

Weights are found where upstream looks for them, in its order: `model.safetensors.index.json` (every shard it
names, in sorted file-name order), else `model.safetensors`, else `model.pth` (a torch pickle, read with
`weights_only=True` only). Unlike upstream, loading is strict: a missing or unexpected tensor is an error that
names it, never a silently random weight.

The model is built on the meta device and the checkpoint's tensors are assigned into it, so there is never a
second full copy of the weights; its linear layers are narrowed (`narrow.py`) on the CPU, and only then is it
cast to the run dtype and moved, one tensor at a time (gpt-fast's order: convert for the runtime, assign, `.to`).

A sharded checkpoint's index names its shard files; those names are data from the folder, so each must stay
inside the folder (no absolute path, no `..`, no symlink out of it) before any file is opened.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import re
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import Tensor

from s2studio.engine.weights.narrow import Narrow, narrow_linears
from s2studio.errors import UserError
from s2studio.model.config import DualARConfig, load_config
from s2studio.model.dual_ar import DualAR

INDEX_FILE = "model.safetensors.index.json"
SAFETENSORS_FILE = "model.safetensors"
PTH_FILE = "model.pth"
SHOWN_KEYS = 5
"""How many offending key names an error message lists before it only counts."""


def load_dual_ar(
    model_dir: Path,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    semantic_range: tuple[int, int] | None,
    im_end_id: int | None,
    max_seq_len: int | None = None,
    narrow: Narrow = "none",
) -> DualAR:
    """The model of `model_dir` on `device` in `dtype`, in eval mode with gradients off.

    `semantic_range` (first, last semantic token id, inclusive) and `im_end_id` come from the tokenizer and
    override the config's values, as upstream does (spec §2.3); None keeps the config's. `max_seq_len`
    overrides the config's (RoPE table and largest KV cache). Every problem with the folder is a UserError.

    `narrow` replaces the linear layers before anything is cast (`narrow.narrow_linears`): "int8"/"int4" weights,
    or "bf16" (the CPU fast path) so that a float32 model never holds a float32 copy of them; `narrow.narrowing_of`
    tells afterwards what was replaced.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise UserError(f"model folder {model_dir} does not exist or is not a folder")
    config = _with_overrides(load_config(model_dir), model_dir, semantic_range, im_end_id, max_seq_len)

    weights, source = read_weights(model_dir)
    with torch.device("meta"):
        model = DualAR(config)
    check_weights(model, weights, source)
    model.load_state_dict(weights, strict=True, assign=True)
    del weights  # the model now holds the only reference, so `.to` frees each source tensor as it casts
    narrow_linears(model, narrow)
    # Buffers (RoPE tables) were built in bfloat16 on the CPU; they are cast with the weights (spec §1.6).
    model.to(device=torch.device(device), dtype=dtype)
    model.requires_grad_(False)
    model.eval()
    left = [name for name, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:  # cannot happen after a strict load; guards the meta-device construction itself
        raise RuntimeError(f"tensors left uninitialised after loading: {left[:SHOWN_KEYS]}")
    return model


def _with_overrides(config: DualARConfig, model_dir: Path, semantic_range: tuple[int, int] | None,
                    im_end_id: int | None, max_seq_len: int | None) -> DualARConfig:
    changes: dict[str, Any] = {}
    if semantic_range is not None:
        changes["semantic_begin_id"], changes["semantic_end_id"] = semantic_range
    if im_end_id is not None:
        changes["im_end_id"] = im_end_id
    if max_seq_len is not None:
        changes["slow"] = dataclasses.replace(config.slow, max_seq_len=max_seq_len)
        changes["fast"] = dataclasses.replace(config.fast, max_seq_len=max_seq_len)
    try:
        return dataclasses.replace(config, **changes)
    except (ValueError, TypeError) as exc:
        raise UserError(f"model {model_dir} does not fit its tokenizer or the requested length: {exc}") from None


# ----------------------------------------------------------------------------- reading


def read_weights(model_dir: Path) -> tuple[dict[str, Tensor], str]:
    """The checkpoint's tensors under the model's module names, and the file they came from (for messages)."""
    index = model_dir / INDEX_FILE
    if index.is_file():
        weights: dict[str, Tensor] = {}
        for shard in _shards(index):
            weights.update(_read_safetensors(shard))
        return fuse_legacy_qkv(remap_keys(weights)), INDEX_FILE
    single = model_dir / SAFETENSORS_FILE
    if single.is_file():
        return fuse_legacy_qkv(remap_keys(_read_safetensors(single))), SAFETENSORS_FILE
    pth = model_dir / PTH_FILE
    if pth.is_file():
        return fuse_legacy_qkv(_read_pth(pth)), PTH_FILE
    raise UserError(f"{model_dir} holds no language-model weights: expected {INDEX_FILE}, {SAFETENSORS_FILE} "
                    f"or {PTH_FILE}")


def _shards(index: Path) -> list[Path]:
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"cannot read {index}: {exc}") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map or not all(isinstance(v, str) for v in weight_map.values()):
        raise UserError(f"{index} has no usable 'weight_map' (tensor name -> shard file)")
    tensor_of = {name: tensor for tensor, name in sorted(weight_map.items(), reverse=True)}
    shards = [_confined(index, name, tensor_of[name]) for name in sorted(tensor_of)]
    missing = [p.name for p in shards if not p.is_file()]
    if missing:
        raise UserError(f"{index.name} names shard file(s) that are missing from {index.parent}: {', '.join(missing)}")
    return shards


def _confined(index: Path, name: str, tensor: str) -> Path:
    """The shard file `name` of the index, refused unless it lies inside the model folder.

    A relative path without `..` whose real location (symlinks followed) is inside the folder. One exception
    keeps Hugging Face's cache usable: a snapshot folder (`models--org--name/snapshots/REV/`) holds symlinks into
    its repository's `blobs/`, and those may be followed there."""
    folder = index.parent.resolve()
    where = f"{index.name}: the shard entry {_shown(name)} (for {_shown(tensor)})"
    parts = Path(name).parts
    if not name or Path(name).is_absolute() or name.startswith(("/", "\\")) or ".." in parts \
            or any(c in name for c in "\\\0:") or any(ord(c) < 32 for c in name):
        raise UserError(f"{where} is not a file name inside the model folder; the index is damaged or hostile, "
                        "re-download the model")
    path = folder / name
    real = path.resolve()
    blobs = folder.parent.parent / "blobs" if folder.parent.name == "snapshots" else None
    if not (real.is_relative_to(folder) or (blobs is not None and real.is_relative_to(blobs))):
        raise UserError(f"{where} leads outside the model folder (a symlink); the index is damaged or hostile, "
                        "re-download the model")
    return path


def _read_safetensors(path: Path) -> dict[str, Tensor]:
    try:
        return load_file(path, device="cpu")
    except Exception as exc:  # safetensors raises its own error type for truncated or malformed files
        raise UserError(f"cannot read {path}: not a complete safetensors file ({_first_line(exc)})") from None


def _read_pth(path: Path) -> dict[str, Tensor]:
    """Upstream's `model.pth` handling: unwrap `state_dict`, strip every `model.`, drop `audio_` keys; no remap."""
    try:
        data = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"GLOBAL ([\w.]+)", str(exc))
        what = f" (a {found.group(1)})" if found else ""
        raise UserError(f"refusing to load {path}: it holds more than tensors{what}, and reading that could run "
                        "code; save only the state_dict's tensors, or use model.safetensors") from None
    except Exception as exc:  # torch raises RuntimeError/EOFError/... for truncated or foreign files
        raise UserError(f"cannot read {path}: not a complete torch checkpoint ({_first_line(exc)})") from None
    if isinstance(data, dict) and "state_dict" in data:
        data = data["state_dict"]
    if not isinstance(data, dict) or not data:
        raise UserError(f"{path} does not hold a state dict of tensors")
    if next(iter(data)).startswith("model."):
        data = {key.replace("model.", ""): value for key, value in data.items()}
    return {key: value for key, value in data.items() if "audio_" not in key}


def remap_keys(weights: dict[str, Tensor]) -> dict[str, Tensor]:
    """The published S2 names to the module's (upstream's `_remap_fish_qwen3_omni_keys`, spec §1.5).

    Applied only when some key carries a published prefix; `text_model.model.X` -> `X`,
    `audio_decoder.codebook_embeddings.*` unchanged minus the prefix, any other `audio_decoder.X` -> `fast_X`.
    """
    if not any(key.startswith(("text_model.", "audio_decoder.")) for key in weights):
        return weights
    out: dict[str, Tensor] = {}
    for key, value in weights.items():
        if key.startswith("text_model.model."):
            key = key[len("text_model.model."):]
        elif key.startswith("audio_decoder."):
            rest = key[len("audio_decoder."):]
            key = rest if rest.startswith("codebook_embeddings.") else "fast_" + rest
        out[key] = value
    return out


def fuse_legacy_qkv(weights: dict[str, Tensor]) -> dict[str, Tensor]:
    """Old checkpoints store q, k and v projections apart; the model has one fused `wqkv` (rows q, k, v)."""
    for key in [k for k in weights if k.endswith(".attention.wq.weight") or k.endswith(".attention.wq.bias")]:
        prefix, kind = key.rsplit(".wq.", 1)
        parts = [f"{prefix}.{name}.{kind}" for name in ("wq", "wk", "wv")]
        if all(p in weights for p in parts):
            weights[f"{prefix}.wqkv.{kind}"] = torch.cat([weights.pop(p) for p in parts])
    return weights


# ----------------------------------------------------------------------------- checking


def check_weights(model: torch.nn.Module, weights: dict[str, Any], source: str) -> None:
    """Strict key and shape check, with an error that names what is wrong (load_state_dict's is a wall of text)."""
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    not_tensors = sorted(k for k, v in weights.items() if not isinstance(v, Tensor))
    if not_tensors:
        raise UserError(f"{source}: {len(not_tensors)} entr{'y is' if len(not_tensors) == 1 else 'ies are'} not "
                        f"tensors ({_names(not_tensors)})")
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing key(s): {_names(missing)}")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected key(s): {_names(unexpected)}")
        raise UserError(f"{source} does not match config.json: {'; '.join(parts)}")
    wrong = sorted(k for k in expected if tuple(weights[k].shape) != expected[k])
    if wrong:
        shown = ", ".join(f"{k} {tuple(weights[k].shape)} (config says {expected[k]})" for k in wrong[:SHOWN_KEYS])
        more = f" and {len(wrong) - SHOWN_KEYS} more" if len(wrong) > SHOWN_KEYS else ""
        raise UserError(f"{source} does not match config.json: {len(wrong)} tensor(s) of the wrong shape: "
                        f"{shown}{more}")
    not_float = sorted(k for k, v in weights.items() if not v.is_floating_point())
    if not_float:
        raise UserError(f"{source}: {len(not_float)} tensor(s) are not floating point ({_names(not_float)})")


def _shown(text: str, limit: int = 80) -> str:
    """A name read from a file, quoted, shortened and with its control characters escaped (repr)."""
    return repr(text if len(text) <= limit else text[:limit - 3] + "...")


def _names(keys: list[str]) -> str:
    shown = ", ".join(keys[:SHOWN_KEYS])
    return shown + (f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else "")


UNSAFE_ADVICE = re.compile(r"weights_only|allow_pickle|pickle\.load|trust", re.IGNORECASE)


def _first_line(exc: BaseException) -> str:
    """The first line of a library's message, without control characters, and never its advice to load a file
    unsafely (torch and numpy suggest `weights_only=False` / `allow_pickle=True`)."""
    lines = str(exc).strip().splitlines()
    text = "".join(c for c in lines[0] if c.isprintable()) if lines else ""
    return type(exc).__name__ if not text or UNSAFE_ADVICE.search(text) else text
