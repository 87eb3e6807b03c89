"""The codec's fused Snake (`engine/weights/cpu_codec.cpp`) against torch's, its own sine against the float64 one,
and the non-exact decoder actually running it when the engine hands it over (a silent fallback to torch's Snake would
keep every quality test green and lose the speed).

The sine's measured accuracy (this file's ranges, float32 arguments): at most 1.77 ulp of the float64 sine for
|t| <= 2^17 (the polynomial alone 1.75 on [0, π/2]; 1.47 and 1.69 at the floats nearest kπ and (k + 1/2)π), at most
2 ulp from torch.sin; beyond 2^17 each lane takes std::sin (0.56 ulp). The codec's Snake arguments |alpha·x| reached
1.8 on the tests' tiny codec and 0.7 on the bench's full-size random one; a trained codec's may be larger, which the
bound covers up to 2^17 and std::sin beyond.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from codec_clips import random_codes
from streaming_checks import built_codec_ops, codec, codec_dir, full_decode  # noqa: F401 - fixtures
from s2studio.codec import fast_stream
from s2studio.codec.layers import Snake1d, snake
from s2studio.codec.streaming import IncrementalDecoder, decode_in_chunks
from s2studio.engine.weights import cpu_gemv
from s2studio.engine.weights.cpu_codec import CpuCodecOps, codec_ops, fast_sin

SIN_ULPS = 1.8
"""The sine's bound against the float64 one where its own code runs (|t| <= 2^17); measured 1.77."""
SNAKE_ULPS = 3
"""The fused Snake's bound against torch's, in ulps of |x| + |inv·sin²| (the result itself can be much smaller, where
the two cancel); measured 2: the sine's error, and one rounding fewer (the last step is an FMA)."""


@pytest.fixture(scope="module")
def ops() -> CpuCodecOps:
    return built_codec_ops()


def ulp(x: np.ndarray) -> np.ndarray:
    """The float32 spacing at |x| (at least the smallest subnormal's)."""
    return np.maximum(np.spacing(np.abs(x).astype(np.float32)), np.spacing(np.float32(0))).astype(np.float64)


def sin_ulps(t: torch.Tensor) -> np.ndarray:
    """fast_sin's error at float32 `t`, in ulps of the float64 sine."""
    true = np.sin(t.double().numpy())
    return np.abs(fast_sin(t).double().numpy() - true) / ulp(true)


def uniform(low: float, high: float, n: int, seed: int) -> torch.Tensor:
    t = (torch.rand(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * (high - low) + low).float()
    return torch.cat([t, -t])


@pytest.mark.parametrize(("low", "high"), [(0, np.pi / 2), (0, 10), (10, 1e3), (1e3, 2 ** 17)])
def test_the_sine_is_within_two_ulp_where_the_codec_runs_it_and_far_beyond(ops, low: float, high: float) -> None:
    t = uniform(low, high, 1_000_003, seed=int(high))
    assert sin_ulps(t).max() <= SIN_ULPS
    ours, theirs = fast_sin(t).double().numpy(), torch.sin(t).double().numpy()
    assert (np.abs(ours - theirs) / ulp(theirs)).max() <= 2.0  # torch.sin is itself 0.6 ulp from the true sine


def test_the_sine_near_its_zeros_and_peaks_and_past_its_range(ops) -> None:
    """The floats nearest kπ (where the reduced argument is tiny: π in three parts keeps it exact) and (k + 1/2)π
    (where q = round(t/π) may go either way), with their neighbours; beyond 2^17, std::sin; inf and NaN give NaN."""
    k = torch.arange(0, 41_700, dtype=torch.float64)
    for points in (k * np.pi, (k + 0.5) * np.pi):
        t = points.float()
        t = torch.cat([t, torch.nextafter(t, t + 1), torch.nextafter(t, t - 1)])
        assert sin_ulps(t).max() <= SIN_ULPS
    assert sin_ulps(uniform(2 ** 17, 1e30, 200_003, seed=5)).max() <= 0.6
    special = fast_sin(torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, 1e-30]))
    assert special[:3].isnan().all() and special[3] == 0 and special[4] == torch.tensor(1e-30)


@pytest.mark.parametrize("channels", [1, 7, 16, 17, 96, 130])
@pytest.mark.parametrize("frames", [1, 5, 33])
@pytest.mark.parametrize("x_dtype", [torch.float32, torch.bfloat16])
def test_snake_is_torchs_within_rounding(ops, channels: int, frames: int, x_dtype: torch.dtype) -> None:
    """Odd channel counts (the vector loop's scalar tail) and lengths, both input dtypes, both outputs: float32
    within `SNAKE_ULPS`, bfloat16 exactly the float32 result rounded to nearest even (as `.to(torch.bfloat16)`)."""
    g = torch.Generator().manual_seed(channels * 100 + frames)
    for scale in (0.1, 3.0, 30.0):
        x = (torch.randn(1, frames, channels, generator=g) * scale).to(x_dtype)
        alpha = torch.rand(channels, generator=g) + 0.5
        ref = snake(x, alpha.view(1, 1, -1))
        ours = ops.snake(x, alpha, torch.float32)
        assert ours.dtype == torch.float32 and ours.shape == x.shape and ours.is_contiguous()
        terms = x.float().abs() + (ref - x.float()).abs()
        assert ((ours - ref).abs().double().numpy() / ulp(terms.numpy())).max() <= SNAKE_ULPS
        rounded = ops.snake(x, alpha, torch.bfloat16)
        assert rounded.dtype == torch.bfloat16
        assert torch.equal(rounded, ours.to(torch.bfloat16))


def test_snake_rounds_like_torch_at_the_edges(ops) -> None:
    """Values that round up, down and to even in bfloat16, huge and non-finite inputs; tiny alpha (the 1e-9)."""
    alpha = torch.tensor([1.0, 1.0, 1.0, 1.0, 1e-12, 1.0, 1.0, 1.0])
    x = torch.tensor([[[1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 3e38, float("inf"), 1e-3, float("nan"), -0.0, 1e6]]])
    ours = ops.snake(x, alpha, torch.float32)
    ref = snake(x, alpha.view(1, 1, -1))
    np.testing.assert_array_equal(ours.isnan().numpy(), ref.isnan().numpy())
    finite = ~ref.isnan()
    torch.testing.assert_close(ours[finite], ref[finite], rtol=3e-7, atol=0)
    bf = ops.snake(x, alpha, torch.bfloat16)
    assert torch.equal(bf[finite], ours.to(torch.bfloat16)[finite]) and bf[~finite].isnan().all()


def test_lanes_and_threads_do_not_change_a_value(ops) -> None:
    """Every channel of 37 (two vector blocks and a scalar tail) holds the same inputs: the same outputs; and 2
    threads give the 1-thread result (elementwise: no reduction to reorder)."""
    x = torch.linspace(-40, 40, 4099).view(-1, 1).expand(4099, 37).contiguous().view(1, 4099, 37)
    y = ops.snake(x, torch.full((37,), 0.7), torch.float32)
    assert torch.equal(y, y[..., :1].expand_as(y))
    alpha = torch.rand(37, generator=torch.Generator().manual_seed(0)) + 0.5
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = ops.snake(x, alpha, torch.bfloat16)
        torch.set_num_threads(2)
        assert torch.equal(ops.snake(x, alpha, torch.bfloat16), one)
    finally:
        torch.set_num_threads(before)


def test_strided_inputs_are_handled_or_refused(ops) -> None:
    """Rows evenly spaced (a slice in time, every other frame) run as they are; a channels-first view, rows at two
    spacings, or wrong dtypes and sizes are refused with a message, never read wrongly."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 40, 24, generator=g)
    alpha = torch.rand(24, generator=g) + 0.5
    assert not x[:, ::2].is_contiguous()  # rows two apart: the op reads the stride as it is
    for view in (x[:, 3:17], x[:, ::2]):
        assert view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()  # views, not copies
        assert torch.equal(ops.snake(view, alpha, torch.float32), ops.snake(view.contiguous(), alpha, torch.float32))
    with pytest.raises(RuntimeError, match="channels must be contiguous"):
        ops.snake(torch.randn(1, 24, 40).transpose(1, 2), alpha, torch.float32)
    with pytest.raises(RuntimeError, match="view"):
        ops.snake(torch.randn(2, 40, 24)[:, :5], alpha, torch.float32)
    with pytest.raises(RuntimeError, match="alpha's channels"):
        ops.snake(x, alpha[:5], torch.float32)
    with pytest.raises(RuntimeError, match="float32 or bfloat16"):
        ops.snake(x.double(), alpha, torch.float32)
    with pytest.raises(RuntimeError, match="float32 or bfloat16"):
        ops.snake(x, alpha, torch.float16)
    assert ops.snake(x[:, :0], alpha, torch.bfloat16).shape == (1, 0, 24)


class Counting(CpuCodecOps):
    """The C++ ops, counting each call's input and output dtypes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[torch.dtype, torch.dtype]] = []

    def snake(self, x: torch.Tensor, alpha: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        self.calls.append((x.dtype, out_dtype))
        return super().snake(x, alpha, out_dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_decoder_takes_the_fused_snake_when_given_it(codec, monkeypatch, dtype: torch.dtype) -> None:
    """Every Snake of every piece goes through the given ops, torch's `snake` never runs; each writes the dtype of
    the conv that reads it: in a bfloat16 decode all but the last (before the float32 last conv)."""
    if dtype == torch.bfloat16 and not fast_stream.native_bf16():
        pytest.skip("this CPU has no native bfloat16")

    def torch_snake(*args):
        raise AssertionError("torch's Snake ran although the fused one was given")

    monkeypatch.setattr(fast_stream, "snake", torch_snake)
    counting = Counting()
    decoder = IncrementalDecoder(codec, exact=False, step=4, dtype=dtype, ops=counting)
    decoder.push(random_codes(4, 9))  # pieces of 4, 4 and 1 frames
    snakes = sum(isinstance(m, Snake1d) for m in codec.decoder.modules())
    assert len(counting.calls) == 3 * snakes
    outs = [out for _, out in counting.calls[:snakes]]
    if dtype == torch.float32:
        assert set(counting.calls) == {(torch.float32, torch.float32)}
    else:
        assert outs[:-1] == [torch.bfloat16] * (snakes - 1) and outs[-1] == torch.float32
        assert (torch.bfloat16, torch.bfloat16) in counting.calls  # after a bfloat16 k7 conv: read as it is
    with pytest.raises(ValueError, match="exact decode runs torch's own ops"):
        IncrementalDecoder(codec, exact=True, ops=counting)


def test_without_the_ops_torchs_snake_runs(codec, monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(fast_stream, "snake", lambda x, alpha: calls.append(1) or snake(x, alpha))
    decode_in_chunks(codec, random_codes(4, 5), 4, exact=False, dtype=torch.float32)
    assert len(calls) == 2 * sum(isinstance(m, Snake1d) for m in codec.decoder.modules())


def test_no_kernels_no_ops(monkeypatch) -> None:
    """`S2STUDIO_CPU_KERNELS=0` (or no module built) and other devices: None, so torch's Snake runs; the class itself
    says why instead of failing later on a missing op."""
    monkeypatch.setattr(cpu_gemv, "available", lambda: False)
    assert codec_ops(torch.device("cpu")) is None
    with pytest.raises(RuntimeError, match="not available"):
        CpuCodecOps()
    monkeypatch.undo()
    assert codec_ops(torch.device("meta")) is None
