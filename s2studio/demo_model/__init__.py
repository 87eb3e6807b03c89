"""Seeded random-weight model folders in S2 Pro's exact upstream layout.

The studio's demo mode and the tests need a model without downloading 9 GB; the parity tests need the
*same* folder the reference implementation ran on. So a folder is a pure function of its arguments: the
same seed and options give byte-identical files, and the golden files record a digest of them.

What a folder holds (spec §1.1): `config.json` (`fish_qwen3_omni`, or flat `dual_ar` next to a `model.pth`
as upstream's `save_pretrained` writes), bf16 weights under the published key names (`model.safetensors`, or
`model-0000i-of-0000N.safetensors` with `model.safetensors.index.json`), `tokenizer.json` with S2's added
tokens in upstream's id order, `tokenizer_config.json`, `special_tokens_map.json`, `codec.pth` (when the codec
generator is present) and a README that says the weights are noise.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from s2studio.demo_model.language_model import SIZES, DemoSize, TokenIds, WeightsFormat, dual_ar_config, omni_config, tensor_specs, with_variant, write_weights
from s2studio.demo_model.tokenizer_json import (
    build_tokenizer_json,
    dumps_tokenizer_json,
    special_tokens_map_json,
    token_count,
    tokenizer_config_json,
)
from s2studio.errors import UserError

__all__ = ["SIZES", "DemoSize", "folder_digest", "token_ids", "write_demo_model"]

README = """\
# Demo model (random weights)

This folder was written by `s2studio demo-model`. It has the exact file layout, config keys, tensor
names, shapes and dtype of Fish Audio S2 Pro, but its weights are seeded random noise: it speaks
gibberish. It exists for tests, benchmarks and the studio's demo mode. It is not S2 Pro.

- size: {size}
- seed: {seed}
- weights: {weights}
- codec: {codec}
"""


def token_ids(tokenizer_doc: dict, min_vocab_size: int = 0) -> TokenIds:
    """The ids `config.json` states, read from the tokenizer document; vocab rounded up to a multiple of 8."""
    ids = {t["content"]: t["id"] for t in tokenizer_doc["added_tokens"]}
    count = token_count(tokenizer_doc)
    return TokenIds(
        vocab_size=max(min_vocab_size, (count + 7) // 8 * 8),
        eos=ids["<|im_end|>"],
        pad=ids["<|pad|>"],
        audio_pad=ids["<|audio_pad|>"],
        semantic_start=ids["<|semantic:0|>"],
        semantic_end=ids["<|semantic:4095|>"],
    )


def write_demo_model(
    path: Path,
    *,
    seed: int = 0,
    size: str = "tiny",
    shards: int = 1,
    weights_format: WeightsFormat = "safetensors",
    tie_word_embeddings: bool | None = None,
    fast_dim: int | None = None,
    fast_attention_qk_norm: bool | None = None,
    max_seq_len: int | None = None,
    codec: bool = True,
) -> Path:
    """Write a demo model folder at `path` (created if missing; our files in it are overwritten).

    `size`: a key of `SIZES` ("tiny" is spec §12's test model, "mid" a benchmark size, "s2pro" S2's own
    shape). The variants change the architecture as upstream allows: `tie_word_embeddings=False` adds
    `output.weight`, `fast_dim` != dim adds the biased `project_in`, `fast_attention_qk_norm=True` adds fast
    q/k norms, `max_seq_len` changes the context (and so the static cache length). `weights_format="pth"`
    writes `model.pth` (module names, no remap) with the flat `dual_ar` config. Returns `path`.
    """
    path = Path(path)
    if size not in SIZES:
        raise UserError(f"unknown demo model size {size!r}; choose one of {', '.join(SIZES)}")
    if weights_format not in ("safetensors", "pth"):
        raise UserError(f"unknown weights format {weights_format!r}; choose safetensors or pth")
    if weights_format == "pth" and shards != 1:
        raise UserError("a model.pth checkpoint is a single file; use --shards 1 with --format pth")
    if path.exists() and not path.is_dir():
        raise UserError(f"{path} exists and is not a folder; choose a new or empty folder")
    arch: DemoSize = with_variant(
        SIZES[size],
        tie_word_embeddings=tie_word_embeddings,
        fast_dim=fast_dim,
        fast_attention_qk_norm=fast_attention_qk_norm,
        max_seq_len=max_seq_len,
    )
    specs_count = len(tensor_specs(arch, 8))
    if not 1 <= shards <= specs_count:
        raise UserError(f"--shards must be between 1 and {specs_count} for this model, got {shards}")
    path.mkdir(parents=True, exist_ok=True)
    for stale in [*path.glob("model-*-of-*.safetensors"), path / "model.safetensors", path / "model.safetensors.index.json", path / "model.pth"]:
        stale.unlink(missing_ok=True)  # a rewrite with other options must not leave a second checkpoint behind

    doc = build_tokenizer_json()
    ids = token_ids(doc, arch.min_vocab_size)
    (path / "tokenizer.json").write_text(dumps_tokenizer_json(doc), encoding="utf-8")
    _write_json(path / "tokenizer_config.json", tokenizer_config_json(doc))
    _write_json(path / "special_tokens_map.json", special_tokens_map_json())
    config = dual_ar_config(arch, ids) if weights_format == "pth" else omni_config(arch, ids)
    _write_json(path / "config.json", config)
    weights = write_weights(
        path, arch, tensor_specs(arch, ids.vocab_size), seed=seed, im_end_id=ids.eos, shards=shards,
        weights_format=weights_format,
    )
    wrote_codec = False
    if codec:
        try:
            from s2studio.demo_model.codec_weights import write_codec_checkpoint
        except ModuleNotFoundError as exc:
            if exc.name != "s2studio.demo_model.codec_weights":
                raise
        else:
            # the codec's "full" size is S2's real shape: only worth its weight next to S2's LM shape
            write_codec_checkpoint(path / "codec.pth", seed=seed, size="full" if size == "s2pro" else "tiny")
            wrote_codec = True
    (path / "README.md").write_text(
        README.format(size=size, seed=seed, weights=", ".join(weights), codec="codec.pth" if wrote_codec else "none"),
        encoding="utf-8",
    )
    return path


def _write_json(file: Path, data: dict) -> None:
    file.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def folder_digest(path: Path) -> dict[str, str]:
    """sha256 of the language-model files that decide generation (config, tokenizer, weight tensors).

    Weight files are digested by tensor (name, dtype, shape, raw bits), not by file bytes, so that the digest
    is the same for any sharding and survives a change of safetensors' header layout; golden files store it
    to detect a changed generator.
    """
    import torch

    path = Path(path)
    out = {name: hashlib.sha256((path / name).read_bytes()).hexdigest() for name in ("config.json", "tokenizer.json")}
    h = hashlib.sha256()
    for name, tensor in sorted(_read_tensors(path).items()):
        bits = tensor.contiguous().view(-1).view(torch.uint8)  # bf16 has no numpy dtype: hash its raw bytes
        h.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        h.update(bits.numpy().tobytes())
    out["weights"] = h.hexdigest()
    return out


def _read_tensors(path: Path) -> dict:
    import torch
    from safetensors.torch import load_file

    if (path / "model.pth").is_file() and not list(path.glob("model*.safetensors")):
        return torch.load(path / "model.pth", map_location="cpu", weights_only=True)
    tensors: dict = {}
    for file in sorted(path.glob("model*.safetensors")):
        tensors.update(load_file(str(file)))
    return tensors
