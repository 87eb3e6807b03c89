"""Weight-only int8 and int4 (engine/weights/) and the memory planner (engine/s2/memory.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from test_model_config import S2_CONFIG

from s2studio.engine.s2.device import DTYPES
from s2studio.engine.s2.memory import GB, available_ram, check_fits, footprint, param_counts
from s2studio.engine.weights.checkpoints import load_dual_ar
from s2studio.engine.weights.int8 import Int8Linear, quantize_rows
from s2studio.engine.weights.narrow import narrow_linears
from s2studio.errors import UserError
from s2studio.model.config import parse_config
from s2studio.model.dual_ar import DualAR


def test_int8_rows_round_to_within_half_a_step() -> None:
    w = torch.randn(48, 96, generator=torch.Generator().manual_seed(0)) * torch.linspace(0.01, 3, 48)[:, None]
    q, scale = quantize_rows(w)
    assert q.dtype == torch.int8 and int(q.abs().max()) == 127
    err = (q.float() * scale[:, None] - w).abs()
    assert bool((err <= scale[:, None] / 2 + 1e-7).all())
    assert torch.equal(q.abs().amax(dim=1), torch.full((48,), 127, dtype=torch.int8))  # every row uses its range


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int8_linear_matches_the_float_product(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(1)
    linear = torch.nn.Linear(256, 320, bias=True).to(dtype)
    x = torch.randn(3, 5, 256, generator=g).to(dtype)
    quant = Int8Linear.from_linear(linear)
    exact = torch.nn.functional.linear(x.float(), linear.weight.float(), linear.bias.float())
    ours = quant(x).float()
    assert ours.shape == (3, 5, 320)
    rel = (ours - exact).norm() / exact.norm()
    assert rel < (0.01 if dtype == torch.float32 else 0.03), float(rel)
    # weight-only: the CPU kernel computes the float32 product of x and the dequantized rows
    deq = torch.nn.functional.linear(x.float(), quant.dequantized().float(), linear.bias.float())
    torch.testing.assert_close(ours, deq.to(dtype).float(), rtol=1e-5 if dtype == torch.float32 else 1e-2,
                               atol=1e-5 if dtype == torch.float32 else 1e-2)
    assert quant(x).dtype == dtype


def test_quantized_tiny_model_generates_close_to_float(tmp_path: Path) -> None:
    from test_lm_golden import Models

    from s2studio.engine.s2.fast import FastDecoder
    from s2studio.text.prompt import build_prompt

    models = Models(tmp_path)
    model, tok = models.load({"seed": 0})
    folder = models.folder({"seed": 0})
    q = load_dual_ar(folder, device="cpu", dtype=torch.float32, narrow="int8",
                     semantic_range=(tok.semantic_begin_id, tok.semantic_end_id), im_end_id=tok.im_end_id)
    assert isinstance(q.layers[0].attention.wqkv, Int8Linear) and isinstance(q.fast_output, Int8Linear)
    assert q.layers[0].attention.wqkv.weight_q.dtype == torch.int8  # weight-only int8 rows
    assert q.embeddings.weight.dtype == torch.float32
    prompt = torch.as_tensor(build_prompt(tok, [], [], "<|speaker:0|>Quantized weights speak too."))
    with torch.inference_mode():
        ref, _ = FastDecoder(model, tok.im_end_id, length=256).prefill(prompt)
        ours, _ = FastDecoder(q, tok.im_end_id, length=256).prefill(prompt)
    assert isinstance(FastDecoder(q, tok.im_end_id, length=8).head, Int8Linear)
    rel = float((ours - ref).norm() / ref.norm())
    assert 0 < rel < 0.05, rel


def test_unknown_quantization_is_a_user_error() -> None:
    with pytest.raises(UserError, match="unknown quantization 'int3'"):
        narrow_linears(torch.nn.Module(), "int3")  # type: ignore[arg-type]


S2 = parse_config(S2_CONFIG)


def test_parameter_count_is_s2_pros() -> None:
    counts = param_counts(S2)
    with torch.device("meta"):
        real = sum(t.numel() for t in DualAR(S2).state_dict().values())
    assert counts.total == real
    assert 4.56e9 < counts.total < 4.57e9
    # the linear layers: 40 blocks of 100.9 M plus the 4096-row fast head
    assert counts.linear == 40 * (6144 * 2560 + 2560 * 4096 + 3 * 2560 * 9728) + 4096 * 2560


def test_s2_pro_footprints() -> None:
    bf16 = footprint(S2, precision="bf16", codec_bytes=0)
    assert round(bf16.weights / GB, 1) == 9.1
    assert round(bf16.kv_cache / GB, 2) == 4.83  # 36 layers x 2 x 8 heads x 128 x 32768 positions x 2 bytes
    fp32 = footprint(S2, precision="fp32", codec_bytes=0)
    assert fp32.weights == 2 * bf16.weights and fp32.kv_cache == 2 * bf16.kv_cache
    int8 = footprint(S2, precision="bf16", quantize="int8", context=8192, codec_bytes=0)
    assert 5.0 * GB < int8.weights < 5.2 * GB  # 4.05 G int8 weights + 0.51 G float embeddings
    assert round(int8.kv_cache / GB, 2) == 1.21
    assert int8.total < 8 * GB  # S2 Pro on an 8 GB GPU


def test_the_cpu_fast_path_counts_linear_weights_at_two_bytes() -> None:
    """S2 Pro in float32 on the CPU fast path: the bf16 linear weights are never widened (weights/bf16.py)."""
    counts = param_counts(S2)
    fp32 = footprint(S2, precision="fp32", context=8192, codec_bytes=0)
    kept = footprint(S2, precision="fp32", context=8192, codec_bytes=0, bf16_linears=True)
    bf16 = footprint(S2, precision="bf16", context=8192, codec_bytes=0)
    assert fp32.weights - kept.weights == 2 * counts.linear
    assert kept.weights - bf16.weights == 2 * counts.other
    assert round(kept.weights / GB, 1) == 10.2 and round(fp32.weights / GB, 1) == 18.2
    assert footprint(S2, precision="bf16", context=8192, codec_bytes=0, bf16_linears=True).weights == bf16.weights
    # so float32 activations fit in 15 GB free (a 16 GB machine running little else); a float32 copy does not
    check_fits(S2, "cpu", precision="fp32", context=8192, free=int(15 * GB), bf16_linears=True)
    with pytest.raises(UserError, match="only 15.0 GB is free"):
        check_fits(S2, "cpu", precision="fp32", context=8192, free=int(15 * GB))


def test_refusal_names_what_fits() -> None:
    with pytest.raises(UserError) as err:
        check_fits(S2, "cuda", precision="bf16", context=8192, free=int(8 * GB))
    message = str(err.value)
    assert message.startswith("the model needs 12.0 GB (bf16: weights 9.1 GB")
    assert "only 8.0 GB is free on cuda; precision bf16 with int8 weights needs 7.8 GB and fits" in message
    assert "\n" not in message
    with pytest.raises(UserError, match="nothing fits"):
        check_fits(S2, "cpu", precision="fp32", free=int(2 * GB))
    assert check_fits(S2, "cpu", precision="bf16", free=int(64 * GB)).total < 64 * GB


def test_available_ram_reads_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   12345678 kB\n")
    assert available_ram(meminfo) == 12345678 * 1024
    assert available_ram() is None or available_ram() > 0


def test_engine_loads_int8_and_refuses_what_cannot_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from engine_contract import collect

    from s2studio.demo_model import write_demo_model
    from s2studio.engine.s2 import memory
    from s2studio.engine.api import (
        JobFailed, JobFinished, LineFinished, LineSpec, LoadRequest, Sampling, SynthesisRequest,
    )
    from s2studio.engine.s2 import S2Engine

    folder = write_demo_model(tmp_path / "tiny", seed=3)
    engine = S2Engine()
    events = collect(engine.load(LoadRequest("l", folder, device="cpu", precision="fp32", speed="fast",
                                             quantize="int8"), threading.Event()))
    assert isinstance(events[-1], JobFinished), events[-1]
    assert engine.info.precision == "float32+int8"
    assert isinstance(engine._loaded.model.layers[0].feed_forward.w2, Int8Linear)
    out = collect(engine.generate(SynthesisRequest("g", (LineSpec("a", 0, "Hello."),),
                                                   sampling=Sampling(max_frames=6, seed_mode="fixed", seed=1)),
                                  threading.Event()))
    take = next(e for e in out if isinstance(e, LineFinished))
    assert take.codes.shape == (10, 5)

    monkeypatch.setattr(memory, "available_ram", lambda: 1000)
    events = collect(S2Engine().load(LoadRequest("l2", folder, device="cpu", precision="fp32"), threading.Event()))
    assert isinstance(events[-1], JobFailed)
    assert events[-1].error.startswith("the model needs ")
    assert "only 0.0 GB is free on cpu; nothing fits" in events[-1].error


def test_synth_fast_and_int8_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from s2studio.cli import main
    from s2studio.demo_model import write_demo_model

    folder = write_demo_model(tmp_path / "m", seed=0, codec=False)
    text = "<|speaker:0|>Hello there. <|speaker:1|>And you?"
    base = ["synth", "--model", str(folder), "--text", text, "--device", "cpu", "--precision", "fp32",
            "--max-new-tokens", "8", "--chunk-length", "10", "-q"]
    assert main([*base, "--codes-out", str(tmp_path / "exact.npy")]) == 0
    assert main([*base, "--fast", "--codes-out", str(tmp_path / "fast.npy")]) == 0
    assert main([*base, "--fast", "--quantize", "int8", "--codes-out", str(tmp_path / "int8.npy")]) == 0
    exact, fast = np.load(tmp_path / "exact.npy"), np.load(tmp_path / "fast.npy")
    np.testing.assert_array_equal(fast, exact)
    assert np.load(tmp_path / "int8.npy").shape[0] == 10
    capsys.readouterr()
    assert main([*base, "--quantize", "int3"]) == 2
    assert "unknown --quantize 'int3'; use none, int8 or int4" in capsys.readouterr().err


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("quantize", ["int8", "int4"])
def test_the_planner_counts_the_bytes_a_narrowed_s2_pro_holds(quantize: str, precision: str) -> None:
    """S2 Pro's full shape narrowed on the meta device (no memory): its tensors' bytes are what the planner
    predicts, less the fast path's int8 copy of the 4097 allowed head rows (made at load by the decoder)."""
    with torch.device("meta"):
        model = DualAR(S2)
    narrow_linears(model, quantize)
    model.to(DTYPES[precision])
    held = sum(t.nbytes for t in model.parameters())
    held += sum(t.nbytes for name, t in model.named_buffers() if "freqs_cis" not in name)  # RoPE: buffers
    predicted = footprint(S2, precision=precision, quantize=quantize, context=8192, codec_bytes=0).weights
    head_copy = (S2.codebook_size + 1) * S2.slow.dim
    assert predicted == held + head_copy
    if quantize == "int4":  # 2.02 GB of codes, 0.13 GB of ranges, the float embedding tables
        assert round(held / GB, 2) == (4.21 if precision == "fp32" else 3.18)


def test_int4_tiny_model_and_footprint(tmp_path: Path) -> None:
    from test_lm_golden import Models

    from s2studio.engine.s2.fast import FastDecoder
    from s2studio.engine.weights.int4 import Int4Linear
    from s2studio.text.prompt import build_prompt

    models = Models(tmp_path)
    model, tok = models.load({"seed": 0})
    q = load_dual_ar(models.folder({"seed": 0}), device="cpu", dtype=torch.float32, narrow="int4",
                     semantic_range=(tok.semantic_begin_id, tok.semantic_end_id), im_end_id=tok.im_end_id)
    assert isinstance(q.layers[1].feed_forward.w2, Int4Linear) and q.layers[1].feed_forward.w2.group == 64
    prompt = torch.as_tensor(build_prompt(tok, [], [], "<|speaker:0|>Four bits a weight."))
    with torch.inference_mode():
        ref, _ = FastDecoder(model, tok.im_end_id, length=256).prefill(prompt)
        ours, _ = FastDecoder(q, tok.im_end_id, length=256).prefill(prompt)
    assert 0 < float((ours - ref).norm() / ref.norm()) < 0.3
    int4 = footprint(S2, precision="bf16", quantize="int4", context=8192, codec_bytes=0)
    assert 3.1 * GB < int4.weights < 3.2 * GB  # 2.0 GB of codes + 0.13 GB of group ranges + 1.0 GB of embeddings
