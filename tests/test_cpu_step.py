"""The fast path's fused step ops on the CPU (`engine/weights/cpu_step.cpp`) against the torch code they replace.

Each op must give the torch code's values within float32 rounding (only the order of additions differs), write
the same cache rows and nothing else, and the fast path must actually use them on a float32 CPU model (a silent
fallback to torch would keep every other test green and lose the speed).
"""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from s2studio.engine.weights import cpu_gemv
from s2studio.engine.weights.cpu_step import CpuStepOps, step_ops
from s2studio.model.config import TransformerConfig
from s2studio.model.fast_forward import FastCaches, LayerCache, attention, complex_table
from s2studio.model.rope import precompute_freqs_cis
from s2studio.model.transformer import Attention

LENGTH = 4096


@pytest.fixture()
def tiny_model():
    """Spec §12's test model: qk-norm in the slow layers, none in the fast ones; 8 query heads over 2 kv heads."""
    from test_model_forward import tiny_model as make

    return make()


@pytest.fixture(scope="module")
def ops() -> CpuStepOps:
    assert cpu_gemv.available(), f"the CPU kernels did not load: {cpu_gemv.kernel_path().reason}"
    found = step_ops(torch.device("cpu"), torch.float32)
    assert isinstance(found, CpuStepOps)
    return found


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("shape", [(1, 1, 512), (1, 2, 64), (3, 40)])
def test_rms_norm_and_its_residual_form_are_torchs(ops: CpuStepOps, shape: tuple[int, ...]) -> None:
    x, delta = _randn(*shape, seed=1) * 3, _randn(*shape, seed=2)
    weight = _randn(shape[-1], seed=3)
    ours = ops.rms_norm(x, weight, 1e-6)
    assert ours.shape == x.shape
    torch.testing.assert_close(ours, F.rms_norm(x, (shape[-1],), weight, 1e-6), rtol=2e-6, atol=2e-6)
    h, normed = ops.add_rms_norm(x, delta, weight, 1e-6)
    assert torch.equal(h, x + delta)  # one float addition: no rounding freedom
    torch.testing.assert_close(normed, F.rms_norm(x + delta, (shape[-1],), weight, 1e-6), rtol=2e-6, atol=2e-6)
    # eps matters where the row is tiny
    small = torch.full((1, 1, 8), 1e-4)
    torch.testing.assert_close(ops.rms_norm(small, torch.ones(8), 1e-2),
                               F.rms_norm(small, (8,), torch.ones(8), 1e-2))


def test_silu_mul_is_silu_times_the_other(ops: CpuStepOps) -> None:
    a, b = _randn(1, 2, 1536, seed=4) * 6, _randn(1, 2, 1536, seed=5)
    ours = ops.silu_mul(a, b)
    assert ours.shape == a.shape
    torch.testing.assert_close(ours, F.silu(a) * b, rtol=2e-6, atol=1e-6)


def test_a_prefills_elementwise_ops_share_the_threads_and_give_the_same_bits(ops: CpuStepOps) -> None:
    """A prefill's norms and silu·mul (hundreds of rows) are spread over torch's threads: every value is the one a
    single thread makes, including a silu·mul whose size is no whole number of vectors (its scalar tail)."""
    x, delta, weight = _randn(1, 300, 640, seed=6) * 3, _randn(1, 300, 640, seed=7), _randn(640, seed=8)
    a, b = _randn(1, 301, 1537, seed=9) * 6, _randn(1, 301, 1537, seed=10)
    before = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            results.append([ops.rms_norm(x, weight, 1e-6), *ops.add_rms_norm(x, delta, weight, 1e-6),
                            ops.silu_mul(a, b)])
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(one, two) for one, two in zip(*results))
    torch.testing.assert_close(results[1][0], F.rms_norm(x, (640,), weight, 1e-6), rtol=2e-6, atol=2e-6)
    torch.testing.assert_close(results[1][3], F.silu(a) * b, rtol=2e-6, atol=1e-6)


def test_wrong_dtypes_and_shapes_are_refused_with_a_reason(ops: CpuStepOps) -> None:
    with pytest.raises(RuntimeError, match="float32"):
        ops.rms_norm(torch.ones(1, 4, dtype=torch.float64), torch.ones(4), 1e-6)
    with pytest.raises(RuntimeError, match="differ in shape"):
        ops.silu_mul(torch.ones(4), torch.ones(5))
    with pytest.raises(RuntimeError, match="3 values for rows of 4"):
        ops.rms_norm(torch.ones(1, 4), torch.ones(3), 1e-6)


def _attention(qk_norm: bool, heads: int = 8, kv: int = 2, dim: int = 16, seed: int = 0) -> Attention:
    config = TransformerConfig(dim=48, n_layer=1, n_head=heads, n_local_heads=kv, head_dim=dim,
                               intermediate_size=64, rope_base=10000.0, norm_eps=1e-6, max_seq_len=LENGTH,
                               qk_norm=qk_norm, qkv_bias=True, o_bias=False)
    torch.manual_seed(seed)
    attn = Attention(config, fast=False)
    if qk_norm:  # not the ones they start as, so that a norm's weight that is ignored shows
        with torch.no_grad():
            attn.q_norm.weight.copy_(_randn(dim, seed=seed + 1) + 1)
            attn.k_norm.weight.copy_(_randn(dim, seed=seed + 2) + 1)
    return attn


def _filled_cache(attn: Attention, pos: int, seed: int) -> LayerCache:
    shape = (1, attn.n_local_heads, LENGTH, attn.head_dim)
    cache = LayerCache(torch.zeros(shape), torch.zeros(shape))
    cache.k[:, :, :pos] = _randn(1, attn.n_local_heads, pos, attn.head_dim, seed=seed)
    cache.v[:, :, :pos] = _randn(1, attn.n_local_heads, pos, attn.head_dim, seed=seed + 1)
    return cache


@pytest.mark.parametrize("qk_norm", [False, True])
@pytest.mark.parametrize(("pos", "positions"), [(0, 1), (0, 2), (5, 1), (700, 1), (700, 2), (3000, 1)])
def test_attend_is_the_torch_attention_and_writes_only_the_new_cache_rows(ops: CpuStepOps, qk_norm: bool, pos: int,
                                                                          positions: int) -> None:
    """Against `fast_forward.attention` (attention_step for one position, SDPA under a causal mask for two):
    8 query heads over 2 kv heads, a cache filled before `pos` (700 and 3000: past `kGemmPositions`, where the
    products go to torch's batched GEMM)."""
    attn = _attention(qk_norm)
    rope = complex_table(precompute_freqs_cis(LENGTH, attn.head_dim, 10000.0), torch.device("cpu"))
    rope = rope.narrow(0, pos, positions)
    x = _randn(1, positions, 48, seed=pos + 7)
    theirs, ours = _filled_cache(attn, pos, seed=9), _filled_cache(attn, pos, seed=9)
    before = LayerCache(ours.k.clone(), ours.v.clone())
    with torch.inference_mode():
        expected = attention(attn, x, rope, theirs, pos)
        got = ops.attend(attn, attn.wqkv.forward(x), rope, ours, pos)
        assert got.shape == (1, positions, attn.n_head * attn.head_dim)
        torch.testing.assert_close(attn.wo.forward(got), expected, rtol=1e-5, atol=1e-6)
    new = slice(pos, pos + positions)
    torch.testing.assert_close(ours.k[:, :, new], theirs.k[:, :, new], rtol=1e-6, atol=1e-6)
    assert torch.equal(ours.v[:, :, new], theirs.v[:, :, new])  # values are copied, not computed
    for mine, old in ((ours.k, before.k), (ours.v, before.v)):
        assert torch.equal(mine[:, :, :pos], old[:, :, :pos]) and not mine[:, :, pos + positions:].any()


def test_attend_groups_query_heads_by_division_and_ignores_the_thread_count(ops: CpuStepOps) -> None:
    """Query head h reads kv head h // (H / KV): changing kv head 1 moves heads 4..7 only; at a short cache (our
    loops) and a long one (torch's GEMM, threaded by torch). The bits do not depend on the thread count."""
    attn = _attention(qk_norm=True)
    for pos in (40, 3000):
        rope = complex_table(precompute_freqs_cis(LENGTH, attn.head_dim, 10000.0), torch.device("cpu"))
        rope = rope.narrow(0, pos, 1)
        qkv = _randn(1, 1, (8 + 4) * 16, seed=3)
        cache = _filled_cache(attn, pos, seed=4)
        threads = torch.get_num_threads()
        try:
            torch.set_num_threads(1)
            one = ops.attend(attn, qkv, rope, cache, pos)
            torch.set_num_threads(2)
            two = ops.attend(attn, qkv, rope, cache, pos)
        finally:
            torch.set_num_threads(threads)
        assert torch.equal(one, two)
        cache.v[:, 1, :10] += 1.0
        moved = ops.attend(attn, qkv, rope, cache, pos).view(8, 16)
        changed = (moved != one.view(8, 16)).any(dim=1)
        assert changed.tolist() == [False] * 4 + [True] * 4, pos


def test_attend_refuses_positions_past_the_cache(ops: CpuStepOps) -> None:
    attn = _attention(qk_norm=False)
    rope = complex_table(precompute_freqs_cis(LENGTH, attn.head_dim, 10000.0), torch.device("cpu")).narrow(0, 0, 1)
    cache = _filled_cache(attn, 0, seed=1)
    with pytest.raises(RuntimeError, match="do not fit the 4096-position cache"):
        ops.attend(attn, torch.zeros(1, 1, 12 * 16), rope, cache, LENGTH)


class CountingOps(CpuStepOps):
    """The C++ ops, counting the calls the fast path makes of them."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {}

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def rms_norm(self, x, weight, eps):  # noqa: ANN001, ANN201 - the Protocol's signatures
        self._count("rms_norm")
        return super().rms_norm(x, weight, eps)

    def add_rms_norm(self, x, delta, weight, eps):  # noqa: ANN001, ANN201
        self._count("add_rms_norm")
        return super().add_rms_norm(x, delta, weight, eps)

    def silu_mul(self, a, b):  # noqa: ANN001, ANN201
        self._count("silu_mul")
        return super().silu_mul(a, b)

    def attend(self, attn, qkv, rope, cache, pos):  # noqa: ANN001, ANN201
        self._count("attend")
        return super().attend(attn, qkv, rope, cache, pos)

    def layers_step(self, layers, caches, x, rope, start, norm):  # noqa: ANN001, ANN201
        self._count(f"layers_step of {x.shape[1]}")
        return super().layers_step(layers, caches, x, rope, start, norm)

    def fast_codes(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201
        codes = super().fast_codes(*args, **kwargs)
        self._count("fast_codes" if codes is not None else "fast_codes refused")
        return codes


def test_the_cpu_fast_path_steps_through_the_cpp_ops(ops: CpuStepOps, tiny_model) -> None:
    """A float32 CPU model gets the C++ ops (elsewhere None: torch's code). A prefill runs torch's attention with
    the C++ norms and silu·mul; one frame's fast passes and draws are one `fast_codes` call, and a decode step one
    fused stack step, both through a C++ `Stack` (a silent fall back to the per-op route would call `attend`)."""
    from s2studio.engine.api import Sampling
    from s2studio.engine.s2.fast import FastDecoder
    from s2studio.engine.s2.generate import make_generator

    model = tiny_model
    c = model.config
    decoder = FastDecoder(model, im_end_id=c.semantic_begin_id - 1, length=64)
    assert isinstance(decoder.caches.ops, CpuStepOps)
    assert step_ops(torch.device("cpu"), torch.bfloat16) is None
    assert step_ops(torch.device("meta"), torch.float32) is None
    counting = CountingOps()
    decoder.caches.ops = counting
    prompt = torch.zeros(c.num_codebooks + 1, 6, dtype=torch.long)
    sampler = decoder.sampler(Sampling(), make_generator(0))
    assert sampler.kernels is counting
    layers = c.slow.n_layer
    with torch.inference_mode():
        logits, hidden = decoder.prefill(prompt)  # 6 columns: torch's attention, the C++ norms and silu·mul
        assert counting.calls == {"rms_norm": 1, "add_rms_norm": 2 * layers, "silu_mul": layers}
        counting.calls.clear()
        sampler.frame(logits, hidden)  # 9 fast passes and their draws
        decoder.step(torch.zeros(c.num_codebooks + 1, 1, dtype=torch.long))  # one slow step
    assert counting.calls == {"fast_codes": 1, "layers_step of 1": 1}
    assert counting.stack(model.layers, decoder.caches.slow, model.norm) is not None


def test_step_ops_keep_the_fast_path_logits_on_the_exact_forwards(tiny_model) -> None:
    """The fused step against the exact forward (the golden path), within the float tolerance the torch fast
    path is held to (test_fast_path): a decode step at a late position and the fast transformer's passes."""
    from s2studio.engine.s2.fast import FastDecoder
    from s2studio.model.fast_forward import forward_fast

    model = tiny_model
    c = model.config
    decoder = FastDecoder(model, im_end_id=c.semantic_begin_id - 1, length=128)
    assert isinstance(decoder.caches.ops, CpuStepOps)
    prompt = torch.randint(0, c.vocab_size, (c.num_codebooks + 1, 40), generator=torch.Generator().manual_seed(0))
    prompt[1:] %= c.codebook_size
    column = torch.zeros(c.num_codebooks + 1, 1, dtype=torch.long)
    column[0, 0], column[1:, 0] = c.semantic_begin_id + 5, torch.arange(c.num_codebooks) * 3 % c.codebook_size
    model.setup_caches(c.slow.max_seq_len, torch.float32)
    with torch.inference_mode():
        model.forward_slow(prompt[None], torch.arange(40))
        exact_logits, exact_hidden = model.forward_slow(column[None], torch.tensor([40]))
        decoder.prefill(prompt)
        fast_logits, fast_hidden = decoder.step(column)
        torch.testing.assert_close(fast_logits.reshape(-1), exact_logits.reshape(-1)[decoder.ids],
                                   rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(fast_hidden, exact_hidden, rtol=1e-5, atol=1e-5)
        codes = torch.arange(c.num_codebooks) * 7 % c.codebook_size
        x = torch.cat([exact_hidden.view(1, 1, -1), model.fast_embeddings(codes[:1]).view(1, 1, -1)], dim=1)
        ours = forward_fast(model, decoder.caches, x, 0)
        exact = model.forward_fast(x[:, :1], torch.tensor([0]))
        exact = model.forward_fast(x[:, 1:], torch.tensor([1]))
        torch.testing.assert_close(ours.reshape(-1), exact.reshape(-1), rtol=1e-5, atol=1e-5)


def test_the_sampler_ops_are_torchs_top_k_and_draw(ops: CpuStepOps) -> None:
    """`top_k_cum` is `FastSampler.top`'s topk + logsumexp + cumsum; `kept_draw` is `kept` + `draw` on the same
    uniforms: the same winner on every trial (temperatures and top-p that keep one row, a few or all of them)."""
    from s2studio.engine.s2.sampling import request_constants

    rng = torch.Generator().manual_seed(0)
    same = 0
    for trial in range(300):
        logits = torch.randn(4097, generator=rng) * (1 + trial % 7)
        k = (30, 1, 4097)[trial % 3]
        values, rows = torch.topk(logits, k)
        cum = torch.cumsum(torch.exp(values - torch.logsumexp(logits, dim=-1)), dim=-1)
        ours = ops.top(logits, k)
        # equal logits may come in either order (torch's topk leaves ties unordered; 4097 normal floats often
        # hold a pair): the same values, rows that hold them, each row once, the same row wherever it is untied
        assert torch.equal(ours[0], values) and torch.equal(logits[ours[1]], values)
        assert len(set(ours[1].tolist())) == k
        untied = torch.ones(k, dtype=torch.bool)
        untied[1:] &= values[1:] != values[:-1]
        untied[:-1] &= values[:-1] != values[1:]
        assert torch.equal(ours[1][untied], rows[untied])
        torch.testing.assert_close(ours[2], cum, rtol=1e-5, atol=1e-6)
        temperature, top_p, _, _ = request_constants((0.1, 0.7, 1.0)[trial % 3], (0.1, 0.8, 1.0)[trial % 4 % 3],
                                                     "cpu", torch.float32)
        remove = (cum > top_p) & (torch.arange(k) > 0)
        probs = torch.softmax(torch.where(remove, float("-inf"), values) / torch.clip(temperature, min=1e-5), dim=-1)
        table = torch.randperm(155776, generator=rng)[:4097] if trial % 2 else None
        ids = rows if table is None else table[rows]
        u = torch.rand(155776, generator=rng)
        ids = ours[1] if table is None else table[ours[1]]  # the row order the race reads
        expected = ids[torch.argmax(probs / -torch.log(u[ids]))]
        got = ops.kept_draw(values, ours[1], cum, temperature, top_p, u, table)
        assert got.dtype == torch.int32 and got.shape == (1,)
        same += int(got) == int(expected)
    assert same == 300
    with pytest.raises(RuntimeError, match="outside the 10 uniforms"):
        ops.kept_draw(*ops.top(torch.randn(50), 5), torch.tensor(1.0), torch.tensor(1.0), torch.rand(10), None)
    with pytest.raises(RuntimeError, match="row 49 is outside the 20 ids"):  # rows 45..49 of 50, 20 ids
        ops.kept_draw(*ops.top(torch.arange(50.0), 5), torch.tensor(1.0), torch.tensor(1.0), torch.rand(100),
                      torch.arange(20))


def test_the_cpu_sampler_draws_through_the_cpp_ops_from_the_same_stream(tiny_model) -> None:
    """A sampler of the C++-stepping decoder draws with the C++ ops and makes the same frames as torch's sampler
    and torch's step from the same seed, consuming the same uniforms."""
    from s2studio.engine.s2.fast import FastDecoder, FastSampler, generate_frames_fast

    model = tiny_model
    c = model.config
    decoder = FastDecoder(model, im_end_id=c.semantic_begin_id - 1, length=96)
    prompt = torch.randint(0, c.codebook_size, (c.num_codebooks + 1, 20), generator=torch.Generator().manual_seed(1))
    prompt[0] = torch.randint(0, c.vocab_size, (20,), generator=torch.Generator().manual_seed(2))
    frames, states = {}, {}
    for name, ops in (("cpp", decoder.caches.ops), ("torch", None)):
        decoder.caches.ops = ops
        generator = torch.Generator().manual_seed(3)
        sampler = FastSampler(decoder, temperature=0.8, top_p=0.9, top_k=8, generator=generator)
        assert (sampler.kernels is not None) == (name == "cpp")
        frames[name] = torch.stack(list(generate_frames_fast(decoder, prompt, sampler, max_new_tokens=40,
                                                             reuse=False)))
        states[name] = generator.get_state()
    assert frames["cpp"].shape == (39, c.num_codebooks)
    assert torch.equal(frames["cpp"], frames["torch"])
    assert torch.equal(states["cpp"], states["torch"])


# ----------------------------------------------------------------------------- the fused stack (`Stack`, `fast_codes`)


class WrappedLinear(torch.nn.Linear):
    """A subclass of nn.Linear (as a LoRA training wrapper is): it may compute something else, so the C++ stack
    must not take it as a plain linear layer."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 2


def _narrowed(mode: str, seed: int = 0):
    """The test model with every linear layer of both stacks and the fast head of one kind: "none" float32
    (small: the C++ product), "wide" float32 too large for it (torch's), "bf16", "int8", "int4" the kernels'."""
    from test_model_forward import tiny_config
    from test_model_forward import tiny_model as make

    from s2studio.engine.weights.bf16 import Bf16Linear
    from s2studio.engine.weights.narrow import linear_slots, narrow_linears

    if mode == "wide":  # 1024 x 1536 feed-forward weights: past kSmallFloat, torch's
        model = make(tiny_config(dim=1024, intermediate_size=1536), seed=seed)
    else:
        model = make(seed=seed)
    if mode == "bf16":
        for parent, name in linear_slots(model):
            setattr(parent, name, Bf16Linear(getattr(parent, name).weight))
    elif mode in ("int8", "int4"):
        narrow_linears(model, mode)
        model.to(torch.float32)  # as the loader does after narrowing
    return model


def _inputs(width: int, positions: int, seed: int) -> torch.Tensor:
    return _randn(1, positions, width, seed=seed)


@pytest.mark.parametrize("mode", ["none", "wide", "bf16", "int8", "int4"])
def test_the_cpp_linear_is_the_layers_own_product(ops: CpuStepOps, mode: str) -> None:
    """`linear_of(m).forward(x)` against `m.forward(x)` for every kind of layer, with and without a bias: the very
    same kernel for the narrowed kinds and torch's (equal bits), one dot product per output for small float32
    weights (close)."""
    from s2studio.engine.weights.cpu_step import FLOAT, TORCH_FLOAT, linear_of

    model = _narrowed(mode)
    layer = model.layers[0]
    found = [layer.attention.wqkv, layer.attention.wo, layer.feed_forward.w1, layer.feed_forward.w2,
             model.fast_output]
    if mode in ("none", "wide"):
        assert {linear_of(m).kind() for m in found[2:4]} == {TORCH_FLOAT if mode == "wide" else FLOAT}
        # with a bias; 43 outputs: 5 blocks of 8 rows and 3 alone; 20 inputs: no whole vectors
        found += [torch.nn.Linear(found[0].in_features, 43), torch.nn.Linear(20, 13)]
    elif mode in ("bf16", "int8"):
        found[0].bias = _randn(found[0].out_features if mode == "bf16" else found[0].weight_q.shape[0], seed=5)
    for i, module in enumerate(found):
        made = linear_of(module)
        assert made is not None, type(module)
        width = made.forward(_inputs(module.in_features, 1, seed=i)).shape[-1]
        for positions in (1, 2, 5):
            x = _inputs(module.in_features, positions, seed=10 * i + positions)
            with torch.inference_mode():
                ours, theirs = made.forward(x), module.forward(x)
            assert ours.shape == theirs.shape == (1, positions, width)
            if made.kind() == FLOAT:  # C++'s own product
                torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)  # sums of up to 1024
            else:  # torch's product or the kernels', as the layer runs it
                assert torch.equal(ours, theirs), (mode, i, positions)
    assert linear_of(WrappedLinear(64, 64)) is None
    assert linear_of(torch.nn.Linear(64, 64).double()) is None


def _copy(caches: list[LayerCache]) -> list[LayerCache]:
    return [LayerCache(c.k.clone(), c.v.clone()) for c in caches]


@pytest.mark.parametrize("mode", ["none", "bf16", "int8", "int4"])
def test_the_fused_stack_step_is_the_per_op_step(ops: CpuStepOps, mode: str) -> None:
    """`layers_step` (one C++ call) against `step_layers` over the same ops (the route it replaces), on both
    stacks (the slow one with qk-norm), a 2-position step then a 1-position step: the same outputs and the same
    cache rows. Equal bits where the layers' products are the kernels'; float32 layers are multiplied by
    another product in C++ (close)."""
    from s2studio.model.fast_forward import step_layers

    model = _narrowed(mode)
    c = model.config
    caches = FastCaches.allocate(model, 32, torch.float32, torch.device("cpu"), ops=ops)
    for layers, own, norm, rope_table in ((model.layers, caches.slow, model.norm, caches.rope),
                                          (model.fast_layers, caches.fast, model.fast_norm, caches.fast_rope)):
        assert ops.stack(layers, own, norm) is not None
        theirs = _copy(own)
        start = 0
        for positions in (2, 1, 1):
            x = _inputs(c.slow.dim, positions, seed=start + 3)
            rope = rope_table.narrow(0, start, positions)
            with torch.inference_mode():
                fused = ops.layers_step(layers, own, x, rope, start, norm)
                per_op = step_layers(layers, theirs, x, rope, start, ops, norm)
            for a, b in (*zip(fused, per_op, strict=True), *((m.k, t.k) for m, t in zip(own, theirs)),
                         *((m.v, t.v) for m, t in zip(own, theirs))):
                if mode == "none":
                    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
                else:
                    assert torch.equal(a, b), (mode, start)
            start += positions
        assert own[0].k[:, :, start - 1].any() and not own[0].k[:, :, start:].any()


def test_a_replaced_layer_rebuilds_the_stack_and_an_unknown_one_keeps_the_per_op_route(ops: CpuStepOps) -> None:
    """Merging a LoRA into a narrowed model replaces its linear modules: the next step must use the new ones.
    A layer type the C++ stack does not know is run by the per-op route, with its own forward."""
    from s2studio.engine.weights.int8 import Int8Linear
    from s2studio.model.fast_forward import step_layers

    model = _narrowed("int8")
    caches = FastCaches.allocate(model, 16, torch.float32, torch.device("cpu"), ops=ops)
    layers, own, norm = model.fast_layers, caches.fast, model.fast_norm
    x, rope = _inputs(64, 1, seed=1), caches.fast_rope.narrow(0, 0, 1)
    first = ops.stack(layers, own, norm)
    assert first is not None and ops.stack(layers, own, norm) is first  # built once, then kept
    ffn = layers[1].feed_forward
    with torch.inference_mode():
        before = ops.layers_step(layers, own, x, rope, 0, norm)[1]
        ffn.w2 = Int8Linear.from_weight(_randn(*ffn.w2.weight_q.shape, seed=2) * 0.1)
        after = ops.layers_step(layers, own, x, rope, 0, norm)[1]
        assert ops.stack(layers, own, norm) is not first
        assert not torch.equal(before, after)
        assert torch.equal(after, step_layers(layers, _copy(own), x, rope, 0, ops, norm)[1])
        wrapped = WrappedLinear(ffn.w2.in_features, ffn.w2.out_features, bias=False)
        ffn.w2 = wrapped
        assert ops.stack(layers, own, norm) is None
        doubled = ops.layers_step(layers, own, x, rope, 0, norm)[1]
        plain = torch.nn.Linear(wrapped.in_features, wrapped.out_features, bias=False)
        plain.weight = wrapped.weight  # the same weights as a plain layer: the stack takes it, without the doubling
        ffn.w2 = plain
        assert ops.stack(layers, own, norm) is not None
        single = ops.layers_step(layers, own, x, rope, 0, norm)[1]
        assert not torch.equal(doubled, single)  # the wrapper's own forward is what ran
        ffn.w2 = wrapped
        assert torch.allclose(doubled, step_layers(layers, _copy(own), x, rope, 0, ops, norm)[1], atol=1e-6)


@pytest.mark.parametrize("mode", ["none", "int8"])
def test_fast_codes_are_the_samplers_own_loop(mode: str) -> None:
    """`FastSampler.codes` through `fast_codes` (one C++ call a frame) against its own loop over the C++ ops (the
    route it replaces): the same codes on every frame and the same uniforms consumed, at two temperatures."""
    from s2studio.engine.s2.fast import FastDecoder, FastSampler, generate_frames_fast

    model = _narrowed(mode)
    c = model.config
    decoder = FastDecoder(model, im_end_id=c.semantic_begin_id - 1, length=96,  # never stops: 29 frames
                          allowed=torch.arange(c.semantic_begin_id, c.semantic_end_id + 1))
    prompt = torch.randint(0, c.codebook_size, (c.num_codebooks + 1, 12), generator=torch.Generator().manual_seed(4))
    prompt[0] = torch.randint(0, c.vocab_size, (12,), generator=torch.Generator().manual_seed(5))
    ops = decoder.caches.ops
    assert isinstance(ops, CpuStepOps)
    for temperature in (0.3, 1.0):
        frames, states = {}, {}
        for fused in (True, False):
            generator = torch.Generator().manual_seed(6)
            sampler = FastSampler(decoder, temperature=temperature, top_p=0.9, top_k=5, generator=generator)
            counting = CountingOps()
            counting._stacks = ops._stacks  # the same stacks, counted
            if not fused:
                counting.fast_codes = lambda *a, **k: None  # the sampler's own loop
            sampler.kernels = counting
            frames[fused] = torch.stack(list(generate_frames_fast(decoder, prompt, sampler, max_new_tokens=30,
                                                                  reuse=False)))
            states[fused] = generator.get_state()
            assert ("fast_codes" in counting.calls) == fused
        assert frames[True].shape == (29, c.num_codebooks)
        assert len(set(frames[True][:, 3].tolist())) > 3  # codes that vary: a broken draw would not
        assert torch.equal(frames[True], frames[False])
        assert torch.equal(states[True], states[False])


def test_fast_codes_refuses_codes_outside_its_table(ops: CpuStepOps) -> None:
    model = _narrowed("none")
    caches = FastCaches.allocate(model, 16, torch.float32, torch.device("cpu"), ops=ops)
    stack = ops.stack(model.fast_layers, caches.fast, model.fast_norm, model.fast_output)
    args = (torch.tensor(1.0), torch.tensor(0.9), 5, 16, model.config.num_codebooks)
    with pytest.raises(RuntimeError, match="code 16 is outside the 16 rows"):
        torch.ops.s2studio_cpu.fast_codes(stack, model.fast_embeddings.weight, torch.zeros(64), 16, None,
                                          caches.fast_rope, *args)
    with pytest.raises(RuntimeError, match="size at least 16"):
        torch.ops.s2studio_cpu.fast_codes(stack, model.fast_embeddings.weight, torch.zeros(64), 1, None,
                                          caches.fast_rope, torch.tensor(1.0), torch.tensor(0.9), 5, 8, 10)


def test_main_token_is_the_samplers_draws_check_and_window(tiny_model) -> None:
    """`main_token` (one C++ call) against `FastSampler.main_token` and its window write on the same logits,
    window and stream: the same token (the repetition fallback taken as often, on semantic tokens only), the same
    window after, the same uniforms consumed."""
    from s2studio.engine.s2.fast import FastDecoder, FastSampler
    from s2studio.engine.s2.sampling import RAS_WINDOW

    model = tiny_model
    c = model.config
    decoder = FastDecoder(model, im_end_id=c.semantic_begin_id - 1, length=32)  # <|im_end|> among the ids
    samplers = {}
    for name in ("cpp", "torch"):
        samplers[name] = FastSampler(decoder, temperature=0.7, top_p=0.8, top_k=4,
                                     generator=torch.Generator().manual_seed(2))
    samplers["torch"].kernels = None
    assert samplers["cpp"].kernels is not None
    rng = torch.Generator().manual_seed(3)
    ids = decoder.ids
    replaced = 0
    for trial in range(300):
        logits = torch.randn(len(ids), generator=rng) * (1 + trial % 4)
        logits[-1] += 3.0 * (trial % 5 == 0)  # <|im_end|> (the last id) often best: never replaced
        window = ids[torch.randint(0, len(ids), (RAS_WINDOW,), generator=rng)].to(torch.int32)
        window[trial % RAS_WINDOW] = ids[int(torch.argmax(logits))]  # the likely winner already in it, often
        made = trial % 3  # 0: the prompt's frame (no check, no window write)
        state = samplers["torch"].generator.get_state()
        got = {}
        for name, sampler in samplers.items():
            sampler.window = window.clone()
            sampler.made = made
            got[name] = (sampler.next_main(logits), sampler.window)
        assert torch.equal(got["cpp"][0], got["torch"][0]) and got["cpp"][0].dtype == torch.int32, trial
        assert torch.equal(got["cpp"][1], got["torch"][1]), trial
        probe = FastSampler(decoder, temperature=0.7, top_p=0.8, top_k=4, generator=torch.Generator())
        probe.generator.set_state(state)
        probe.kernels = None
        replaced += made > 0 and not torch.equal(probe.main_token(logits, False), got["torch"][0])
    assert replaced > 20, replaced
    assert torch.equal(samplers["cpp"].generator.get_state(), samplers["torch"].generator.get_state())


@pytest.mark.parametrize("start", [0, 5])
def test_a_prefill_with_the_cpp_norms_is_torchs_prefill(ops: CpuStepOps, tiny_model, start: int) -> None:
    """`forward_slow` over 9 columns with the C++ ops (torch's attention, the C++ norms and silu·mul, the last
    layer at the last position only) against the same prefill on torch's ops alone: the same logits and hidden
    state within float rounding, and every layer's keys and values written alike."""
    from s2studio.engine.s2.fast import head_weight
    from s2studio.engine.weights.narrow import RowsLinear
    from s2studio.model.fast_forward import forward_slow

    model = tiny_model
    c = model.config
    head = RowsLinear(head_weight(model, torch.arange(c.vocab_size)))
    tokens = torch.randint(0, c.vocab_size, (c.num_codebooks + 1, 9), generator=torch.Generator().manual_seed(start))
    tokens[1:] %= c.codebook_size
    results = {}
    for name, step in (("cpp", ops), ("torch", None)):
        caches = FastCaches.allocate(model, 32, torch.float32, torch.device("cpu"), ops=step)
        for cache in caches.slow:  # the same kept prefix at positions 0..start-1
            cache.k[:, :, :start] = cache.v[:, :, :start] = 0.5
        with torch.inference_mode():
            results[name] = (*forward_slow(model, caches, tokens, start, head), caches)
    (logits, hidden, cpp), (t_logits, t_hidden, torch_caches) = results["cpp"], results["torch"]
    assert logits.shape == t_logits.shape == (1, 1, c.vocab_size)
    torch.testing.assert_close(logits, t_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(hidden, t_hidden, rtol=1e-5, atol=1e-5)
    for mine, theirs in zip(cpp.slow, torch_caches.slow, strict=True):
        torch.testing.assert_close(mine.k, theirs.k, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(mine.v, theirs.v, rtol=1e-5, atol=1e-5)
        assert mine.k[:, :, start + 8].abs().sum() > 0
