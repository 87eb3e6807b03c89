"""`train export`: a LoRA merged into its base model, saved as upstream saves a fine-tuned model (spec s2-lora.md
§6.2, §6.3), so that upstream, the independent port and our own loader all load the folder.

The folder holds `config.json` in the flat `dual_ar` form (upstream's model-args dataclass with its defaults and
`__post_init__` applied, the semantic range from the tokenizer, 4-space indent, sorted keys), `model.pth` (every
tensor in bfloat16, in the module's order, the LoRA layers merged in float32 first), the tokenizer files as the
base folder has them, and the codec and chat template. Everything is written together or not at all.
"""

from __future__ import annotations

import json
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from s2studio.engine.s2.setup import load_tokenizer
from s2studio.engine.weights.checkpoints import read_weights
from s2studio.engine.weights.lora import check_lora_fits, merge_tensor, read_lora
from s2studio.errors import UserError, printable
from s2studio.model.config import load_config
from s2studio.model.dual_ar import DualAR
from s2studio.state.atomic import OutputSet
from s2studio.text.tokenizer import semantic_token

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
                   "added_tokens.json")
DEPLOY_FILES = ("codec.pth", "chat_template.jinja")

DUAL_AR_DEFAULTS: dict[str, Any] = {
    "model_type": "dual_ar", "vocab_size": 32000, "n_layer": 32, "n_head": 32, "dim": 4096,
    "intermediate_size": None, "n_local_heads": -1, "head_dim": 64, "rope_base": 10000, "norm_eps": 1e-5,
    "max_seq_len": 2048, "dropout": 0.0, "tie_word_embeddings": True, "attention_qkv_bias": False,
    "attention_o_bias": False, "attention_qk_norm": False, "codebook_size": 160, "num_codebooks": 4,
    "semantic_begin_id": 0, "semantic_end_id": 0, "use_gradient_checkpointing": True, "initializer_range": 0.02,
    "is_reward_model": False, "scale_codebook_embeddings": False, "audio_embed_dim": None, "n_fast_layer": 4,
    "fast_dim": None, "fast_n_head": None, "fast_n_local_heads": None, "fast_head_dim": None,
    "fast_intermediate_size": None, "fast_attention_qkv_bias": None, "fast_attention_qk_norm": None,
    "fast_attention_o_bias": None, "norm_fastlayer_input": False,
}
"""Upstream's `DualARModelArgs` fields and defaults: the 35 keys its `save_pretrained` writes."""


def _post_init(data: dict[str, Any]) -> dict[str, Any]:
    c = {**DUAL_AR_DEFAULTS, **{k: v for k, v in data.items() if k in DUAL_AR_DEFAULTS}}
    if c["n_local_heads"] == -1:
        c["n_local_heads"] = c["n_head"]
    if c["intermediate_size"] is None:
        hidden = int(2 * (4 * c["dim"]) / 3)
        c["intermediate_size"] = hidden if hidden % 256 == 0 else hidden + 256 - hidden % 256
    if c["head_dim"] is None:
        c["head_dim"] = c["dim"] // c["n_head"]
    for name in ("dim", "n_head", "n_local_heads", "head_dim", "intermediate_size"):
        c[f"fast_{name}"] = c[f"fast_{name}"] or c[name]
    for name in ("attention_qkv_bias", "attention_qk_norm", "attention_o_bias"):
        if c[f"fast_{name}"] is None:
            c[f"fast_{name}"] = c[name]
    return c


def flat_config(data: dict[str, Any]) -> dict[str, Any]:
    """A model folder's `config.json` (either form) as the flat `dual_ar` arguments upstream saves."""
    if data.get("model_type") != "fish_qwen3_omni":
        return _post_init(data)
    tc, adc = data["text_config"], data["audio_decoder_config"]
    flat = {
        "model_type": "dual_ar", "vocab_size": tc["vocab_size"], "n_layer": tc["n_layer"], "n_head": tc["n_head"],
        "n_local_heads": tc.get("n_local_heads", -1), "head_dim": tc.get("head_dim"), "dim": tc["dim"],
        "intermediate_size": tc.get("intermediate_size"), "rope_base": tc.get("rope_base", 10000),
        "norm_eps": tc.get("norm_eps", 1e-5), "max_seq_len": tc.get("max_seq_len", 2048),
        "dropout": tc.get("dropout", 0.0), "tie_word_embeddings": tc.get("tie_word_embeddings", True),
        "attention_qkv_bias": tc.get("attention_qkv_bias", False), "attention_o_bias": tc.get("attention_o_bias", False),
        "attention_qk_norm": tc.get("attention_qk_norm", False),
        "use_gradient_checkpointing": tc.get("use_gradient_checkpointing", True),
        "initializer_range": tc.get("initializer_range", 0.02),
        "semantic_begin_id": data.get("semantic_start_token_id", 0),
        "semantic_end_id": data.get("semantic_end_token_id", 0),
        "scale_codebook_embeddings": True, "norm_fastlayer_input": True,
        "audio_embed_dim": adc.get("text_dim", tc["dim"]), "codebook_size": adc["vocab_size"],
        "num_codebooks": adc["num_codebooks"], "n_fast_layer": adc["n_layer"], "fast_dim": adc.get("dim"),
        "fast_n_head": adc.get("n_head"), "fast_n_local_heads": adc.get("n_local_heads"),
        "fast_head_dim": adc.get("head_dim"), "fast_intermediate_size": adc.get("intermediate_size"),
        "fast_attention_qkv_bias": adc.get("attention_qkv_bias"),
        "fast_attention_qk_norm": adc.get("attention_qk_norm"),
        "fast_attention_o_bias": adc.get("attention_o_bias"),
    }
    return _post_init({k: v for k, v in flat.items() if v is not None})


def module_keys(model_dir: Path, semantic: tuple[int, int]) -> list[str]:
    """The state-dict names in the module's order (built on the meta device: nothing is allocated)."""
    import dataclasses

    config = dataclasses.replace(load_config(model_dir), semantic_begin_id=semantic[0], semantic_end_id=semantic[1])
    with torch.device("meta"):
        return list(DualAR(config).state_dict())


def merged_state(model_dir: Path, lora_file: Path) -> OrderedDict[str, torch.Tensor]:
    """The base weights with the LoRA merged, every tensor bfloat16, in the module's order (what model.pth holds)."""
    tokenizer = load_tokenizer(model_dir)
    lora = read_lora(lora_file)
    weights, _ = read_weights(Path(model_dir))
    check_lora_fits(lora, {k: tuple(v.shape) for k, v in weights.items()}, f"the model in {printable(model_dir)}")
    out: OrderedDict[str, torch.Tensor] = OrderedDict()
    for key in module_keys(model_dir, (tokenizer.semantic_begin_id, tokenizer.semantic_end_id)):
        layer = key.removesuffix(".weight")
        weight = weights[key]
        out[key] = merge_tensor(layer, weight, lora) if key.endswith(".weight") and layer in lora.pairs \
            else weight.to(torch.bfloat16)
    return out


def config_text(model_dir: Path) -> str:
    tokenizer = load_tokenizer(model_dir)
    data = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    config = flat_config(data)
    config["semantic_begin_id"] = tokenizer.find_id(semantic_token(0))
    config["semantic_end_id"] = tokenizer.find_id(semantic_token(4095))
    return json.dumps(config, indent=4, sort_keys=True, ensure_ascii=False)


def pth_bytes(state: dict[str, torch.Tensor]) -> bytes:
    """`torch.save` of `state` to a file called model.pth (the archive's inner folder is named after the file)."""
    with tempfile.TemporaryDirectory(prefix="s2studio-export-") as tmp:
        path = Path(tmp) / "model.pth"
        torch.save(state, str(path))
        return path.read_bytes()


def export_model(model_dir: Path, lora_file: Path, out_dir: Path) -> Path:
    """Write the merged model folder `out_dir` (created; files of the same names replaced, all or nothing)."""
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if out_dir.resolve() == model_dir.resolve():
        raise UserError("--out must be a new folder, not the base model's own")
    state = merged_state(model_dir, lora_file)
    data = pth_bytes(state)
    del state
    config = config_text(model_dir)
    made = [p for p in (out_dir, *out_dir.parents) if not p.exists()]
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {printable(out_dir)}: {exc.strerror or exc}") from None
    try:
        with OutputSet() as out:
            out.add_text(out_dir / "config.json", config)
            out.add(out_dir / "model.pth", data)
            for name in (*TOKENIZER_FILES, *DEPLOY_FILES):
                if (model_dir / name).is_file():
                    out.add(out_dir / name, (model_dir / name).read_bytes())
    except BaseException:
        for folder in made:  # the folders this export made, innermost first, if nothing else is in them
            try:
                folder.rmdir()
            except OSError:
                break
        raise
    return out_dir
