"""The DualAR forward math on a tiny random model (spec s2-language-model §4, tiny config of §12).

Golden end-to-end codes against the reference port live elsewhere; these tests pin the single formulas and the
invariants that a plausible-looking mistake would break (scaling text positions, half-split RoPE, a mask
narrower than the cache, an untied head, the raw instead of the normed hidden state...).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch.nn import functional as F

from s2studio.model.config import parse_config
from s2studio.model.dual_ar import DualAR
from s2studio.model.rope import apply_rotary_emb, precompute_freqs_cis
from s2studio.model.transformer import RMSNorm, fast_attention

VOCAB, SEM_BEGIN, SEM_END, CODEBOOK, K = 64, 40, 55, 16, 10
MAX_LEN = 512


def tiny_config(**text: object) -> dict:
    return {
        "model_type": "fish_qwen3_omni", "eos_token_id": 30,
        "semantic_start_token_id": SEM_BEGIN, "semantic_end_token_id": SEM_END,
        "text_config": {"vocab_size": VOCAB, "n_layer": 2, "n_head": 8, "n_local_heads": 2, "head_dim": 16,
                        "dim": 64, "intermediate_size": 192, "rope_base": 1000000, "norm_eps": 1e-6,
                        "max_seq_len": MAX_LEN, "tie_word_embeddings": True, "attention_qk_norm": True, **text},
        "audio_decoder_config": {"vocab_size": CODEBOOK, "num_codebooks": K, "n_layer": 2, "dim": 64, "n_head": 8,
                                 "n_local_heads": 2, "head_dim": 16, "intermediate_size": 192,
                                 "attention_qk_norm": False, "max_seq_len": 11, "rope_base": 1000000,
                                 "norm_eps": 1e-6},
    }


def tiny_model(config: dict | None = None, seed: int = 0) -> DualAR:
    """Random weights rounded to bf16 values (as a real checkpoint), norms near 1, fp32, caches ready."""
    torch.manual_seed(seed)
    model = DualAR(parse_config(config or tiny_config()))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif p.dim() > 1:
                p.normal_(0, 0.5 if "embeddings" in name else 0.1)
            p.copy_(p.to(torch.bfloat16).float())
    model.requires_grad_(False)
    model.to(torch.float32)  # as the loader does: casts the bf16 RoPE tables too
    model.setup_caches(MAX_LEN, torch.float32)
    return model


def prompt(length: int, seed: int = 1) -> torch.Tensor:
    """(1, 11, length): text tokens, then semantic tokens with their codes (code 0 = token - SEM_BEGIN)."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.zeros(1, K + 1, length, dtype=torch.long)
    text = length // 3
    tokens[0, 0, :text] = torch.randint(0, SEM_BEGIN, (text,), generator=g)
    tokens[0, 0, text:] = torch.randint(SEM_BEGIN, SEM_END + 1, (length - text,), generator=g)
    tokens[0, 1, text:] = tokens[0, 0, text:] - SEM_BEGIN
    tokens[0, 2:, text:] = torch.randint(0, CODEBOOK, (K - 1, length - text), generator=g)
    return tokens


@pytest.fixture(scope="module")
def model() -> DualAR:
    return tiny_model()


# ----------------------------------------------------------------------------- embedding


def test_embedding_is_the_spec_formula_exactly() -> None:
    m = tiny_model()
    # small integers: every sum is exact in float32, so only the formula (not the summation order) matters
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        m.embeddings.weight.copy_(torch.randint(-8, 9, m.embeddings.weight.shape, generator=g).float())
        table = m.codebook_embeddings.weight
        table.copy_(torch.randint(-8, 9, table.shape, generator=g).float())
    tokens = prompt(12)
    # the range bounds are inclusive; just outside them are text tokens
    tokens[0, 0, :4] = torch.tensor([SEM_BEGIN - 1, SEM_END + 1, SEM_BEGIN, SEM_END])
    tokens[0, 1:, :2] = 7  # codes under text tokens must be ignored
    out = m.embed(tokens)

    expected = torch.empty(1, 12, 64)
    for s in range(12):
        tok = int(tokens[0, 0, s])
        row = m.embeddings.weight[tok].clone()
        if SEM_BEGIN <= tok <= SEM_END:
            for i in range(K):
                row += m.codebook_embeddings.weight[i * CODEBOOK + int(tokens[0, i + 1, s])]
            row = row / math.sqrt(K + 1)  # a division by the Python float, not a multiplication
        expected[0, s] = row
    assert torch.equal(out, expected)


def test_embedding_without_scaling_adds_codes_unscaled() -> None:
    config = tiny_config()
    m = tiny_model()
    m.config = dataclasses.replace(m.config, scale_codebook_embeddings=False)
    tokens = prompt(6)
    tokens[0, 0, :] = SEM_BEGIN + 2
    scaled = tiny_model(config).embed(tokens)
    assert torch.equal(m.embed(tokens) / math.sqrt(K + 1), scaled)


# ----------------------------------------------------------------------------- RoPE


def test_rope_rotates_adjacent_pairs() -> None:
    g = torch.Generator().manual_seed(4)
    x = torch.randn(1, 5, 3, 16, generator=g)
    table = precompute_freqs_cis(5, 16, 1e6).float()
    out = apply_rotary_emb(x, table)
    expected = torch.empty_like(x)
    for j in range(8):
        c, s = table[:, j, 0].view(1, 5, 1), table[:, j, 1].view(1, 5, 1)
        a, b = x[..., 2 * j], x[..., 2 * j + 1]
        expected[..., 2 * j] = a * c - b * s
        expected[..., 2 * j + 1] = b * c + a * s
    assert torch.equal(out, expected)
    assert torch.equal(out[:, 0], x[:, 0])  # position 0 does not rotate


def test_rope_table_is_bf16_rounded_cos_sin() -> None:
    table = precompute_freqs_cis(300, 16, 1e6)
    assert table.dtype == torch.bfloat16 and table.shape == (300, 8, 2)
    pos = torch.arange(300, dtype=torch.float64)[:, None]
    freqs = 1.0 / (1e6 ** (torch.arange(0, 16, 2, dtype=torch.float64) / 16))
    exact = torch.stack([torch.cos(pos * freqs), torch.sin(pos * freqs)], dim=-1)
    assert torch.allclose(table.double(), exact, atol=2 ** -8, rtol=0)
    assert not torch.equal(table.double(), exact)  # rounded, not exact
    # a row does not depend on the table's length (a max_seq_len override keeps the bits)
    assert torch.equal(precompute_freqs_cis(7, 16, 1e6), table[:7])


def test_model_tables_hold_bf16_values_in_the_model_dtype(model: DualAR) -> None:
    assert model.freqs_cis.dtype == torch.float32 and model.freqs_cis.shape == (MAX_LEN, 8, 2)
    assert torch.equal(model.freqs_cis, precompute_freqs_cis(MAX_LEN, 16, 1e6).float())
    assert torch.equal(model.fast_freqs_cis, precompute_freqs_cis(K, 16, 1e6).float())


# ----------------------------------------------------------------------------- norms and attention


def test_rmsnorm_is_float32_then_cast_then_weight() -> None:
    norm = RMSNorm(8, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 2, 8))
    x = torch.randn(2, 3, 8).to(torch.bfloat16)
    h = x.float()
    expected = (h * torch.rsqrt((h * h).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16) * norm.weight
    out = norm(x)
    assert out.dtype == torch.float32  # bf16 activations times an fp32 weight promote, as upstream
    assert torch.equal(out, expected)


def test_fast_attention_masks_later_slots() -> None:
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 4, 1, 16, generator=g) for _ in range(3))
    k = torch.randn(1, 4, K, 16, generator=g)
    v = torch.randn(1, 4, K, 16, generator=g)
    mask = torch.ones(K, K, dtype=torch.bool).tril()[None, None, 3:4]
    out = fast_attention(q, k, v, mask)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 4:] = 1e4
    v2[:, :, 4:] = -1e4
    assert torch.equal(fast_attention(q, k2, v2, mask), out)
    ref = F.scaled_dot_product_attention(q, k[:, :, :4], v[:, :, :4])
    assert torch.allclose(out, ref, atol=1e-6)


# ----------------------------------------------------------------------------- slow model


def test_prefill_then_decode_matches_a_longer_prefill() -> None:
    tokens = prompt(20)
    a = tiny_model()
    full_logits, full_hidden = a.forward_slow(tokens, torch.arange(20))
    b = tiny_model()
    b.forward_slow(tokens[:, :, :19], torch.arange(19))
    step_logits, step_hidden = b.forward_slow(tokens[:, :, 19:], torch.tensor([19]))
    assert full_logits.shape == (1, 1, VOCAB) and full_hidden.shape == (1, 1, 64)
    # prefill and decode run different attention kernels: equal math, not equal bits
    assert torch.allclose(step_logits, full_logits, atol=1e-4, rtol=1e-4)
    assert torch.allclose(step_hidden, full_hidden, atol=1e-5, rtol=1e-4)


def test_a_later_token_never_changes_earlier_positions() -> None:
    tokens = prompt(16)
    changed = tokens.clone()
    changed[0, 0, 10] = (tokens[0, 0, 10] + 1) % SEM_BEGIN if tokens[0, 0, 10] < SEM_BEGIN else SEM_BEGIN - 1
    a, b = tiny_model(), tiny_model()
    la, _ = a.forward_slow(tokens, torch.arange(16))
    lb, _ = b.forward_slow(changed, torch.arange(16))
    assert not torch.equal(la, lb)
    for layer_a, layer_b in zip(a.layers, b.layers, strict=True):
        ca, cb = layer_a.attention.kv_cache, layer_b.attention.kv_cache
        assert torch.equal(ca.k_cache[:, :, :10], cb.k_cache[:, :, :10])
        assert torch.equal(ca.v_cache[:, :, :10], cb.v_cache[:, :, :10])
        assert not torch.equal(ca.k_cache[:, :, 10:16], cb.k_cache[:, :, 10:16])


def test_stale_cache_entries_past_the_position_do_not_matter() -> None:
    """The whole preallocated cache is attended; the mask alone must hide what lies past the position."""
    tokens = prompt(12)
    clean = tiny_model()
    dirty = tiny_model()
    for layer in dirty.layers:
        layer.attention.kv_cache.k_cache.fill_(3.0)
        layer.attention.kv_cache.v_cache.fill_(-5.0)
    for m in (clean, dirty):
        m.forward_slow(tokens[:, :, :11], torch.arange(11))
    lc, hc = clean.forward_slow(tokens[:, :, 11:], torch.tensor([11]))
    ld, hd = dirty.forward_slow(tokens[:, :, 11:], torch.tensor([11]))
    assert torch.equal(lc, ld) and torch.equal(hc, hd)


def test_tied_head_and_normed_hidden(model: DualAR) -> None:
    assert not hasattr(model, "output")
    assert "output.weight" not in model.state_dict()
    logits, hidden = model.forward_slow(prompt(9), torch.arange(9))
    # hidden is the final-normed state (norm_fastlayer_input) and the head is the embedding table
    assert torch.equal(logits, F.linear(hidden, model.embeddings.weight))


def test_untied_head_and_raw_hidden() -> None:
    m = tiny_model(tiny_config(tie_word_embeddings=False))
    m.config = dataclasses.replace(m.config, norm_fastlayer_input=False)
    assert m.output.weight.shape == (VOCAB, 64)
    logits, hidden = m.forward_slow(prompt(9), torch.arange(9))
    assert torch.equal(logits, m.output(m.norm(hidden)))
    assert not torch.equal(logits, F.linear(m.norm(hidden), m.embeddings.weight))


def test_caches_do_not_hold_a_square_mask(model: DualAR) -> None:
    assert model.cache_len == MAX_LEN
    biggest = max(t.numel() for t in model.buffers())
    assert biggest < MAX_LEN * MAX_LEN
    cache = model.layers[0].attention.kv_cache
    assert cache.k_cache.shape == (1, 2, MAX_LEN, 16)
    assert model.fast_layers[0].attention.kv_cache.k_cache.shape == (1, 2, K, 16)
    mask = model.causal_mask(torch.tensor([3, 4]))
    assert mask.shape == (1, 1, 2, MAX_LEN)
    assert torch.equal(mask[0, 0], torch.ones(MAX_LEN, MAX_LEN, dtype=torch.bool).tril()[3:5])


def test_cache_length_is_rounded_up_to_eight() -> None:
    m = tiny_model()
    m.setup_caches(100, torch.float32)
    assert m.cache_len == 104 and m.layers[1].attention.kv_cache.v_cache.shape[2] == 104
    with pytest.raises(ValueError, match="max_seq_len must be in 1..512"):
        m.setup_caches(513, torch.float32)


def test_running_without_caches_is_a_clear_error() -> None:
    m = DualAR(parse_config(tiny_config()))
    with pytest.raises(RuntimeError, match="setup_caches"):
        m.forward_slow(prompt(3), torch.arange(3))


# ----------------------------------------------------------------------------- fast model


def run_frame(m: DualAR, hidden: torch.Tensor, codes: list[int]) -> list[torch.Tensor]:
    out = [m.forward_fast(hidden, 0)]
    for pos, code in enumerate(codes, start=1):
        out.append(m.forward_fast(m.fast_embeddings(torch.tensor([[code]])), pos))
    return out


def test_fast_frame_ignores_previous_frames_and_stale_slots(model: DualAR) -> None:
    _, hidden = model.forward_slow(prompt(7), torch.arange(7))
    codes = [3, 1, 4, 1, 5, 9, 2, 6, 5]
    first = run_frame(model, hidden, codes)
    assert len(first) == K and first[0].shape == (1, 1, CODEBOOK)
    run_frame(model, hidden * 0.5, [0] * 9)  # another frame leaves other values in every slot
    again = run_frame(model, hidden, codes)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    # position p only sees codes before it: changing the last code changes nothing
    changed = run_frame(model, hidden, codes[:-1] + [7])
    assert all(torch.equal(a, b) for a, b in zip(first[:-1], changed[:-1], strict=True))
    assert not torch.equal(first[-1], changed[-1])


def test_fast_width_different_from_slow_uses_a_biased_projection() -> None:
    config = tiny_config()
    config["audio_decoder_config"].update(dim=32, n_head=4, n_local_heads=2, head_dim=8, intermediate_size=96,
                                          attention_qk_norm=True)
    m = tiny_model(config)
    assert isinstance(m.fast_project_in, torch.nn.Linear) and m.fast_project_in.bias is not None
    assert m.fast_project_in.weight.shape == (32, 64)
    assert m.fast_layers[0].attention.q_norm.weight.shape == (8,)
    tokens = prompt(5)
    logits, hidden = m.forward_slow(tokens, torch.arange(5))
    assert hidden.shape == (1, 1, 32)
    normed = _normed_last(m, tokens)
    assert torch.equal(logits, F.linear(normed, m.embeddings.weight))
    assert torch.equal(hidden, m.fast_project_in(normed))
    assert run_frame(m, hidden, [1] * 9)[-1].shape == (1, 1, CODEBOOK)


def _normed_last(m: DualAR, tokens: torch.Tensor) -> torch.Tensor:
    """The slow model's final-normed last state, recomputed block by block."""
    x = m.embed(tokens)
    pos = torch.arange(tokens.shape[-1])
    for layer in m.layers:
        x = layer(x, m.freqs_cis[pos], m.causal_mask(pos), pos)
    return m.norm(x[:, -1:])


def test_bf16_run_keeps_bf16_activations() -> None:
    m = tiny_model().to(torch.bfloat16)
    m.setup_caches(64, torch.bfloat16)
    logits, hidden = m.forward_slow(prompt(6), torch.arange(6))
    assert logits.dtype == hidden.dtype == torch.bfloat16
    assert m.forward_fast(hidden, 0).dtype == torch.bfloat16


def test_prefill_uses_default_sdpa_backends_and_decode_only_the_math_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream's split (spec §4.4 step 8): the two paths round differently, so the choice is part of the bits."""
    import s2studio.model.transformer as transformer

    seen: list[tuple[int, bool, bool]] = []
    real = F.scaled_dot_product_attention

    def spy(q: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        seen.append((q.shape[2], torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.math_sdp_enabled()))
        return real(q, *args, **kwargs)

    monkeypatch.setattr(transformer.F, "scaled_dot_product_attention", spy)
    m = tiny_model()
    tokens = prompt(8)
    m.forward_slow(tokens[:, :, :7], torch.arange(7))
    m.forward_slow(tokens[:, :, 7:], torch.tensor([7]))
    assert seen == [(7, True, True)] * 2 + [(1, False, True)] * 2
    assert torch.backends.cuda.flash_sdp_enabled()  # the context did not leak


def test_s2_pro_shape_on_the_meta_device() -> None:
    """S2 Pro's real architecture (no memory: meta tensors): 358 tensors, the published shapes, ~4.56 B params."""
    from test_model_config import S2_CONFIG

    with torch.device("meta"):
        m = DualAR(parse_config(S2_CONFIG))
    state = m.state_dict()
    assert len(state) == 358
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    assert shapes["embeddings.weight"] == (155776, 2560)
    assert shapes["codebook_embeddings.weight"] == (40960, 2560)
    assert shapes["layers.35.attention.wqkv.weight"] == (6144, 2560)
    assert shapes["layers.0.attention.wo.weight"] == (2560, 4096)
    assert shapes["layers.0.attention.q_norm.weight"] == (128,)
    assert shapes["fast_layers.3.feed_forward.w2.weight"] == (2560, 9728)
    assert shapes["fast_output.weight"] == (4096, 2560)
    assert not any(k.startswith("fast_layers.") and "q_norm" in k for k in shapes)
    assert isinstance(m.fast_project_in, torch.nn.Identity) and "output.weight" not in shapes
    assert 4.5e9 < sum(v.numel() for v in state.values()) < 4.6e9
    assert m.freqs_cis.shape == (32768, 64, 2) and not m.freqs_cis.is_meta  # real values, ready to cast
