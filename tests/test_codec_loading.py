"""`load_codec`: every storage variant upstream accepts loads to the same weights; anything else is a clear
UserError; weight norm folds to the very bits upstream's parametrization computes; the fingerprint tracks the
weights; the architecture is S2's to the tensor (spec s2-codec.md §6, §11.1)."""

from __future__ import annotations

import pickle
from fractions import Fraction
from pathlib import Path

import pytest
import torch
from torch import nn

from s2studio.codec.codec import Codec
from s2studio.codec.config import S2, TINY
from s2studio.codec.loading import _stale_names, codec_fingerprint, load_codec
from s2studio.demo_model.codec_weights import codec_state, write_codec_checkpoint
from s2studio.errors import UserError

SEED = 7


@pytest.fixture(scope="module")
def state() -> dict[str, torch.Tensor]:
    return codec_state(TINY, SEED)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Codec:
    folder = tmp_path_factory.mktemp("ref")
    write_codec_checkpoint(folder / "codec.pth", seed=SEED, size="tiny")
    return load_codec(folder)


def save(tmp_path: Path, obj) -> Path:
    path = tmp_path / "codec.pth"
    torch.save(obj, path)
    return path


def legacy(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k.replace(".parametrizations.weight.original0", ".weight_g")
             .replace(".parametrizations.weight.original1", ".weight_v"): v for k, v in state.items()}


VARIANTS = {
    "wrapped": lambda s: {"state_dict": s},
    "generator_prefix": lambda s: {**{"generator." + k: v for k, v in s.items()}, "discriminator.x": torch.ones(1)},
    "wrapped_and_prefixed": lambda s: {"state_dict": {"generator." + k: v for k, v in s.items()}},
    "legacy_weight_norm": legacy,
    "without_stale_buffers": lambda s: {k: v for k, v in s.items() if not k.endswith(("freqs_cis", "causal_mask"))},
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_variants_load_to_the_same_weights(tmp_path: Path, state, reference: Codec, variant: str) -> None:
    codec = load_codec(save(tmp_path, VARIANTS[variant](dict(state))))
    assert codec.config == TINY
    ours, ref = codec.state_dict(), reference.state_dict()
    assert ours.keys() == ref.keys()
    assert all(torch.equal(ours[k], ref[k]) for k in ref)
    assert codec_fingerprint(codec) == codec_fingerprint(reference)


def test_folder_and_file_paths(tmp_path: Path, state, reference: Codec) -> None:
    save(tmp_path, state)
    assert codec_fingerprint(load_codec(tmp_path)) == codec_fingerprint(reference)
    assert codec_fingerprint(load_codec(tmp_path / "codec.pth")) == codec_fingerprint(reference)


def test_weight_norm_folds_to_upstreams_bits(state, reference: Codec) -> None:
    """Upstream recomputes the weight each call through `parametrizations.weight_norm` (and dac's legacy
    `weight_norm`); our once-folded weights must be those very bits, for convs and transposed convs."""
    for owner, ours, make in [
        ("decoder.model.1.block.1.conv", reference.decoder.model[1].block[1].conv.weight,
         lambda: nn.ConvTranspose1d(128, 64, 16, stride=8)),
        ("encoder.block.1.block.0.block.1.conv", reference.encoder.block[1].block[0].block[1].conv.weight,
         lambda: nn.Conv1d(8, 8, 7, dilation=1)),
    ]:
        conv = nn.utils.parametrizations.weight_norm(make(), dim=0)
        conv.parametrizations.weight.original0.data = state[owner + ".parametrizations.weight.original0"]
        conv.parametrizations.weight.original1.data = state[owner + ".parametrizations.weight.original1"]
        assert torch.equal(conv.weight, ours)
    vq = reference.quantizer.quantizer.quantizers[3].in_proj.weight
    g = state["quantizer.quantizer.quantizers.3.in_proj.weight_g"]
    v = state["quantizer.quantizer.quantizers.3.in_proj.weight_v"]
    assert torch.equal(torch._weight_norm(v, g, 0), vq)


def test_fingerprint_follows_the_weights(tmp_path: Path, state, reference: Codec) -> None:
    changed = dict(state)
    changed["quantizer.post_module.norm.weight"] = state["quantizer.post_module.norm.weight"] * 1.0001
    other = load_codec(save(tmp_path, changed))
    assert len(codec_fingerprint(reference)) == 32
    assert codec_fingerprint(other) != codec_fingerprint(reference)


def broken(state: dict[str, torch.Tensor], change: str) -> dict[str, torch.Tensor]:
    s = dict(state)
    if change == "missing":
        del s["decoder.model.5.alpha"]
    elif change == "unexpected":
        s["decoder.model.9.alpha"] = torch.ones(1, 8, 1)
    elif change == "shape":
        s["quantizer.pre_module.norm.weight"] = torch.ones(64)
    elif change == "half_pair":
        del s["decoder.model.0.conv.parametrizations.weight.original0"]
    return s


@pytest.mark.parametrize(("change", "message"), [
    ("missing", "1 missing (e.g. decoder.model.5.alpha)"),
    ("unexpected", "1 unexpected (e.g. decoder.model.9.alpha)"),
    ("shape", "quantizer.pre_module.norm.weight: (64,) vs (128,)"),
    ("half_pair", "half a weight-norm pair at decoder.model.0.conv"),
])
def test_wrong_keys_are_user_errors(tmp_path: Path, state, change: str, message: str) -> None:
    with pytest.raises(UserError) as info:
        load_codec(save(tmp_path, broken(state, change)), config=TINY)
    assert message in str(info.value)


def test_unrecognised_architecture_names_the_problem(tmp_path: Path, state) -> None:
    with pytest.raises(UserError, match="is not S2 Pro's codec: .*missing"):
        load_codec(save(tmp_path, broken(state, "missing")))


def test_unreadable_files_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no codec found"):
        load_codec(tmp_path)
    (tmp_path / "codec.pth").write_text("not a checkpoint")
    with pytest.raises(UserError, match="not a readable PyTorch checkpoint"):
        load_codec(tmp_path)
    torch.save({"weights": Fraction(1, 3)}, tmp_path / "codec.pth")  # an arbitrary class: refused by weights_only
    with pytest.raises(UserError, match="weights_only"):
        load_codec(tmp_path)
    torch.save([torch.ones(1)], tmp_path / "codec.pth")
    with pytest.raises(UserError, match="not a codec state dict"):
        load_codec(tmp_path)
    with (tmp_path / "evil.pth").open("wb") as f:
        pickle.dump({"a": 1}, f)
    with pytest.raises(UserError):
        load_codec(tmp_path / "evil.pth")


def test_refusals_never_advise_loading_unsafely(tmp_path: Path) -> None:
    """torch's own message for a refused pickle says how to load it anyway (`weights_only=False`); ours does not."""
    torch.save({"weights": Fraction(1, 3)}, tmp_path / "codec.pth")
    with (tmp_path / "raw.pth").open("wb") as f:
        pickle.dump({"a": Fraction(1, 3)}, f)
    for file in (tmp_path / "codec.pth", tmp_path / "raw.pth"):
        with pytest.raises(UserError) as exc:
            load_codec(file)
        message = str(exc.value)
        assert "re-download codec.pth" in message or "use an unmodified codec.pth" in message
        for advice in ("weights_only=False", "allow_pickle", "trust", "add_safe_globals", "\x1b", "\n"):
            assert advice not in message, (file.name, message)


def test_s2_architecture_matches_the_spec() -> None:
    """Spec §6.3/§11.1: 455 tensors after folding, 391,398,385 parameters, six stale buffer names."""
    with torch.device("meta"):
        model = Codec(S2)
    state = model.state_dict()
    assert len(state) == 455
    assert sum(v.numel() for v in state.values()) == 391_398_385
    assert tuple(state["decoder.model.1.block.1.conv.weight"].shape) == (1536, 768, 16)
    assert tuple(state["encoder.block.4.block.5.layers.3.attention.wqkv.weight"].shape) == (3072, 1024)
    assert _stale_names(S2) == {f"{p}.{b}" for p in ("encoder.block.4.block.5", "quantizer.pre_module",
                                                     "quantizer.post_module") for b in ("freqs_cis", "causal_mask")}


def test_writer_produces_upstream_layout(state) -> None:
    """The real file's layout (spec §6.3): 60 parametrized convs, 20 legacy-WN VQ projections, 6 stale
    buffers; 535 live tensors at full size = 400 with the tiny transformers' 1 + 2 + 2 layers (9 tensors each)."""
    assert sum(k.endswith(".parametrizations.weight.original0") for k in state) == 60
    assert sum(k.endswith(".parametrizations.weight.original1") for k in state) == 60
    assert sum(k.endswith(".weight_g") for k in state) == 20
    assert sum(k.endswith(".weight_v") for k in state) == 20
    stale = {k: v for k, v in state.items() if k.endswith(("freqs_cis", "causal_mask"))}
    assert len(stale) == 6
    assert stale["quantizer.pre_module.freqs_cis"].dtype == torch.bfloat16
    assert stale["encoder.block.4.block.5.causal_mask"].dtype == torch.bool
    assert len(state) - 6 == 535 - (4 - 1) * 9 - 2 * (8 - 2) * 9
    assert all(v.dtype == torch.float32 for k, v in state.items() if k not in stale)


def test_other_architectures_are_inferred_from_shapes(tmp_path: Path) -> None:
    """A codec neither S2's nor the tiny one (other widths, layer counts, codebooks) loads with the
    architecture its shapes imply; the window keeps S2's 128."""
    from dataclasses import replace

    other = replace(TINY, encoder_dim=4, encoder_transformer_layers=(0, 0, 0, 2), decoder_dim=64, n_codebooks=5,
                    codebook_size=16, semantic_codebook_size=48, quantizer_layers=3, quantizer_heads=1,
                    quantizer_intermediate=200, quantizer_window=128)
    codec = load_codec(save(tmp_path, codec_state(other, 1)))
    assert codec.config == other
