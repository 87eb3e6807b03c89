"""The CPU kernels (engine/weights/cpu_gemv.*) and the layers that use them (Bf16Linear, Int8Linear, Int4Linear).

The kernels are built when the package is (here: in place, by the test session's start when their sources changed).
What must hold: the float32 product of the stored weights (to float32 rounding, for every width and both the
matrix-vector and the widened-GEMM path; a decode step of int8 or int4 rows multiplies them by the activations
rounded to 16 bits per group of 128, exactly), the same bits for any number of threads, the input's shape and
dtype kept, clear errors, and a model that still runs when the kernels cannot be loaded.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from s2studio.engine.weights import cpu_gemv, kernel_build, kernels
from s2studio.engine.weights.bf16 import Bf16Linear
from s2studio.engine.weights.int4 import Int4Linear, pack_codes, quantize_groups, unpack_codes
from s2studio.engine.weights.int8 import Int8Linear
from s2studio.engine.weights.narrow import Narrowed, linear_slots, narrow_linears, narrowing_of

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def loaded() -> None:
    """Load them: built by the session's start (tests/conftest.py), so a module that does not load is a failure."""
    assert cpu_gemv.available(), f"the CPU kernels did not load: {cpu_gemv.kernel_path().reason}"


SHAPES = [(1, 7, 37), (1, 300, 129), (2, 96, 64), (8, 1536, 512), (2, 33, 6161), (9, 300, 129), (40, 257, 520)]
"""(rows of x, out, in): widths that are and are not multiples of the vector length; 8 rows and fewer take the
matrix-vector kernel, more the widened GEMM; from 6144 inputs bf16 rows go in pairs (an odd one alone)."""


def _data(m: int, n: int, k: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g)
    w = torch.randn(n, k, generator=g).to(torch.bfloat16)
    q = torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8)
    scale = torch.rand(n, generator=g) + 0.1
    return x, w, q, scale


def rounded16(x: torch.Tensor, group: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) rounded as the int8 and int4 decode kernels round it, computed here from the rule: per group of
    `group` columns (the last one shorter), X = round(x · 32767 / max|x|) to even within ±32767, in float32 as the
    kernels compute it. Returns (X as float64, each column's step max|x| / 32767 as float64)."""
    X, steps = torch.empty_like(x, dtype=torch.float64), torch.empty_like(x, dtype=torch.float64)
    for start in range(0, x.shape[1], group):
        part = x[:, start:start + group].float()
        top = part.abs().amax(dim=1, keepdim=True)
        inverse = torch.where(top > 0, torch.tensor(32767.0) / top, torch.tensor(0.0))
        X[:, start:start + group] = torch.round(torch.clamp(part * inverse, -32767.0, 32767.0)).double()
        steps[:, start:start + group] = (top / 32767.0).double()
    return X, steps


@pytest.mark.parametrize("inference", [False, True])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_products_equal_the_float64_product_to_float32_rounding(m: int, n: int, k: int, inference: bool) -> None:
    """bf16: the float32 product of the stored weights. int8: with 8 rows and fewer (a decode step) the exact
    product of the int8 rows and x rounded to 16 bits per group of 128 (`rounded16`), which stays within that
    rounding's bound of the unrounded product; more rows (a prefill) widen the weights for float32 GEMM.
    Also under inference mode, as the engine calls them (the worker threads of the GEMM path are not in it)."""
    x, w, q, scale = _data(m, n, k)
    ref = x.double() @ w.double().T
    ref8 = (x.double() @ q.double().T) * scale.double()
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # with one thread the blocks run on the calling thread, inside its mode
    try:
        with torch.inference_mode(inference):
            y, y8 = cpu_gemv.linear_bf16(x, w), cpu_gemv.linear_int8(x, q, scale)
    finally:
        torch.set_num_threads(before)
    bound = 1e-6 * np.sqrt(k)  # relative to the largest output: float32 sums of k terms
    assert float((y.double() - ref).abs().max() / ref.abs().max()) < bound
    if m > 8:
        assert float((y8.double() - ref8).abs().max() / ref8.abs().max()) < bound
        return
    X, steps = rounded16(x)
    exact = ((X * steps) @ q.double().T) * scale.double()
    assert float((y8.double() - exact).abs().max() / exact.abs().max()) < bound
    # the rounding moves each activation by at most half its step: bounded per output, and far inside it
    reach = ((steps / 2) @ q.double().abs().T) * scale.double()
    assert bool(((y8.double() - ref8).abs() <= reach + bound * ref8.abs().max()).all())
    assert float((y8.double() - ref8).abs().max() / ref8.abs().max()) < 1e-4


def test_shape_and_dtype_of_the_input_are_kept_and_bits_are_accepted() -> None:
    x, w, q, scale = _data(6, 40, 48)
    xb = x.to(torch.bfloat16).view(2, 3, 48)
    y = cpu_gemv.linear_bf16(xb, w.view(torch.int16))  # Bf16Linear keeps its weight as int16 bits
    assert y.shape == (2, 3, 40) and y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), xb.float() @ w.float().T, rtol=1e-2, atol=1e-2)
    assert cpu_gemv.linear_int8(x.view(1, 6, 48), q, scale.to(torch.bfloat16)).shape == (1, 6, 40)
    strided = torch.randn(48, 6).T  # not contiguous
    torch.testing.assert_close(cpu_gemv.linear_bf16(strided, w), strided @ w.float().T, rtol=1e-5, atol=1e-5)


def test_the_result_does_not_depend_on_the_thread_count() -> None:
    x, w, q, scale = _data(3, 4096, 512, seed=4)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = cpu_gemv.linear_bf16(x, w), cpu_gemv.linear_int8(x, q, scale)
        torch.set_num_threads(2)
        two = cpu_gemv.linear_bf16(x, w), cpu_gemv.linear_int8(x, q, scale)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one[0], two[0]) and torch.equal(one[1], two[1])


def test_mismatched_widths_are_refused_with_the_sizes() -> None:
    x, w, q, scale = _data(1, 8, 32)
    with pytest.raises(RuntimeError, match="x has 31 columns but w has 32"):
        cpu_gemv.linear_bf16(x[:, :31], w)
    with pytest.raises(RuntimeError, match="one value per row"):
        cpu_gemv.linear_int8(x, q, scale[:7])
    with pytest.raises(RuntimeError, match="w must be int8"):
        cpu_gemv.linear_int8(x, w, scale)


def test_bf16_linear_is_the_float_linear_at_half_the_bytes() -> None:
    g = torch.Generator().manual_seed(2)
    linear = nn.Linear(512, 1024, bias=True)
    with torch.no_grad():
        linear.weight.copy_(linear.weight.to(torch.bfloat16).float())  # S2's weights are bfloat16 values
    layer = Bf16Linear(linear.weight, linear.bias)
    assert layer.bits.dtype == torch.int16 and 2 * layer.bits.nbytes == linear.weight.nbytes
    layer.to(torch.float32)  # what model.to(dtype) does: the weight stays 16-bit
    assert layer.bits.dtype == torch.int16 and torch.equal(layer.weight.float(), linear.weight)
    for rows in (1, 2, 33):
        x = torch.randn(1, rows, 512, generator=g)
        torch.testing.assert_close(layer(x), linear(x), rtol=1e-5, atol=1e-5)


def test_int8_rounds_a_decode_steps_activations_far_finer_than_8_bits_and_than_its_weights() -> None:
    """fbgemm's kernel rounds activations to 8 bits per call (bench/fbgemm_int8.py shows it): an outlier then sets
    a step that erases everything else. Ours rounds them to 16 bits per group of 128: a tiny activation in another
    group keeps its own step, and even in the outlier's group the product stays within 1e-4 of the unrounded
    one, under a tenth of what rounding the weights to int8 costs the same product."""
    g = torch.Generator().manual_seed(3)
    w = torch.randn(64, 256, generator=g)
    layer = Int8Linear.from_weight(w)
    for at in (0, 200):  # the outlier in the first or the second group
        x = torch.randn(1, 256, generator=g) * 1e-3
        x[0, at] = 100.0
        deq = x.double() @ layer.dequantized().double().T
        ours = float((layer(x).double() - deq).abs().max() / deq.abs().max())
        weights = float((deq - x.double() @ w.double().T).abs().max() / deq.abs().max())
        assert ours < 1e-4 and ours < weights / 10, (ours, weights)
        # the outlier's columns zeroed in the weights, x as it is: the product is the other group's alone, whose
        # tiny activations keep their own 16-bit step (one step per row would round them all to 0)
        other = slice(128, 256) if at < 128 else slice(0, 128)
        w_other = torch.zeros_like(w)
        w_other[:, other] = w[:, other]
        layer_other = Int8Linear.from_weight(w_other)
        deq_other = x.double() @ layer_other.dequantized().double().T
        alone = float((layer_other(x).double() - deq_other).abs().max() / deq_other.abs().max())
        assert alone < 1e-4, alone


def test_a_nan_activation_gives_nan_not_a_finite_number() -> None:
    """Rounding to integers must not turn a NaN (a diverged model) into finite garbage: the rows it feeds are NaN,
    as a float32 product makes them."""
    g = torch.Generator().manual_seed(6)
    int8 = Int8Linear.from_weight(torch.randn(16, 200, generator=g))  # its last group: 72 values, a scalar tail
    int4 = _int4_layer(16, 256, seed=6)
    for layer, width in ((int8, 200), (int4, 256)):
        for at in (0, 130, width - 1):
            x = torch.randn(2, width, generator=g)
            x[1, at] = float("nan")
            y = layer(x)
            assert torch.isfinite(y[0]).all() and torch.isnan(y[1]).all(), (type(layer).__name__, at)


def _int4_layer(n: int, k: int, group: int = 128, seed: int = 0) -> Int4Linear:
    g = torch.Generator().manual_seed(seed)
    return Int4Linear(*quantize_groups(torch.randn(n, k, generator=g) * 0.05 + 0.01, group), group)


def _torch_int4(layer: Int4Linear, x: torch.Tensor) -> torch.Tensor:
    """torch's own int4 kernel (bfloat16 activations) on the same codes, scales and offsets: the reference."""
    packed = torch._convert_weight_to_int4pack_for_cpu(layer.codes().to(torch.int32), 2)
    return torch._weight_int4pack_mm_for_cpu(x.to(torch.bfloat16), packed, layer.group,
                                             layer.scales_and_zeros.transpose(0, 1).contiguous())


def test_int4_codes_round_to_within_half_a_step_and_pack_losslessly() -> None:
    g = torch.Generator().manual_seed(2)
    w = torch.randn(96, 256, generator=g) * 0.05 + 0.01
    q, sz = quantize_groups(w, 128)
    assert q.dtype == torch.uint8 and int(q.max()) == 15 and int(q.min()) == 0 and sz.shape == (96, 2, 2)
    assert sz.dtype == torch.bfloat16  # as torch's int4 kernels take them
    layer = Int4Linear(q, sz, 128)
    assert layer.nibbles.shape == (96, 128) and layer.nibbles.dtype == torch.uint8  # two codes per byte
    assert torch.equal(unpack_codes(pack_codes(q)), q) and torch.equal(layer.codes(), q)
    # the layout the kernel reads: in each 32-byte block, bits 4i..4i+3 of 16-bit lane j hold code 16i + j
    lanes = layer.nibbles[0, :32].to(torch.int32)
    lane3 = int(lanes[6]) | int(lanes[7]) << 8
    assert [(lane3 >> (4 * i)) & 15 for i in range(4)] == [int(q[0, 16 * i + 3]) for i in range(4)]
    step = sz[..., 0].float().repeat_interleave(128, dim=1)  # (96, 256): each weight's group scale
    assert bool(((layer.dequantized() - w).abs() <= step / 2 + 1e-6).all())
    layer.to(torch.float32)  # what model.to(dtype) does: the ranges stay bfloat16 bits
    assert layer.range_bits.dtype == torch.int16 and torch.equal(layer.scales_and_zeros, sz)
    with pytest.raises(ValueError, match="a group of 96 does not tile 192 inputs in blocks of 64"):
        Int4Linear(q[:, :192], sz[:, :2], 96)
    assert Int4Linear.from_linear(nn.Linear(100, 8, bias=False)) is None  # not groupable: narrow uses int8
    assert Int4Linear.from_linear(nn.Linear(192, 8, bias=False)).group == 64


@pytest.mark.parametrize("m,n,k,group", [(1, 16, 128, 128), (2, 17, 192, 64), (8, 1536, 512, 128),
                                         (9, 304, 192, 64), (40, 256, 512, 128)])
def test_int4_product_is_the_dequantized_product_within_torchs_rounding(m: int, n: int, k: int, group: int) -> None:
    """Decode steps (8 rows and fewer) round the activations to 16 bits per group, far finer than the bfloat16
    torch's int4 kernel takes; a prefill widens the weights for float32 GEMM."""
    layer = _int4_layer(n, k, group)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(1))
    ref = x.double() @ layer.dequantized().double().T
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch.inference_mode():
            ours = layer(x)
    finally:
        torch.set_num_threads(before)
    error = float((ours.double() - ref).abs().max() / ref.abs().max())
    assert error < (1e-4 if m <= 8 else 1e-6 * np.sqrt(k)), error
    if n % 16 == 0:  # torch's packing needs it
        theirs = float((_torch_int4(layer, x).double() - ref).abs().max() / ref.abs().max())
        assert error < theirs / 10, (error, theirs)


def test_int4_with_an_outlier_activation_stays_within_torchs_rounding() -> None:
    """An outlier sets its group's 16-bit step: the small activations beside it lose precision, the product's
    error stays well below what torch's int4 kernel makes of the same input."""
    layer = _int4_layer(64, 256, seed=3)
    g = torch.Generator().manual_seed(4)
    for at in (0, 100, 255):
        x = torch.randn(1, 256, generator=g) * 1e-3
        x[0, at] = 100.0
        ref = x.double() @ layer.dequantized().double().T
        ours = float((layer(x).double() - ref).abs().max())
        theirs = float((_torch_int4(layer, x).double() - ref).abs().max())
        assert ours < theirs / 4, (ours, theirs)


def test_int4_results_do_not_depend_on_the_thread_count_and_bad_shapes_are_refused() -> None:
    layer = _int4_layer(1001, 256, seed=5)  # an odd number of rows: the last one alone
    x = torch.randn(3, 256)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = layer(x)
        torch.set_num_threads(2)
        two = layer(x)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)
    with pytest.raises(RuntimeError, match="x has 255 columns but w has 256"):
        cpu_gemv.linear_int4(x[:, :255], layer.nibbles, layer.range_bits, 128)
    with pytest.raises(RuntimeError, match=r"the group \(96\) must be a multiple of 64 that divides the width 256"):
        cpu_gemv.linear_int4(x, layer.nibbles, layer.range_bits, 96)
    with pytest.raises(RuntimeError, match=r"scales must be a contiguous \(out, in/group, 2\) tensor"):
        cpu_gemv.linear_int4(x, layer.nibbles, layer.range_bits[:, :1], 128)
    with pytest.raises(RuntimeError, match="w must be uint8"):
        cpu_gemv.linear_int4(x, layer.nibbles.to(torch.int8), layer.range_bits, 128)


def test_int4_fast_path_follows_the_dequantized_float_model_closer_than_torchs_kernel(models_and_tok,
                                                                                      monkeypatch) -> None:
    """The int4 model through our kernel, and through torch's int4 kernel, against the same model with every
    Int4Linear replaced by a float32 Linear of its dequantized weights (the plain reference): ours makes the
    reference's codes for whole lines or most of them; torch's kernel (bfloat16 activations) departs within a few
    frames (measured: 193 vs 37 agreeing frames over these 6 seeds, 4 lines of 6 identical)."""
    from s2studio.engine.s2.fast import FastDecoder, FastSampler, generate_frames_fast
    from s2studio.engine.s2.generate import make_generator
    from s2studio.text.prompt import build_prompt

    load, tok = models_and_tok
    quantized, reference = load(narrow="int4"), load(narrow="int4")
    replaced = 0
    for parent, name in linear_slots(reference):
        layer = getattr(parent, name)
        if isinstance(layer, Int4Linear):
            plain = nn.Linear(layer.in_features, layer.out_features, bias=False)
            plain.weight.data = layer.dequantized()
            setattr(parent, name, plain)
            replaced += 1
    assert replaced == narrowing_of(quantized).layers > 0

    def codes(model, seed: int) -> list[list[int]]:
        decoder = FastDecoder(model, tok.im_end_id, length=512)
        sampler = FastSampler(decoder, temperature=0.8, top_p=0.9, top_k=30, generator=make_generator(seed))
        prompt = build_prompt(tok, [], [], "<|speaker:0|>Four bits a weight, the same voice.")
        return [f.tolist() for f in generate_frames_fast(decoder, prompt, sampler, max_new_tokens=40)]

    def agreeing(a: list, b: list) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

    seeds = range(1, 7)
    plain = {seed: codes(reference, seed) for seed in seeds}
    ours = [agreeing(codes(quantized, seed), plain[seed]) for seed in seeds]
    monkeypatch.setattr(cpu_gemv, "available", lambda: False)  # Int4Linear falls back to torch's kernel
    theirs = [agreeing(codes(quantized, seed), plain[seed]) for seed in seeds]
    assert sum(ours) >= 3 * sum(theirs) and sum(n == len(plain[s]) for n, s in zip(ours, seeds)) >= 3, (ours, theirs)


@pytest.mark.parametrize("m,n,k,group", [(16, 300, 256, 128), (11, 33, 200, None), (9, 40, 192, 64),
                                         (8, 31, 6400, 128), (5, 17, 9728, 128)])
def test_a_batched_steps_rows_are_each_the_row_alone(m: int, n: int, k: int, group: int | None) -> None:
    """A batched decode step (`stream`: the weights read once for all rows, whatever their number) computes every
    row of x with the additions of that row alone: any number of rows beside it, any thread count. This CPU's
    width here; the narrower ones in `test_every_width_computes_what_this_cpus_width_does`."""
    x, w, q, scale = _data(m, n, k, seed=m + k)
    products = {"bf16": lambda v, stream: cpu_gemv.linear_bf16(v, w, stream),
                "int8": lambda v, stream: cpu_gemv.linear_int8(v, q, scale, stream)}
    if group is not None:
        layer = _int4_layer(n, k, group, seed=m)
        products["int4"] = lambda v, stream: cpu_gemv.linear_int4(v, layer.nibbles, layer.range_bits, group, stream)
    before = torch.get_num_threads()
    try:
        for kind, product in products.items():
            torch.set_num_threads(1)
            alone = torch.cat([product(x[i:i + 1], False) for i in range(m)])
            for threads in (1, 2):
                torch.set_num_threads(threads)
                for rows in sorted({1, 2, 3, m // 2, m - 1, m} - {0}):
                    assert torch.equal(product(x[:rows], True), alone[:rows]), (kind, rows, threads)
    finally:
        torch.set_num_threads(before)


WIDTH_CHECK = """
import importlib, sys, torch
module = importlib.import_module("s2studio.engine.weights._cpu_" + sys.argv[2].lower())
assert module.WIDTH == sys.argv[2], module.WIDTH
ops = torch.ops.s2studio_cpu
for shape, case in torch.load(sys.argv[1]).items():
    for name, x in case["inputs"].items():
        got = {"bf16": ops.linear_bf16(x, case["w"]), "int8": ops.linear_int8(x, case["q"], case["scale"]),
               "int4": ops.linear_int4(case["inputs4"][name], case["nibbles"], case["ranges"], case["group"])}
        for kind, y in got.items():
            want = case["outputs"][name][kind]
            error = float((y.double() - want.double()).abs().max() / want.double().abs().max())
            print(shape, name, kind, error)
            assert error < 1e-5, (shape, name, kind, error)
            if kind == "int4" and name == "decode" and sys.argv[2] != "BASE":  # the same 8 lanes of int32 sums
                assert torch.equal(y, want), (shape, name, kind)
    x, x4 = case["inputs"]["prefill"], case["inputs4"]["prefill"]  # a batched step's rows: each one's bits alone
    for kind, product, rows in (("bf16", lambda v, s: ops.linear_bf16(v, case["w"], s), x),
                                ("int8", lambda v, s: ops.linear_int8(v, case["q"], case["scale"], s), x),
                                ("int4", lambda v, s: ops.linear_int4(v, case["nibbles"], case["ranges"],
                                                                      case["group"], s), x4)):
        alone = torch.cat([product(rows[i:i + 1], False) for i in range(rows.shape[0])])
        assert torch.equal(product(rows, True), alone), (shape, "rows", kind)
print("widths agree")
"""


def test_every_width_computes_what_this_cpus_width_does(tmp_path: Path) -> None:
    """The install builds every width (kernels.WIDTHS); torch's choice for the CPU picks one. The others are other
    code paths of one source: each this CPU can run (the narrower ones) is imported in a subprocess (one library of
    the kernels per process) and run on the inputs this CPU's module answered: widths that are and are not
    multiples of the vectors, groups with a tail, an odd number of int4 blocks; int4's AVX2 and AVX512 code sum the
    same 8 lanes, so their decode steps are equal bit for bit; and in every width the rows of a batched step (12 rows
    streamed at once) are each the row alone. A wider width is built only."""
    mine = cpu_gemv.kernel_path().width
    built = {w for w in kernels.WIDTHS if list(kernels.FOLDER.glob(f"{kernels.module_name(w)}.*"))}
    assert built == set(kernel_build.widths()), built  # every width on x86-64, the base one elsewhere
    cases = {}
    for m, n, k, group in ((12, 300, 256, 128), (12, 33, 200, None), (3, 9, 192, 64), (3, 31, 6400, 128)):
        x, w, q, scale = _data(m, n, k, seed=k)
        if group is None:  # int4 needs whole blocks: its part of this shape is another width's
            layer = _int4_layer(n, 256, 128, seed=8)
            x4 = torch.randn(m, 256, generator=torch.Generator().manual_seed(9))
        else:
            layer, x4 = _int4_layer(n + 1, k, group, seed=8), x
        inputs = {"decode": (x[:3], x4[:3]), "prefill": (x, x4)}
        cases[f"{m}x{n}x{k}"] = {
            "w": w, "q": q, "scale": scale, "nibbles": layer.nibbles, "ranges": layer.range_bits,
            "group": layer.group, "inputs": {name: v for name, (v, _) in inputs.items()},
            "inputs4": {name: v4 for name, (_, v4) in inputs.items()},
            "outputs": {name: {"bf16": cpu_gemv.linear_bf16(v, w), "int8": cpu_gemv.linear_int8(v, q, scale),
                               "int4": layer(v4)} for name, (v, v4) in inputs.items()}}
    torch.save(cases, tmp_path / "case.pt")
    for width in kernels.widths_for(mine)[1:]:
        done = subprocess.run([sys.executable, "-c", WIDTH_CHECK, str(tmp_path / "case.pt"), width], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and "widths agree" in done.stdout, width + done.stdout + done.stderr


def test_narrowing_to_bf16_replaces_only_large_lossless_layers(tiny_model, monkeypatch) -> None:
    from s2studio.engine.weights import bf16 as bf16_linear

    model = tiny_model
    assert narrowing_of(model) == Narrowed("none", 0)
    # only the 4096-row fast head reaches SMALL on the tiny model
    assert narrow_linears(model, "bf16") == Narrowed("bf16", 1)
    assert isinstance(model.fast_output, Bf16Linear) and isinstance(model.layers[0].attention.wqkv, nn.Linear)
    candidates = len(linear_slots(model))
    with torch.no_grad():  # one slow layer gets a weight bfloat16 cannot hold
        model.layers[0].feed_forward.w1.weight[0, 0] = 1 / 3

    monkeypatch.setattr(bf16_linear, "SMALL", 0)
    replaced = narrow_linears(model, "bf16").layers
    assert isinstance(model.layers[0].feed_forward.w1, nn.Linear)
    assert isinstance(model.layers[0].feed_forward.w2, Bf16Linear)
    assert replaced == candidates - 2  # all but the lossy one and the head replaced before
    assert narrowing_of(model) == Narrowed("bf16", candidates - 1)  # read back from the layer types


def test_fast_path_with_bf16_weights_makes_the_same_codes(models_and_tok, monkeypatch) -> None:
    from s2studio.engine.weights import bf16 as bf16_linear
    from s2studio.engine.s2.fast import FastDecoder, FastSampler, generate_frames_fast
    from s2studio.engine.s2.generate import make_generator
    from s2studio.text.prompt import build_prompt

    load, tok = models_and_tok

    def codes(model, seed: int) -> list[list[int]]:
        decoder = FastDecoder(model, tok.im_end_id, length=512)
        sampler = FastSampler(decoder, temperature=0.8, top_p=0.9, top_k=30, generator=make_generator(seed))
        prompt = build_prompt(tok, [], [], "<|speaker:0|>Half the bytes, the same voice.")
        return [f.tolist() for f in generate_frames_fast(decoder, prompt, sampler, max_new_tokens=40)]

    plain = load()
    monkeypatch.setattr(bf16_linear, "SMALL", 0)  # the tiny model's layers are below the size that gains
    narrow = load(narrow="bf16")
    assert isinstance(narrow.layers[0].attention.wqkv, Bf16Linear)
    assert isinstance(FastDecoder(narrow, tok.im_end_id, length=8).head, Bf16Linear)
    # the load kept the stored values: every tensor equals the float32 load's, the RoPE tables included
    ours = {**dict(narrow.named_parameters()), **dict(narrow.named_buffers())}
    theirs = {**dict(plain.named_parameters()), **dict(plain.named_buffers())}
    for name, tensor in theirs.items():
        mine = ours.get(name) if name in ours else ours[name.removesuffix("weight") + "bits"].view(torch.bfloat16)
        assert torch.equal(mine.to(tensor.dtype), tensor), name
        assert mine.dtype == (torch.bfloat16 if name not in ours else tensor.dtype), name
    same = sum(codes(plain, seed) == codes(narrow, seed) for seed in range(1, 6))
    assert same >= 4, same  # float32 sums in another order: equal codes for almost every seed


FALLBACK = """
import importlib.util, logging, sys, torch
logging.basicConfig(level=logging.INFO)
from s2studio.engine.weights import cpu_gemv, kernels
if sys.argv[1] == "missing":  # an install without the built modules
    find = importlib.util.find_spec
    importlib.util.find_spec = lambda name, *a: None if "._cpu_" in name else find(name, *a)
elif sys.argv[1] == "stale":  # sources changed since the build
    kernels.sources_digest = lambda: "0" * 64
from s2studio.engine.weights.bf16 import Bf16Linear
from s2studio.engine.weights.int8 import Int8Linear
path = cpu_gemv.kernel_path()
print("available", cpu_gemv.available(), "|", path.describe(), "|", path.reason)
w = torch.randn(300, 1024).bfloat16().float(); x = torch.randn(1, 1024)
torch.testing.assert_close(Bf16Linear(w)(x), x @ w.T, rtol=1e-5, atol=1e-5)
q = Int8Linear.from_weight(w)
print("int8", float(((q(x) - x @ q.dequantized().T).norm() / (x @ w.T).norm())))
"""


@pytest.mark.parametrize("case, why", [
    ("off", "off (S2STUDIO_CPU_KERNELS=0)"),
    ("missing", "the C++ kernels are not built in this installation; reinstall S2 Studio, or run scripts/setup"),
    ("stale", "was built from other sources than these; rebuild it (scripts/setup, or pip install again)"),
])
def test_without_the_kernels_the_fast_path_keeps_torchs_and_says_why(case: str, why: str) -> None:
    env = {**os.environ, "S2STUDIO_CPU_KERNELS": "0" if case == "off" else "1"}
    done = subprocess.run([sys.executable, "-c", FALLBACK, case], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "available False | torch's kernels (slower) |" in done.stdout and why in done.stdout
    assert why in done.stderr and "torch's kernels (slower)" in done.stderr  # the log says it too
    assert float(done.stdout.split("int8 ")[1]) < 1e-2  # torch's int8 kernel (bf16 activations)


def test_the_engine_reports_the_kernels_it_runs(tiny_model_folder: Path, monkeypatch) -> None:
    from s2studio.engine.s2.setup import load_runtime

    runtime = load_runtime(tiny_model_folder, device="cpu", precision="fp32", speed="fast", codec=False)
    width = cpu_gemv.kernel_path().width
    assert width == kernels.widths_for(torch.backends.cpu.get_cpu_capability())[0]
    assert runtime.info.kernels == f"C++ kernels ({width})" and runtime.info.kernels_note == ""
    assert runtime.info.settings_text() == f"float32, bf16 weights; C++ kernels ({width})"
    exact = load_runtime(tiny_model_folder, device="cpu", precision="fp32", speed="exact", codec=False)
    assert exact.info.kernels == ""  # the exact loop runs torch's own ops by definition
    monkeypatch.setattr(cpu_gemv, "kernel_path", lambda: kernels.KernelPath(None, "_cpu_avx2 is not built"))
    slow = load_runtime(tiny_model_folder, device="cpu", precision="fp32", speed="fast", codec=False)
    assert (slow.info.kernels, slow.info.kernels_note) == ("torch's kernels (slower)", "_cpu_avx2 is not built")


def test_a_module_anyone_else_could_have_written_is_refused(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "weights"
    folder.mkdir(mode=0o755)
    module = folder / "_cpu_avx2.so"
    module.write_bytes(b"\x7fELF")
    module.chmod(0o755)
    assert kernels.file_problem(module) is None
    module.chmod(0o775)
    assert kernels.file_problem(module) == "_cpu_avx2.so is writable by its group"
    module.chmod(0o757)
    assert kernels.file_problem(module) == "_cpu_avx2.so is writable by others"
    module.chmod(0o755)
    folder.chmod(0o777)
    assert kernels.file_problem(module) == f"the folder {folder} is writable by others"
    folder.chmod(0o755)
    link = folder / "_cpu_base.so"
    link.symlink_to(module)
    assert kernels.file_problem(link) == "_cpu_base.so is not a plain file"
    monkeypatch.setattr(os, "getuid", lambda: os.stat(module).st_uid + 1000)
    if os.stat(module).st_uid != 0:  # root's files are trusted (an administrator's install)
        assert kernels.file_problem(module) == f"_cpu_avx2.so belongs to another user (uid {os.stat(module).st_uid})"


@pytest.fixture()
def tiny_model_folder() -> Path:
    folder = _folder()
    if not (folder / "config.json").is_file():
        from s2studio.demo_model import write_demo_model

        write_demo_model(folder, seed=0, size="tiny", codec=False)
    return folder


@pytest.fixture()
def tiny_model():
    return _loader()[0]()


@pytest.fixture()
def models_and_tok():
    return _loader()


def _loader():
    from s2studio.demo_model import write_demo_model
    from s2studio.engine.weights.checkpoints import load_dual_ar
    from s2studio.text.tokenizer import S2Tokenizer

    folder = _folder()
    if not (folder / "config.json").is_file():
        write_demo_model(folder, seed=0, size="tiny", codec=False)
    tok = S2Tokenizer.from_file(folder / "tokenizer.json")

    def load(**options):
        return load_dual_ar(folder, device="cpu", dtype=torch.float32,
                            semantic_range=(tok.semantic_begin_id, tok.semantic_end_id), im_end_id=tok.im_end_id,
                            **options)

    return load, tok


def _folder() -> Path:
    return Path(os.environ["XDG_CACHE_HOME"]) / "cpu-kernel-tests" / "tiny"
