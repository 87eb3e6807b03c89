"""config.json parsing: both file forms, upstream's fallbacks and its traps (spec s2-language-model §1.2)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from s2studio.errors import UserError
from s2studio.model.config import DualARConfig, TransformerConfig, load_config, parse_config

# S2 Pro's published config.json (spec §1.2), minus the keys nobody reads.
S2_CONFIG: dict[str, Any] = {
    "model_type": "fish_qwen3_omni",
    "dtype": "bfloat16",
    "eos_token_id": 151645,
    "pad_token_id": 151669,
    "audio_pad_token_id": 151677,
    "semantic_start_token_id": 151678,
    "semantic_end_token_id": 155773,
    "text_config": {
        "model_type": "fish_qwen3", "vocab_size": 155776, "n_layer": 36, "n_head": 32, "n_local_heads": 8,
        "head_dim": 128, "dim": 2560, "intermediate_size": 9728, "rope_base": 1000000, "norm_eps": 1e-6,
        "max_seq_len": 32768, "tie_word_embeddings": True, "attention_qk_norm": True,
        "attention_qkv_bias": False, "attention_o_bias": False, "dropout": 0.0, "initializer_range": 0.02,
        "use_gradient_checkpointing": True,
    },
    "audio_decoder_config": {
        "vocab_size": 4096, "num_codebooks": 10, "n_layer": 4, "dim": 2560, "n_head": 32, "n_local_heads": 8,
        "head_dim": 128, "intermediate_size": 9728, "attention_qk_norm": False, "attention_qkv_bias": False,
        "attention_o_bias": False, "text_dim": 2560, "max_seq_len": 11, "rope_base": 1000000, "norm_eps": 1e-6,
        "tie_word_embeddings": False,
    },
}


def s2(**edits: Any) -> dict[str, Any]:
    d = copy.deepcopy(S2_CONFIG)
    for path, value in edits.items():
        *parents, key = path.split("__")
        node = d
        for p in parents:
            node = node[p]
        if value is ...:
            del node[key]
        else:
            node[key] = value
    return d


def test_s2_pro_config() -> None:
    c = parse_config(S2_CONFIG)
    assert c.slow == TransformerConfig(dim=2560, n_layer=36, n_head=32, n_local_heads=8, head_dim=128,
                                       intermediate_size=9728, rope_base=1e6, norm_eps=1e-6, max_seq_len=32768,
                                       qk_norm=True, qkv_bias=False, o_bias=False)
    assert c.fast == TransformerConfig(dim=2560, n_layer=4, n_head=32, n_local_heads=8, head_dim=128,
                                       intermediate_size=9728, rope_base=1e6, norm_eps=1e-6, max_seq_len=32768,
                                       qk_norm=False, qkv_bias=False, o_bias=False)
    assert (c.vocab_size, c.codebook_size, c.num_codebooks) == (155776, 4096, 10)
    assert (c.semantic_begin_id, c.semantic_end_id, c.im_end_id) == (151678, 155773, 151645)
    assert c.tie_word_embeddings is True
    assert c.scale_codebook_embeddings is True and c.norm_fastlayer_input is True  # forced, not config keys
    assert not c.fast_has_projection
    assert (c.slow.q_size, c.slow.kv_size) == (4096, 1024)


def test_fast_stack_ignores_the_audio_configs_eps_rope_and_length() -> None:
    c = parse_config(s2(audio_decoder_config__rope_base=10, audio_decoder_config__norm_eps=1e-2,
                        audio_decoder_config__max_seq_len=11))
    assert (c.fast.rope_base, c.fast.norm_eps, c.fast.max_seq_len) == (1e6, 1e-6, 32768)


def test_missing_text_head_dim_is_64_not_dim_over_heads() -> None:
    # the trap: upstream drops None before building its dataclass, whose default (64) then wins over 2560 // 32
    c = parse_config(s2(text_config__head_dim=...))
    assert c.slow.head_dim == 64
    assert c.fast.head_dim == 128  # the audio config states its own
    assert parse_config(s2(text_config__head_dim=None)).slow.head_dim == 64


def test_missing_fast_qk_norm_falls_back_to_the_texts() -> None:
    assert parse_config(s2(audio_decoder_config__attention_qk_norm=...)).fast.qk_norm is True
    c = parse_config(s2(audio_decoder_config__attention_qk_norm=..., text_config__attention_qk_norm=False))
    assert c.fast.qk_norm is False and c.slow.qk_norm is False


def test_fast_widths_fall_back_to_the_slow_ones() -> None:
    edits = {f"audio_decoder_config__{k}": ... for k in ("dim", "n_head", "n_local_heads", "head_dim",
                                                        "intermediate_size", "attention_qkv_bias")}
    c = parse_config(s2(text_config__attention_qkv_bias=True, **edits))
    assert (c.fast.dim, c.fast.n_head, c.fast.n_local_heads, c.fast.head_dim, c.fast.intermediate_size) == \
        (2560, 32, 8, 128, 9728)
    assert c.fast.qkv_bias is True


def test_text_defaults() -> None:
    c = parse_config(s2(text_config__n_local_heads=..., text_config__intermediate_size=..., text_config__rope_base=...,
                        text_config__norm_eps=..., text_config__max_seq_len=..., text_config__tie_word_embeddings=...,
                        text_config__attention_qk_norm=..., audio_decoder_config__intermediate_size=...,
                        audio_decoder_config__n_local_heads=...))
    assert c.slow.n_local_heads == 32  # -1 -> n_head
    assert c.slow.intermediate_size == 6912  # find_multiple(int(2 * 4 * 2560 / 3), 256)
    assert c.fast.intermediate_size == 6912 and c.fast.n_local_heads == 32
    assert (c.slow.rope_base, c.slow.norm_eps, c.slow.max_seq_len) == (10000.0, 1e-5, 2048)
    assert c.tie_word_embeddings is True and c.slow.qk_norm is False


def test_different_fast_width_needs_a_projection() -> None:
    c = parse_config(s2(audio_decoder_config__dim=1024))
    assert c.fast.dim == 1024 and c.fast_has_projection


def test_flat_dual_ar_form() -> None:
    d = {"model_type": "dual_ar", "vocab_size": 300, "n_layer": 2, "n_head": 8, "n_local_heads": 2, "dim": 64,
         "head_dim": 16, "intermediate_size": 192, "rope_base": 1000000, "norm_eps": 1e-6, "max_seq_len": 512,
         "attention_qk_norm": True, "codebook_size": 16, "num_codebooks": 10, "semantic_begin_id": 250,
         "semantic_end_id": 265, "n_fast_layer": 3, "fast_dim": 32, "fast_attention_qk_norm": False,
         "scale_codebook_embeddings": True, "norm_fastlayer_input": True, "is_reward_model": False,
         "some_future_key": 1}
    c = parse_config(d)
    assert (c.slow.dim, c.slow.n_layer, c.slow.head_dim, c.slow.qk_norm) == (64, 2, 16, True)
    assert (c.fast.dim, c.fast.n_layer, c.fast.n_head, c.fast.head_dim, c.fast.qk_norm) == (32, 3, 8, 16, False)
    assert (c.semantic_begin_id, c.semantic_end_id, c.im_end_id) == (250, 265, None)
    assert c.scale_codebook_embeddings and c.norm_fastlayer_input and c.fast_has_projection


def test_flat_dual_ar_defaults() -> None:
    c = parse_config({"model_type": "dual_ar", "dim": 256, "n_head": 4, "vocab_size": 100})
    assert c.scale_codebook_embeddings is False and c.norm_fastlayer_input is False
    assert (c.slow.n_layer, c.fast.n_layer, c.codebook_size, c.num_codebooks) == (32, 4, 160, 4)
    assert c.slow.head_dim == 64 and c.slow.n_local_heads == 4
    assert c.slow.intermediate_size == 768  # find_multiple(int(2 * 1024 / 3), 256)
    # an explicit null head_dim means dim // n_head in this form (upstream's __post_init__)
    assert parse_config({"model_type": "dual_ar", "dim": 512, "n_head": 4, "head_dim": None,
                         "vocab_size": 100}).slow.head_dim == 128


@pytest.mark.parametrize(("data", "message"), [
    ({"model_type": "llama"}, "unsupported model_type 'llama'"),
    ({}, "unsupported model_type None"),
    (s2(text_config__dim=...), "text_config is missing the required key 'dim'"),
    (s2(audio_decoder_config__num_codebooks=...), "audio_decoder_config is missing the required key 'num_codebooks'"),
    (s2(audio_decoder_config=...), "needs the objects 'text_config' and 'audio_decoder_config'"),
    (s2(text_config__n_local_heads=5), "n_head (32) must be a multiple of n_local_heads (5)"),
    (s2(text_config__n_layer=0), "n_layer must be a positive integer, got 0"),
    (s2(text_config__norm_eps=-1), "norm_eps must be a positive number"),
    (s2(text_config__attention_qk_norm="yes"), "qk_norm must be true or false"),
    (s2(semantic_end_token_id=155776), "semantic token range 151678..155776"),
    (s2(semantic_start_token_id=155000, semantic_end_token_id=154000), "semantic token range"),
    (s2(eos_token_id=200000), "im_end_id 200000 is outside the vocabulary"),
])
def test_bad_configs_say_what_is_wrong(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as exc:
        parse_config(data)
    assert message in str(exc.value)


def test_configs_are_frozen() -> None:
    c = parse_config(S2_CONFIG)
    with pytest.raises(AttributeError):
        c.vocab_size = 1  # type: ignore[misc]
    assert isinstance(c, DualARConfig)


def test_load_config_reads_a_folder_or_a_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(S2_CONFIG), encoding="utf-8")
    assert load_config(tmp_path) == load_config(tmp_path / "config.json") == parse_config(S2_CONFIG)


def test_load_config_errors_are_one_line_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="config.json not found"):
        load_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(UserError, match=r"is not valid JSON \(line 1\)"):
        load_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(s2(text_config__n_head=...)), encoding="utf-8")
    with pytest.raises(UserError) as exc:
        load_config(tmp_path)
    assert "bad model config" in str(exc.value) and "'n_head'" in str(exc.value)
    assert "\n" not in str(exc.value)
