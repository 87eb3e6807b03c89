"""`load_runtime`, the one load recipe (engine/s2/setup.py): the studio's engine and `synth` load the same thing
the same way, report what they narrowed, and share the one mapping from project settings to requests."""

from __future__ import annotations

import ast
import threading
from pathlib import Path
from typing import get_args, get_type_hints

import numpy as np
import pytest
import torch
from engine_contract import collect

from s2studio.cli import main
from s2studio.demo_model import write_demo_model
from s2studio.engine.api import QUANTIZE_MODES, JobFinished, LoadRequest
from s2studio.engine.plan import load_request
from s2studio.engine.s2 import S2Engine, setup
from s2studio.engine.s2.batch import BatchDecoder
from s2studio.engine.s2.fast import FastDecoder
from s2studio.engine.s2.generate import ExactDecoder
from s2studio.engine.s2.setup import FAST_CONTEXT, load_runtime
from s2studio.engine.weights.bf16 import Bf16Linear
from s2studio.engine.weights.int8 import Int8Linear
from s2studio.engine.weights.narrow import Narrowed
from s2studio.errors import UserError
from s2studio.settings import Sampling
from s2studio.state.project import GenerationSettings

PACKAGE = Path(__file__).resolve().parents[1] / "s2studio"


@pytest.fixture(scope="module")
def long_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model with a context longer than the fast path's cache, so that the cache length shows."""
    return write_demo_model(tmp_path_factory.mktemp("long") / "long", seed=0, max_seq_len=2 * FAST_CONTEXT)


def test_one_load_recipe() -> None:
    """Only setup.py loads a model: checks the fit, reads the weights, builds the decoders (the codec command
    loads its codec alone, through the recipe's codec loader, and sets its threads; training loads the float32 model it trains, with no narrowing and no decoders, and the
    codec for its tokens stage; the batch decoder makes its slots)."""
    names = {"load_dual_ar", "check_fits", "load_codec", "FastDecoder", "ExactDecoder", "BatchDecoder", "set_threads"}
    calls: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                if name in names:
                    calls.setdefault(name, set()).add(str(path.relative_to(PACKAGE)))
    setup_py, codec_cli = "engine/s2/setup.py", "commands/codec.py"
    assert {k: sorted(v) for k, v in calls.items()} == {
        "load_dual_ar": [setup_py], "check_fits": [setup_py], "BatchDecoder": [setup_py],  # the trainer: the recipe too
        "FastDecoder": ["engine/s2/batch.py", setup_py],  # the batch's slots are fast decoders
        "ExactDecoder": [setup_py], "load_codec": [setup_py], "set_threads": [codec_cli, setup_py]}


def test_the_studio_and_synth_fast_allocate_the_same_context(long_model: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    engine = S2Engine()
    events = collect(engine.load(LoadRequest("l", long_model, device="cpu", precision="fp32", speed="fast"),
                                 threading.Event()))
    assert isinstance(events[-1], JobFinished), events[-1]
    studio = engine._loaded.decoder
    engine.unload()

    loaded = []
    real = setup.load_runtime

    def spy(*args, **kwargs):
        loaded.append(real(*args, **kwargs))
        return loaded[-1]

    monkeypatch.setattr(setup, "load_runtime", spy)
    assert main(["synth", "--model", str(long_model), "--text", "<|speaker:0|>Hi.", "--device", "cpu",
                 "--precision", "fp32", "--fast", "--max-new-tokens", "3", "-q",
                 "--codes-out", str(tmp_path / "c.npy")]) == 0
    (runtime,) = loaded
    cli = runtime.decoder
    assert isinstance(studio, BatchDecoder) and isinstance(cli, FastDecoder)
    assert runtime.model.config.slow.max_seq_len == 2 * FAST_CONTEXT
    assert studio.length == cli.length == FAST_CONTEXT
    assert cli.caches.slow[0].k.shape[2] == FAST_CONTEXT  # what is allocated
    assert all(slot is None for slot in studio.slots)  # the studio's streams get caches of their own length
    assert runtime.codec is None  # codes only: no codec loaded


def test_the_runtime_reports_what_it_narrowed(long_model: Path) -> None:
    exact = load_runtime(long_model, device="cpu", precision="fp32")
    assert isinstance(exact.decoder, ExactDecoder) and exact.narrowed == Narrowed("none", 0)
    assert exact.info.precision == "float32" and exact.info.max_context == 2 * FAST_CONTEXT
    assert exact.info.codec_fingerprint and exact.info.sample_rate == 44100
    fast = load_runtime(long_model, device="cpu", precision="fp32", speed="fast", context=512, codec=False)
    # the CPU fast path keeps bf16 weights where they gain (on the tiny model only the 4096-row fast head)
    assert fast.narrowed == Narrowed("bf16", 1) and isinstance(fast.model.fast_output, Bf16Linear)
    assert fast.info.precision == "float32, bf16 weights" and fast.decoder.length == fast.info.max_context == 512
    assert fast.codec is None and fast.info.codec_fingerprint == ""
    int8 = load_runtime(long_model, device="cpu", precision="fp32", quantize="int8", speed="exact", codec=False)
    slots = 2 * 5 + 2 * 5 + 1  # 5 linear layers per block, 2 slow and 2 fast blocks, the fast head
    assert int8.narrowed == Narrowed("int8", slots) and isinstance(int8.model.layers[0].attention.wo, Int8Linear)
    assert int8.info.precision == "float32+int8"
    assert not hasattr(int8.model, "quantization") and not hasattr(int8.model, "bf16_weights")


def test_bad_options_are_user_errors(long_model: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="unknown quantization 'int3'"):
        load_runtime(long_model, device="cpu", quantize="int3")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="unknown speed 'quick'"):
        load_runtime(long_model, device="cpu", speed="quick")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="context sizes the fast path's cache"):
        load_runtime(long_model, device="cpu", precision="fp32", speed="exact", context=512)
    with pytest.raises(UserError, match=r"is not an S2 model folder: config.json is missing, tokenizer.json is missing"):
        load_runtime(tmp_path)
    with pytest.raises(UserError, match="does not exist or is not a folder"):
        load_runtime(tmp_path / "none")


def test_load_steps_report_progress_in_order(long_model: Path) -> None:
    steps = setup.load_steps(long_model, device="cpu", precision="fp32", codec=False)
    seen = []
    while True:
        try:
            seen.append(next(steps))
        except StopIteration as done:
            runtime = done.value
            break
    assert [s.message for s in seen] == ["reading the tokenizer", "loading the language model", "allocating the caches"]
    assert [s.progress for s in seen] == sorted(s.progress for s in seen)
    assert runtime.device == torch.device("cpu")


# ----------------------------------------------------------------------------- settings: one type each


def test_project_settings_are_the_engines_with_the_same_defaults() -> None:
    assert GenerationSettings().sampling == Sampling()  # one set of defaults
    fixed = GenerationSettings(seed_mode="fixed", seed=77, temperature=0.6, top_p=0.7, top_k=12, max_frames=300)
    assert fixed.sampling == Sampling(temperature=0.6, top_p=0.7, top_k=12, max_frames=300, seed_mode="fixed",
                                      seed=77)
    assert type(fixed.sampling) is Sampling and fixed.sampling.fixed_seed == 77
    assert GenerationSettings(seed_mode="random", seed=77).sampling.fixed_seed is None
    # a request may ask up to the context (0) or a few frames; a person's settings keep to the table's range
    assert Sampling(max_frames=0).max_frames == 0 and Sampling(max_frames=5).max_frames == 5
    with pytest.raises(UserError, match=r"^the longest line in frames must be between 16 and 8192, got 5$"):
        GenerationSettings(max_frames=5)
    request = load_request("load-1", Path("/m"), GenerationSettings(device="cpu", precision="bf16", speed="fast",
                                                                     quantize="int4"))
    assert request == LoadRequest("load-1", Path("/m"), device="cpu", precision="bf16", speed="fast",
                                  quantize="int4")
    assert load_request("l", Path("/m"), GenerationSettings()).threads == 0  # automatic: threads.py's choice
    assert load_request("l", Path("/m"), GenerationSettings(threads=3)).threads == 3
    # int4 everywhere: the project file's choices are the engine's
    assert get_args(get_type_hints(GenerationSettings)["quantize"]) == QUANTIZE_MODES


def test_request_settings_are_validated_once_with_one_line() -> None:
    for kwargs, message in (({"temperature": 2.0}, "temperature must be between 0.05 and 1.95, got 2.0"),
                            ({"top_p": 0.0}, "top-p must be between 0.05 and 1, got 0.0"),
                            ({"top_k": 0}, "top-k must be between 1 and 4096, got 0"),
                            ({"top_k": 2**70}, "top-k must be between 1 and 4096, got 1180591620717411303424"),
                            ({"max_frames": -1}, "the longest line in frames must be 0 (no limit) or more, got -1"),
                            ({"seed": 2**64}, "seed must be between 0 and 2147483647, got 18446744073709551616"),
                            ({"seed": -1}, "seed must be between 0 and 2147483647, got -1")):
        with pytest.raises(UserError) as exc:
            Sampling(**kwargs)
        assert str(exc.value).startswith(message)
    with pytest.raises(UserError, match="top-p"):  # the studio's out-of-range settings meet the same check
        GenerationSettings(top_p=1.5)


def test_generate_needs_a_seed_without_an_engine_to_draw_one(long_model: Path) -> None:
    from s2studio.engine.s2.generate import generate_long

    runtime = load_runtime(long_model, device="cpu", precision="fp32", codec=False)
    with pytest.raises(ValueError, match="needs a seed"):
        list(generate_long(runtime.decoder, runtime.tokenizer, "<|speaker:0|>Hi.", sampling=Sampling()))
    codes = [e for e in generate_long(runtime.decoder, runtime.tokenizer, "<|speaker:0|>Hi.",
                                      sampling=Sampling(max_frames=4, seed_mode="fixed", seed=1)) if hasattr(e, "codes")]
    assert codes and all(np.asarray(e.codes).shape[0] == 10 for e in codes)
