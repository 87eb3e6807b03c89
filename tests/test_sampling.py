"""The sampler's exact rules (spec §6): top-p with `>` on un-tempered logits, top-k, temperature
clipping, the exponential-race draw and its random stream, and the order and number of draws per
frame. A small stand-in fast model keeps these independent of the real DualAR."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from s2studio.engine.s2.sampling import RAS_WINDOW, FrameSampler, draw, logits_to_probs

V, C = 64, 16
BEGIN, END_SEM, IM_END = 40, 55, 7  # semantic ids 40..55 (16 codes), <|im_end|> = 7


def t(x: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.tensor(x, dtype=dtype)


class FakeFast(nn.Module):
    """forward_fast/fast_embeddings with fixed random weights; records the positions it ran."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.fast_embeddings = nn.Embedding(C, 8)
        self.fast_embeddings.weight.data = torch.randn(C, 8, generator=g)
        self.head = torch.randn(C, 8, generator=g)
        self.positions: list[int] = []

    def forward_fast(self, x: torch.Tensor, pos: int) -> torch.Tensor:
        self.positions.append(pos)
        return (x.view(1, 1, -1) @ self.head.T) * 3.0


def sampler(g: torch.Generator, temperature: float = 0.8, top_p: float = 0.8, dtype=torch.float32) -> FrameSampler:
    return FrameSampler(vocab_size=V, codebook_size=C, num_codebooks=10, semantic_begin_id=BEGIN,
                        semantic_end_id=END_SEM, im_end_id=IM_END, temperature=temperature, top_p=top_p, top_k=30,
                        generator=g, device="cpu", dtype=dtype)


def slow_logits(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, 1, V, generator=g) * 2, torch.randn(1, 1, 8, generator=g)


# ----------------------------------------------------------------------------- logits_to_probs


def test_top_p_boundary_is_strictly_greater() -> None:
    # four equal logits: sorted probabilities 0.25 each, cumulative 0.25, 0.5, 0.75, 1.0 exactly
    probs = logits_to_probs(torch.zeros(4), t(1.0), t(0.5), 30)
    assert int((probs > 0).sum()) == 2  # cum 0.5 is not > 0.5: kept; `>=` would keep one
    assert torch.equal(probs[probs > 0], torch.tensor([0.5, 0.5]))


def test_best_token_is_always_kept() -> None:
    probs = logits_to_probs(torch.tensor([0.0, 9.0, 1.0]), t(1.0), t(0.01), 30)
    assert torch.equal(probs, torch.tensor([0.0, 1.0, 0.0]))


def test_top_p_is_decided_before_temperature() -> None:
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    # un-tempered cumulative: 0.644, 0.881, 0.968: top-p 0.9 keeps two tokens. Tempered at 0.3 the
    # best token alone would hold 0.965 and only one would be kept.
    probs = logits_to_probs(logits, t(0.3), t(0.9), 30)
    assert int((probs > 0).sum()) == 2
    want = torch.softmax(torch.tensor([2.0, 1.0]) / 0.3, -1)
    assert torch.equal(probs[:2], want)


def test_ties_follow_torch_sort_order() -> None:
    logits = torch.tensor([1.0, 3.0, 3.0, 3.0, 3.0, 0.0])
    kept = logits_to_probs(logits, t(1.0), t(1.0), 2) > 0
    order = torch.sort(logits, descending=True).indices
    assert kept.nonzero().flatten().tolist() == sorted(order[:2].tolist())


def test_top_k() -> None:
    logits = torch.arange(50, dtype=torch.float32) / 10
    probs = logits_to_probs(logits, t(1.0), t(1.0), 30)
    assert (probs > 0).nonzero().flatten().tolist() == list(range(20, 50))


def test_temperature_is_clipped_at_1e_5() -> None:
    logits = torch.tensor([0.0, -2e-5, -1.0])
    probs = logits_to_probs(logits, t(0.0), t(1.0), 30)
    want = torch.softmax(logits / 1e-5, -1)
    assert not torch.isnan(probs).any()
    assert torch.equal(probs, want)
    assert probs[1] > 0  # 0.0 would divide to -inf; 1e-5 leaves e^-2


def test_bf16_settings_are_rounded_like_upstream() -> None:
    s = sampler(torch.Generator(), temperature=0.8, top_p=0.9, dtype=torch.bfloat16)
    assert s.temperature.dtype == torch.bfloat16
    assert float(s.temperature) == 0.80078125 and float(s.top_p) == 0.8984375
    assert float(s.ras_top_p) == 0.8984375 and float(s.ras_temperature) == 1.0
    f = sampler(torch.Generator(), temperature=0.7, top_p=0.9)
    assert float(f.temperature) == torch.tensor(0.7).item() and f.top_p.dtype == torch.float32


# ----------------------------------------------------------------------------- the draw


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_uniform_stream_equals_rand_like_after_manual_seed(dtype: torch.dtype) -> None:
    shapes = [(V,), (V,)] + [(C,)] * 9 + [(155776,)]
    g = torch.Generator().manual_seed(1234)
    ours = [torch.empty(s, dtype=dtype).uniform_(generator=g) for s in shapes]
    with torch.random.fork_rng():
        torch.manual_seed(1234)
        theirs = [torch.rand_like(torch.empty(s, dtype=dtype)) for s in shapes]
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)


def test_draw_is_the_exponential_race() -> None:
    probs = torch.softmax(torch.randn(100, generator=torch.Generator().manual_seed(0)), -1)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    got = draw(probs, g1)
    u = torch.rand(100, generator=g2)
    assert got.dtype == torch.int32 and got.shape == (1,)
    assert int(got) == int(torch.argmax(probs / -torch.log(u)))
    assert torch.equal(g1.get_state(), g2.get_state())


def test_draw_never_picks_a_zero_probability_token() -> None:
    probs = torch.zeros(10)
    probs[3] = 1.0
    g = torch.Generator().manual_seed(1)
    assert all(int(draw(probs, g)) == 3 for _ in range(50))


# ----------------------------------------------------------------------------- one frame


def reference_stream(seed: int) -> torch.Generator:
    g = torch.Generator().manual_seed(seed)
    for n in [V, V] + [C] * 9:
        torch.rand(n, generator=g)
    return g


@pytest.mark.parametrize("with_window", [False, True])
def test_frame_consumes_two_vocab_and_nine_codebook_draws(with_window: bool) -> None:
    g = torch.Generator().manual_seed(11)
    model = FakeFast()
    logits, hidden = slow_logits(0)
    window = torch.zeros(11, RAS_WINDOW, dtype=torch.int32) if with_window else None
    frame = sampler(g).frame(model, logits, hidden, window)
    assert frame.shape == (11, 1) and frame.dtype == torch.int32
    assert model.positions == list(range(10))  # position 0 runs even though its logits are unused
    assert torch.equal(g.get_state(), reference_stream(11).get_state())


def test_frame_matches_a_hand_computed_draw_order() -> None:
    model = FakeFast()
    logits, hidden = slow_logits(1)
    frame = sampler(torch.Generator().manual_seed(21)).frame(model, logits, hidden, None)

    g = torch.Generator().manual_seed(21)
    bias = torch.full((V,), -math.inf)
    bias[BEGIN:END_SEM + 1] = 0
    bias[IM_END] = 0
    biased = logits[0, -1] + bias
    p_main = logits_to_probs(biased, t(0.8), t(0.8), 30)
    main = int(torch.argmax(p_main / -torch.log(torch.rand(V, generator=g))))
    torch.rand(V, generator=g)  # the RAS draw, unused on the prompt's frame
    code = min(max(main - BEGIN, 0), C - 1)
    want = [main, code]
    for k in range(1, 10):
        x = model.fast_embeddings(torch.tensor([code])).view(1, 1, -1)
        p = logits_to_probs(model.forward_fast(x, k)[0, -1], t(0.8), t(0.8), 30)
        code = int(torch.argmax(p / -torch.log(torch.rand(C, generator=g))))
        want.append(code)
    assert frame.flatten().tolist() == want
    assert BEGIN <= want[0] <= END_SEM or want[0] == IM_END


def test_ras_replaces_a_repeated_semantic_token_with_the_second_draw() -> None:
    model = FakeFast()
    logits, hidden = slow_logits(2)
    first = sampler(torch.Generator().manual_seed(8)).frame(model, logits, hidden, None)
    main = int(first[0, 0])
    assert BEGIN <= main <= END_SEM

    # the second draw, computed by hand from the same stream
    g = torch.Generator().manual_seed(8)
    bias = torch.full((V,), -math.inf)
    bias[BEGIN:END_SEM + 1] = 0
    bias[IM_END] = 0
    biased = logits[0, -1] + bias
    torch.rand(V, generator=g)
    p_high = logits_to_probs(biased, t(1.0), t(0.9), 30)
    high = int(torch.argmax(p_high / -torch.log(torch.rand(V, generator=g))))

    window = torch.zeros(11, RAS_WINDOW, dtype=torch.int32)
    window[0, 4] = main
    again = sampler(torch.Generator().manual_seed(8)).frame(model, logits, hidden, window)
    assert int(again[0, 0]) == high
    # a window without the token changes nothing
    other = torch.zeros(11, RAS_WINDOW, dtype=torch.int32)
    other[1:, :] = main  # only row 0 is read
    same = sampler(torch.Generator().manual_seed(8)).frame(model, logits, hidden, other)
    assert torch.equal(same, first)


def test_im_end_is_never_replaced_and_clamps_code_0_to_zero() -> None:
    model = FakeFast()
    logits = torch.full((1, 1, V), -10.0)
    logits[0, 0, IM_END] = 30.0  # certain <|im_end|>
    logits[0, 0, 60] = 99.0  # not allowed by the bias
    hidden = torch.ones(1, 1, 8)
    window = torch.full((11, RAS_WINDOW), IM_END, dtype=torch.int32)
    frame = sampler(torch.Generator().manual_seed(0)).frame(model, logits, hidden, window)
    assert int(frame[0, 0]) == IM_END and int(frame[1, 0]) == 0
