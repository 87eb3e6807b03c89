"""Loading checkpoint folders in every layout upstream reads, strictly, and the device/precision policy.

The tiny folders are written here in the published on-disk layout (bf16 tensors under `text_model.model.*` and
`audio_decoder.*`, spec §1.4), so the key remap is exercised exactly as with S2 Pro's files.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from s2studio.engine.s2.device import resolve_device, resolve_dtype, set_threads
from s2studio.engine.weights.checkpoints import load_dual_ar
from s2studio.errors import UserError
from s2studio.model.config import parse_config
from s2studio.model.dual_ar import DualAR

SEM = (40, 55)
CONFIG: dict[str, Any] = {
    "model_type": "fish_qwen3_omni", "eos_token_id": 30,
    "semantic_start_token_id": SEM[0], "semantic_end_token_id": SEM[1],
    "text_config": {"vocab_size": 64, "n_layer": 2, "n_head": 8, "n_local_heads": 2, "head_dim": 16, "dim": 64,
                    "intermediate_size": 192, "rope_base": 1000000, "norm_eps": 1e-6, "max_seq_len": 256,
                    "tie_word_embeddings": True, "attention_qk_norm": True},
    "audio_decoder_config": {"vocab_size": 16, "num_codebooks": 10, "n_layer": 2, "dim": 64, "n_head": 8,
                             "n_local_heads": 2, "head_dim": 16, "intermediate_size": 192, "attention_qk_norm": False,
                             "text_dim": 64, "max_seq_len": 11, "rope_base": 1000000, "norm_eps": 1e-6},
}


def published_name(key: str) -> str:
    """The module's key as S2's safetensors store it (the inverse of upstream's remap)."""
    if key.startswith("codebook_embeddings."):
        return "audio_decoder." + key
    if key.startswith("fast_"):
        return "audio_decoder." + key[len("fast_"):]
    return "text_model.model." + key


def random_weights(config: dict[str, Any], seed: int = 0) -> dict[str, torch.Tensor]:
    """Module-named bf16 weights of a random model of `config`."""
    torch.manual_seed(seed)
    model = DualAR(parse_config(config))
    out = {}
    for name, t in model.state_dict().items():
        if name.endswith("norm.weight"):
            t = 1 + 0.1 * torch.randn_like(t)
        out[name] = t.to(torch.bfloat16).contiguous()
    return out


def write_folder(folder: Path, config: dict[str, Any], layout: str = "single", seed: int = 0,
                 weights: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """A model folder in `layout`: "single" (model.safetensors), "sharded" (index + 2 shards) or "pth"."""
    folder.mkdir(parents=True, exist_ok=True)
    weights = random_weights(config, seed) if weights is None else weights
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    if layout == "pth":
        # what upstream's save_pretrained writes: `model.`-prefixed keys, possibly a state_dict wrapper
        torch.save({"state_dict": {"model." + k: v for k, v in weights.items()}}, folder / "model.pth")
        return weights
    published = {published_name(k): v for k, v in weights.items()}
    if layout == "single":
        save_file(published, folder / "model.safetensors")
    else:
        names = sorted(published)
        halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
        for file, keys in halves.items():
            save_file({k: published[k] for k in keys}, folder / file)
        index = {"metadata": {}, "weight_map": {k: f for f, keys in halves.items() for k in keys}}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    return weights


def load(folder: Path, **kwargs: Any) -> DualAR:
    kwargs.setdefault("semantic_range", None)
    kwargs.setdefault("im_end_id", None)
    return load_dual_ar(folder, **kwargs)


def logits_of(model: DualAR) -> tuple[torch.Tensor, torch.Tensor]:
    model.setup_caches(64, torch.float32)
    g = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, 16, (1, 11, 9), generator=g)
    tokens[0, 0] = torch.tensor([1, 2, 3, 40, 41, 42, 50, 55, 44])
    logits, hidden = model.forward_slow(tokens, torch.arange(9))
    return logits, model.forward_fast(hidden, 0)


# ----------------------------------------------------------------------------- layouts


def test_all_three_layouts_load_the_same_model(tmp_path: Path) -> None:
    dual_ar = {"model_type": "dual_ar", **{k: v for k, v in CONFIG["text_config"].items()},
               "codebook_size": 16, "num_codebooks": 10, "n_fast_layer": 2, "fast_attention_qk_norm": False,
               "semantic_begin_id": SEM[0], "semantic_end_id": SEM[1], "scale_codebook_embeddings": True,
               "norm_fastlayer_input": True}
    weights = write_folder(tmp_path / "single", CONFIG, "single")
    write_folder(tmp_path / "sharded", CONFIG, "sharded", weights=weights)
    write_folder(tmp_path / "pth", dual_ar, "pth", weights=weights)
    models = [load(tmp_path / name) for name in ("single", "sharded", "pth")]
    assert models[0].config == models[1].config
    assert models[2].config == dataclasses.replace(models[0].config, im_end_id=None)  # dual_ar has no eos key
    for model in models:
        state = model.state_dict()
        assert state.keys() == weights.keys()
        assert all(torch.equal(state[k], weights[k].float()) for k in weights)  # bf16 values, exact in fp32
        assert all(t.dtype == torch.float32 for t in state.values())
    first = logits_of(models[0])
    for model in models[1:]:
        assert all(torch.equal(a, b) for a, b in zip(first, logits_of(model), strict=True))


def test_loaded_model_is_real_and_frozen(tmp_path: Path) -> None:
    write_folder(tmp_path, CONFIG)
    model = load(tmp_path)
    tensors = [*model.parameters(), *model.buffers()]
    assert tensors and not any(t.is_meta for t in tensors)
    assert all(t.device.type == "cpu" for t in tensors)
    assert not any(p.requires_grad for p in model.parameters()) and not model.training
    # RoPE tables: built in bf16, cast with the model
    assert model.freqs_cis.dtype == torch.float32 and model.freqs_cis.shape == (256, 8, 2)
    assert torch.equal(model.freqs_cis, model.freqs_cis.to(torch.bfloat16).float())


def test_load_assigns_the_read_tensors_without_copying(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Meta-device construction + assign: in the checkpoint's own dtype the model holds the very tensors read."""
    import s2studio.engine.weights.checkpoints as checkpoints

    write_folder(tmp_path, CONFIG)
    read: dict[str, torch.Tensor] = {}
    real = checkpoints.read_weights

    def spy(folder: Path) -> tuple[dict[str, torch.Tensor], str]:
        weights, source = real(folder)
        read.update(weights)
        return weights, source

    monkeypatch.setattr(checkpoints, "read_weights", spy)
    model = load(tmp_path, dtype=torch.bfloat16)
    params = dict(model.named_parameters())
    assert params.keys() == read.keys()
    assert all(params[k].data_ptr() == read[k].data_ptr() for k in read)


def test_precision_choices(tmp_path: Path) -> None:
    write_folder(tmp_path, CONFIG)
    assert load(tmp_path, dtype=resolve_dtype("auto", torch.device("cpu"))).embeddings.weight.dtype == torch.float32
    bf16 = load(tmp_path, dtype=torch.bfloat16)
    assert {t.dtype for t in bf16.state_dict().values()} == {torch.bfloat16}
    assert bf16.freqs_cis.dtype == torch.bfloat16


def test_pth_needs_weights_only(tmp_path: Path) -> None:
    write_folder(tmp_path, CONFIG, "pth")
    data = torch.load(tmp_path / "model.pth", weights_only=True)
    data["trainer"] = Path("/x")  # an arbitrary object: weights_only must refuse to unpickle it
    torch.save(data, tmp_path / "model.pth")
    with pytest.raises(UserError, match="refusing to load .*model.pth: it holds more than tensors"):
        load(tmp_path)


def test_pth_strips_model_prefix_everywhere_and_drops_audio_keys(tmp_path: Path) -> None:
    weights = random_weights(CONFIG)
    write_folder(tmp_path, CONFIG, "pth", weights=weights)
    state = torch.load(tmp_path / "model.pth", weights_only=True)["state_dict"]
    state["model.audio_projector.weight"] = torch.zeros(2, 2)  # dropped: contains `audio_`
    # `model.` is replaced everywhere, not only as a prefix (upstream's str.replace)
    state["model.fast_output.weight"] = state.pop("model.fast_output.weight")
    plain = {k: v for k, v in state.items()}
    torch.save(plain, tmp_path / "model.pth")  # no state_dict wrapper this time
    model = load(tmp_path)
    assert torch.equal(model.fast_output.weight, weights["fast_output.weight"].float())


def test_legacy_separate_q_k_v_are_fused(tmp_path: Path) -> None:
    weights = random_weights(CONFIG)
    write_folder(tmp_path / "fused", CONFIG, weights=weights)
    legacy = dict(weights)
    for prefix in ("layers.0.attention.", "fast_layers.1.attention."):
        wq, wk, wv = legacy.pop(prefix + "wqkv.weight").split([128, 32, 32])
        legacy.update({prefix + "wq.weight": wq, prefix + "wk.weight": wk, prefix + "wv.weight": wv})
    write_folder(tmp_path / "legacy", CONFIG, weights=legacy)
    a, b = load(tmp_path / "fused"), load(tmp_path / "legacy")
    assert all(torch.equal(x, y) for x, y in zip(logits_of(a), logits_of(b), strict=True))


@pytest.mark.parametrize("variant", ["untied", "fast_dim", "fast_qk_norm"])
def test_upstream_variants_load_strictly(tmp_path: Path, variant: str) -> None:
    config = copy.deepcopy(CONFIG)
    if variant == "untied":
        config["text_config"]["tie_word_embeddings"] = False
        expect = "text_model.model.output.weight"
    elif variant == "fast_dim":
        config["audio_decoder_config"].update(dim=32, n_head=4, head_dim=8, intermediate_size=96)
        expect = "audio_decoder.project_in.bias"
    else:
        config["audio_decoder_config"]["attention_qk_norm"] = True
        expect = "audio_decoder.layers.1.attention.k_norm.weight"
    weights = write_folder(tmp_path, config)
    assert expect in {published_name(k) for k in weights}
    model = load(tmp_path)
    logits, fast_logits = logits_of(model)
    assert logits.shape == (1, 1, 64) and fast_logits.shape == (1, 1, 16)
    # the same files under the S2 config must fail loudly, not load half a model
    (tmp_path / "config.json").write_text(json.dumps(CONFIG), encoding="utf-8")
    with pytest.raises(UserError, match="does not match config.json"):
        load(tmp_path)


def test_tokenizer_values_override_the_config(tmp_path: Path) -> None:
    write_folder(tmp_path, CONFIG)
    model = load(tmp_path, semantic_range=(41, 56), im_end_id=31, max_seq_len=128)
    c = model.config
    assert (c.semantic_begin_id, c.semantic_end_id, c.im_end_id, c.slow.max_seq_len) == (41, 56, 31, 128)
    assert model.freqs_cis.shape[0] == 128
    with pytest.raises(UserError, match="semantic token range 41..64"):
        load(tmp_path, semantic_range=(41, 64))


# ----------------------------------------------------------------------------- bad folders


def test_missing_and_unexpected_keys_are_named(tmp_path: Path) -> None:
    weights = random_weights(CONFIG)
    del weights["layers.1.ffn_norm.weight"]
    weights["layers.0.attention.extra.weight"] = torch.zeros(3)
    write_folder(tmp_path, CONFIG, weights=weights)
    with pytest.raises(UserError) as exc:
        load(tmp_path)
    message = str(exc.value)
    assert message == ("model.safetensors does not match config.json: 1 missing key(s): layers.1.ffn_norm.weight; "
                       "1 unexpected key(s): layers.0.attention.extra.weight")


def test_many_missing_keys_are_counted(tmp_path: Path) -> None:
    weights = {k: v for k, v in random_weights(CONFIG).items() if not k.startswith("fast_layers.")}
    write_folder(tmp_path, CONFIG, "sharded", weights=weights)
    with pytest.raises(UserError, match=r"model.safetensors.index.json does not match config.json: "
                                        r"14 missing key\(s\): fast_layers.0.attention.wo.weight, .* and 9 more$"):
        load(tmp_path)


def test_wrong_shapes_are_named(tmp_path: Path) -> None:
    config = copy.deepcopy(CONFIG)
    write_folder(tmp_path, config)
    config["text_config"]["intermediate_size"] = 256
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(UserError, match=r"6 tensor\(s\) of the wrong shape: layers.0.feed_forward.w1.weight "
                                        r"\(192, 64\) \(config says \(256, 64\)\)"):
        load(tmp_path)


def test_bad_folders_give_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist or is not a folder"):
        load(tmp_path / "nope")
    tmp_path.joinpath("empty").mkdir()
    with pytest.raises(UserError, match="config.json not found"):
        load(tmp_path / "empty")
    (tmp_path / "empty" / "config.json").write_text(json.dumps(CONFIG), encoding="utf-8")
    with pytest.raises(UserError, match="holds no language-model weights: expected model.safetensors.index.json, "
                                        "model.safetensors or model.pth"):
        load(tmp_path / "empty")

    bad_type = copy.deepcopy(CONFIG)
    bad_type["model_type"] = "naive"
    write_folder(tmp_path / "type", CONFIG)
    (tmp_path / "type" / "config.json").write_text(json.dumps(bad_type), encoding="utf-8")
    with pytest.raises(UserError, match="unsupported model_type 'naive'"):
        load(tmp_path / "type")


def test_truncated_and_missing_shards(tmp_path: Path) -> None:
    write_folder(tmp_path / "cut", CONFIG)
    data = (tmp_path / "cut" / "model.safetensors").read_bytes()
    (tmp_path / "cut" / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match="cannot read .*model.safetensors: not a complete safetensors file"):
        load(tmp_path / "cut")

    write_folder(tmp_path / "shards", CONFIG, "sharded")
    (tmp_path / "shards" / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(UserError, match=r"names shard file\(s\) that are missing .*: model-00002-of-00002"):
        load(tmp_path / "shards")
    (tmp_path / "shards" / "model.safetensors.index.json").write_text("{}", encoding="utf-8")
    with pytest.raises(UserError, match="has no usable 'weight_map'"):
        load(tmp_path / "shards")

    write_folder(tmp_path / "pth", CONFIG, "pth")
    data = (tmp_path / "pth" / "model.pth").read_bytes()
    (tmp_path / "pth" / "model.pth").write_bytes(data[:100])
    with pytest.raises(UserError, match="cannot read .*model.pth: not a complete torch checkpoint"):
        load(tmp_path / "pth")


# ----------------------------------------------------------------------------- device policy


def test_device_and_precision_policy() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type in ("cpu", "cuda", "mps")
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("fp32", torch.device("cuda")) == torch.float32
    assert resolve_dtype("bf16", torch.device("cpu")) == torch.bfloat16
    with pytest.raises(UserError, match="unknown device 'tpu'; choose one of auto, cpu, cuda, mps"):
        resolve_device("tpu")
    with pytest.raises(UserError, match="unknown precision 'int8'"):
        resolve_dtype("int8", torch.device("cpu"))
    with pytest.raises(UserError, match="--threads must be a positive integer"):
        set_threads(0)
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="no CUDA GPU is available"):
            resolve_device("cuda")


# ----------------------------------------------------------------------------- a hostile index


def _index(folder: Path, weight_map: dict[str, str]) -> None:
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}),
                                                         encoding="utf-8")


@pytest.fixture()
def opened(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file the loader hands to safetensors."""
    import s2studio.engine.weights.checkpoints as checkpoints

    paths: list[Path] = []
    real = checkpoints.load_file

    def spy(path, device="cpu"):
        paths.append(Path(path))
        return real(path, device=device)

    monkeypatch.setattr(checkpoints, "load_file", spy)
    return paths


def test_shard_names_are_confined_to_the_model_folder(tmp_path: Path, opened: list[Path]) -> None:
    """An index may only name files inside its folder: each hostile entry is refused, named, before any file is
    read (the outside file here is a valid shard, so opening it would have loaded it)."""
    folder = tmp_path / "models" / "m"
    write_folder(folder, CONFIG, "sharded")
    outside = tmp_path / "outside.safetensors"
    outside.write_bytes((folder / "model-00001-of-00002.safetensors").read_bytes())
    (folder / "link.safetensors").symlink_to(outside)
    index = json.loads((folder / "model.safetensors.index.json").read_text(encoding="utf-8"))["weight_map"]
    first = sorted(index)[0]
    hostile = {"../../outside.safetensors": "is not a file name inside the model folder",
               "/etc/passwd": "is not a file name inside the model folder",
               "sub/../../../outside.safetensors": "is not a file name inside the model folder",
               "shard\x1b]0;pwned\x07.safetensors": "is not a file name inside the model folder",
               "link.safetensors": "leads outside the model folder (a symlink)"}
    for name, why in hostile.items():
        _index(folder, {**index, first: name})
        with pytest.raises(UserError) as exc:
            load(folder)
        message = str(exc.value)
        assert message.startswith(f"model.safetensors.index.json: the shard entry {name!r} (for '{first}') {why}")
        assert "\x1b" not in message and "\n" not in message
    assert opened == []


def test_a_hugging_face_snapshot_may_link_into_its_blobs(tmp_path: Path, opened: list[Path]) -> None:
    """The hub cache keeps files in `blobs/` and links them from `snapshots/REV/`: that layout still loads."""
    repo = tmp_path / "models--fishaudio--s2-pro"
    source = tmp_path / "src"
    weights = write_folder(source, CONFIG, "sharded")
    snapshot, blobs = repo / "snapshots" / "abc123", repo / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for i, file in enumerate(sorted(source.iterdir())):
        (blobs / f"blob{i}").write_bytes(file.read_bytes())
        (snapshot / file.name).symlink_to(Path("../../blobs") / f"blob{i}")
    model = load(snapshot)
    assert all(torch.equal(model.state_dict()[k], v.float()) for k, v in weights.items())
    assert [p.name for p in opened] == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    # ... but not into another repository's blobs
    other = tmp_path / "models--someone--else" / "blobs"
    other.mkdir(parents=True)
    (other / "x").write_bytes((blobs / "blob1").read_bytes())
    (snapshot / "model-00001-of-00002.safetensors").unlink()
    (snapshot / "model-00001-of-00002.safetensors").symlink_to(other / "x")
    with pytest.raises(UserError, match="leads outside the model folder"):
        load(snapshot)


def test_refusals_never_advise_loading_unsafely(tmp_path: Path) -> None:
    """torch's and numpy's messages suggest `weights_only=False` / `allow_pickle=True`; ours say what to do."""
    write_folder(tmp_path, CONFIG, "pth")
    data = torch.load(tmp_path / "model.pth", weights_only=True)
    data["trainer"] = Path("/x")
    torch.save(data, tmp_path / "model.pth")
    with pytest.raises(UserError) as exc:
        load(tmp_path)
    message = str(exc.value)
    assert "it holds more than tensors (a pathlib.PosixPath)" in message and "model.safetensors" in message
    for advice in ("weights_only", "allow_pickle", "trust", "\x1b", "\n"):
        assert advice not in message
