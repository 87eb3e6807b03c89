"""The demo model generator writes S2's exact on-disk layout, deterministically (spec §1, §2, §12)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from tokenizers import Tokenizer

from s2studio.cli import main as cli_main
from s2studio.demo_model import SIZES, folder_digest, write_demo_model
from s2studio.demo_model.language_model import tensor_specs
from s2studio.demo_model.tokenizer_json import FISH_ADDED_TOKENS, QWEN3_ADDED_TOKENS
from s2studio.errors import UserError

LM_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "README.md")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_demo_model(tmp_path_factory.mktemp("tiny") / "m", seed=5, codec=False)


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for file in sorted(folder.glob("model*.safetensors")):
        with safe_open(str(file), "pt") as f:
            out.update({k: f.get_tensor(k) for k in f.keys()})
    return out


def _bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


# ----------------------------------------------------------------------------- determinism


def test_same_seed_same_bytes(tmp_path: Path, tiny: Path) -> None:
    again = write_demo_model(tmp_path / "again", seed=5, codec=False)
    assert _bytes(again) == _bytes(tiny)


def test_other_seed_other_weights_same_tokenizer(tmp_path: Path, tiny: Path) -> None:
    other = write_demo_model(tmp_path / "other", seed=6, codec=False)
    a, b = folder_digest(tiny), folder_digest(other)
    assert a["weights"] != b["weights"]
    assert a["tokenizer.json"] == b["tokenizer.json"] and a["config.json"] == b["config.json"]


def test_sharding_changes_files_not_tensors(tmp_path: Path, tiny: Path) -> None:
    sharded = write_demo_model(tmp_path / "sharded", seed=5, shards=3, codec=False)
    assert folder_digest(sharded) == folder_digest(tiny)


# ----------------------------------------------------------------------------- layout


def test_tiny_layout_names_shapes_dtypes(tiny: Path) -> None:
    assert {p.name for p in tiny.iterdir()} == {*LM_FILES, "model.safetensors"}
    config = json.loads((tiny / "config.json").read_text())
    tc, ac = config["text_config"], config["audio_decoder_config"]
    assert config["model_type"] == "fish_qwen3_omni"
    assert (tc["dim"], tc["n_layer"], tc["n_head"], tc["n_local_heads"], tc["head_dim"], tc["intermediate_size"]) == (64, 2, 8, 2, 16, 192)
    assert (ac["dim"], ac["n_layer"], ac["num_codebooks"], ac["vocab_size"], ac["attention_qk_norm"]) == (64, 2, 10, 4096, False)
    assert tc["attention_qk_norm"] is True and tc["tie_word_embeddings"] is True and tc["max_seq_len"] == 4096
    v = tc["vocab_size"]
    tensors = _tensors(tiny)
    assert all(t.dtype == torch.bfloat16 for t in tensors.values())
    expected = {
        "text_model.model.embeddings.weight": (v, 64),
        "text_model.model.layers.1.attention.wqkv.weight": ((8 + 2 * 2) * 16, 64),
        "text_model.model.layers.1.attention.wo.weight": (64, 128),
        "text_model.model.layers.0.attention.q_norm.weight": (16,),
        "text_model.model.layers.0.attention.k_norm.weight": (16,),
        "text_model.model.layers.0.feed_forward.w2.weight": (64, 192),
        "text_model.model.norm.weight": (64,),
        "audio_decoder.codebook_embeddings.weight": (40960, 64),
        "audio_decoder.embeddings.weight": (4096, 64),
        "audio_decoder.layers.1.feed_forward.w1.weight": (192, 64),
        "audio_decoder.norm.weight": (64,),
        "audio_decoder.output.weight": (4096, 64),
    }
    for name, shape in expected.items():
        assert tuple(tensors[name].shape) == shape, name
    # S2's structure: slow 2 + 9 per layer, fast 3 + 7 per layer, plus the codebook table (358 for S2, §1.4)
    assert len(tensors) == 2 + 9 * 2 + 3 + 7 * 2 + 1
    # tied head, identity project_in, no fast q/k norms: none of those tensors exist
    assert not any(k.startswith("text_model.model.output") or "project_in" in k for k in tensors)
    assert not any(k.startswith("audio_decoder.") and ("q_norm" in k or "k_norm" in k) for k in tensors)


def test_s2pro_shape_has_358_tensors_of_published_sizes() -> None:
    size = SIZES["s2pro"]
    specs = tensor_specs(size, 155776)
    assert len(specs) == 358
    shapes = {s.name: s.shape for s in specs}
    assert shapes["text_model.model.layers.35.attention.wqkv.weight"] == (6144, 2560)
    assert shapes["text_model.model.layers.0.attention.wo.weight"] == (2560, 4096)
    assert shapes["audio_decoder.codebook_embeddings.weight"] == (40960, 2560)
    params = sum(math.prod(s.shape) for s in specs)
    assert 4.5e9 < params < 4.6e9  # spec §1.3: ≈ 4.56 B


def test_index_is_consistent_with_shards(tmp_path: Path) -> None:
    folder = write_demo_model(tmp_path / "m", seed=1, shards=3, codec=False)
    shards = sorted(p.name for p in folder.glob("model-*.safetensors"))
    assert shards == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert not (folder / "model.safetensors").exists()
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    tensors: dict[str, str] = {}
    for shard in shards:
        with safe_open(str(folder / shard), "pt") as f:
            assert f.metadata() == {"format": "pt"}
            tensors.update({k: shard for k in f.keys()})
    assert index["weight_map"] == tensors
    assert list(index["weight_map"]) == sorted(index["weight_map"])
    total = sum(t.numel() * t.element_size() for t in _tensors(folder).values())
    assert index["metadata"]["total_size"] == total


def test_variants_add_the_tensors_upstream_expects(tmp_path: Path) -> None:
    folder = write_demo_model(tmp_path / "v", seed=1, tie_word_embeddings=False, fast_dim=48,
                              fast_attention_qk_norm=True, codec=False)
    tensors = _tensors(folder)
    config = json.loads((folder / "config.json").read_text())
    v = config["text_config"]["vocab_size"]
    assert tuple(tensors["text_model.model.output.weight"].shape) == (v, 64)
    assert tuple(tensors["audio_decoder.project_in.weight"].shape) == (48, 64)
    assert tuple(tensors["audio_decoder.project_in.bias"].shape) == (48,)
    assert tuple(tensors["audio_decoder.layers.0.attention.q_norm.weight"].shape) == (16,)
    assert tuple(tensors["audio_decoder.embeddings.weight"].shape) == (4096, 48)
    assert config["text_config"]["tie_word_embeddings"] is False
    assert config["audio_decoder_config"]["dim"] == 48 and config["audio_decoder_config"]["attention_qk_norm"] is True


def test_pth_format_writes_module_names_and_flat_config(tmp_path: Path, tiny: Path) -> None:
    folder = write_demo_model(tmp_path / "p", seed=5, weights_format="pth", codec=False)
    assert not list(folder.glob("*.safetensors"))
    state = torch.load(folder / "model.pth", map_location="cpu", weights_only=True)
    assert "embeddings.weight" in state and "fast_layers.0.attention.wqkv.weight" in state
    assert "codebook_embeddings.weight" in state and not any("audio_" in k for k in state)
    assert all(t.dtype == torch.bfloat16 for t in state.values())
    # the same numbers as the safetensors folder of the same seed, under the remapped names
    published = _tensors(tiny)
    assert torch.equal(state["fast_output.weight"], published["audio_decoder.output.weight"])
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "dual_ar"
    assert config["scale_codebook_embeddings"] is True and config["norm_fastlayer_input"] is True
    assert config["fast_attention_qk_norm"] is False and config["n_fast_layer"] == 2
    assert config["semantic_end_id"] - config["semantic_begin_id"] == 4095


def test_rewrite_leaves_no_stale_checkpoint(tmp_path: Path) -> None:
    folder = write_demo_model(tmp_path / "m", seed=1, shards=2, codec=False)
    write_demo_model(folder, seed=1, codec=False)
    assert sorted(p.name for p in folder.glob("model*")) == ["model.safetensors"]


def test_bad_options_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="unknown demo model size 'huge'"):
        write_demo_model(tmp_path / "a", size="huge")
    with pytest.raises(UserError, match="single file"):
        write_demo_model(tmp_path / "b", weights_format="pth", shards=2)
    with pytest.raises(UserError, match="--shards must be between 1 and"):
        write_demo_model(tmp_path / "c", shards=0)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="not a folder"):
        write_demo_model(tmp_path / "file")


# ----------------------------------------------------------------------------- tokenizer


def test_tokenizer_ids_in_upstream_order(tiny: Path) -> None:
    tok = Tokenizer.from_file(str(tiny / "tokenizer.json"))
    config = json.loads((tiny / "config.json").read_text())
    base = tok.token_to_id("<|endoftext|>")
    qwen = [t for t, _ in QWEN3_ADDED_TOKENS]
    assert len(qwen) == 26 and qwen[-1] == "</think>"
    assert [tok.token_to_id(t) for t in qwen] == list(range(base, base + 26))  # S2: 151643..151668
    assert [tok.token_to_id(t) for t in FISH_ADDED_TOKENS] == list(range(base + 26, base + 35))  # 151669..151677
    sem0 = tok.token_to_id("<|semantic:0|>")
    assert sem0 == base + 35
    assert [tok.token_to_id(f"<|semantic:{i}|>") for i in range(4096)] == list(range(sem0, sem0 + 4096))
    count = tok.get_vocab_size(with_added_tokens=True)
    assert count == sem0 + 4096
    v = config["text_config"]["vocab_size"]
    assert v % 8 == 0 and count <= v < count + 8
    assert (config["eos_token_id"], config["pad_token_id"], config["audio_pad_token_id"]) == (
        tok.token_to_id("<|im_end|>"), tok.token_to_id("<|pad|>"), tok.token_to_id("<|audio_pad|>"))
    assert (config["semantic_start_token_id"], config["semantic_end_token_id"]) == (sem0, sem0 + 4095)
    assert tok.token_to_id("<|speaker:0|>") is None


def test_tokenizer_is_byte_level_bpe_with_merges(tiny: Path) -> None:
    doc = json.loads((tiny / "tokenizer.json").read_text())
    assert doc["normalizer"] == {"type": "NFC"}
    assert doc["model"]["type"] == "BPE" and 300 <= len(doc["model"]["merges"]) <= 1000
    assert doc["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"].startswith("(?i:'s|'t|'re|'ve|'m|'ll|'d)")
    tok = Tokenizer.from_file(str(tiny / "tokenizer.json"))
    enc = tok.encode("<|speaker:0|>Hello, the world!", add_special_tokens=False)
    assert len(enc.tokens) < len("<|speaker:0|>Hello, the world!")  # merges apply
    assert "Ġthe" in enc.tokens
    speaker = tok.encode("<|speaker:0|>", add_special_tokens=False).ids
    assert len(speaker) >= 3  # ordinary text, not one added token
    assert tok.encode("\n", add_special_tokens=False).ids == [198]  # as in Qwen's vocabulary
    for text in ("<|im_start|>user\n<|speaker:1|>[laugh] Grüße, こんにちは 123<|im_end|>\n", "a  b\t\r\nc"):
        ids = tok.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids, skip_special_tokens=False) == text
    im = tok.encode("<|im_start|>assistant\n<|voice|><|semantic:7|>", add_special_tokens=False).ids
    assert im[0] == tok.token_to_id("<|im_start|>") and im[-2:] == [tok.token_to_id("<|voice|>"), tok.token_to_id("<|semantic:7|>")]


def test_tokenizer_side_files_are_plausible(tiny: Path) -> None:
    cfg = json.loads((tiny / "tokenizer_config.json").read_text())
    assert cfg["eos_token"] == "<|im_end|>" and cfg["pad_token"] == "<|pad|>"
    tok = Tokenizer.from_file(str(tiny / "tokenizer.json"))
    assert cfg["added_tokens_decoder"][str(tok.token_to_id("<|voice|>"))]["content"] == "<|voice|>"
    smap = json.loads((tiny / "special_tokens_map.json").read_text())
    assert "<|voice|>" in smap["additional_special_tokens"]
    assert "random" in (tiny / "README.md").read_text()


def test_config_keeps_the_keys_upstream_ignores(tiny: Path) -> None:
    config = json.loads((tiny / "config.json").read_text())
    assert {"dtype", "eos_token_id", "pad_token_id", "audio_pad_token_id", "sample_rate"} <= set(config)
    ac = config["audio_decoder_config"]
    assert (ac["max_seq_len"], ac["text_dim"], ac["rope_base"], ac["norm_eps"], ac["tie_word_embeddings"]) == (11, 64, 1e6, 1e-6, False)


# ----------------------------------------------------------------------------- command line


def test_cli_writes_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["demo-model", str(tmp_path / "cli"), "--seed", "5", "--shards", "2", "--no-codec"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "cli")
    assert (tmp_path / "cli" / "model.safetensors.index.json").is_file()


def test_cli_reports_bad_options_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["demo-model", str(tmp_path / "x"), "--format", "pth", "--shards", "2", "--no-codec"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "s2studio demo-model: error: a model.pth checkpoint is a single file; use --shards 1 with --format pth"


def test_codec_checkpoint_is_delegated_with_the_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    codec_weights = pytest.importorskip("s2studio.demo_model.codec_weights")
    calls: list[tuple[Path, int, str]] = []

    def fake(path: Path, *, seed: int, size: str = "tiny") -> None:
        calls.append((path, seed, size))
        path.write_bytes(b"codec")

    monkeypatch.setattr(codec_weights, "write_codec_checkpoint", fake)
    folder = write_demo_model(tmp_path / "c", seed=2)
    assert calls == [(folder / "codec.pth", 2, "tiny")]
    assert "codec: codec.pth" in (folder / "README.md").read_text()
