"""A script that mixes a voice carrying a LoRA with a plain voice, rendered by the real engine on the tiny model:
each LoRA line gets the codes of the model merged offline with that LoRA (`train export`), each plain line the
base model's, and the same request without the LoRA gives the base model's codes again."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from engine_contract import collect
from safetensors.torch import save_file

from s2studio.demo_model import write_demo_model
from s2studio.engine.api import (JobFailed, JobFinished, LineFinished, LineSpec, LoadRequest, Reference,
                                 SynthesisRequest)
from s2studio.engine.plan import line_fingerprint
from s2studio.engine.s2 import S2Engine
from s2studio.engine.weights.checkpoints import read_weights
from s2studio.settings import Sampling
from s2studio.train.export import export_model

TARGETS = ("attention.wqkv", "attention.wo", "feed_forward.w1", "feed_forward.w2", "feed_forward.w3")


def random_lora(model_dir: Path, path: Path, rank: int = 4, seed: int = 11) -> Path:
    """A LoRA on every r_8_alpha_16 target of the model, A and B both large enough to change the codes."""
    weights, _ = read_weights(model_dir)
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, w in weights.items():
        layer = name.removesuffix(".weight")
        wanted = layer in ("embeddings", "codebook_embeddings", "fast_embeddings", "fast_output") or (
            layer.startswith(("layers.", "fast_layers.")) and layer.split(".", 2)[2] in TARGETS)
        if not wanted or not name.endswith(".weight"):
            continue
        n_out, n_in = (w.shape[1], w.shape[0]) if layer.endswith("embeddings") else tuple(w.shape)
        out[layer + ".lora_A"] = torch.randn(rank, n_in, generator=gen) * 0.2
        out[layer + ".lora_B"] = torch.randn(n_out, rank, generator=gen) * 0.2
    save_file(out, str(path))
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("lora-render")
    base = write_demo_model(root / "tiny", seed=3)
    lora = random_lora(base, root / "lora.safetensors")
    merged = export_model(base, lora, root / "merged")
    return base, lora, merged


def loaded(model_dir: Path) -> S2Engine:
    engine = S2Engine(context_lines=0)  # each line on its own: its codes depend on its weights only
    events = collect(engine.load(LoadRequest("load", model_dir, device="cpu", precision="fp32"), threading.Event()))
    assert isinstance(events[-1], JobFinished), events[-1]
    return engine


def _codes(frames: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 32, size=(10, frames)).astype(np.int64)


def script(lora: Path | None) -> SynthesisRequest:
    """Speaker 0 carries `lora`, speaker 1 none; three lines, the LoRA voice first and last."""
    lines = (LineSpec("a", 0, "The tuned voice opens.", lora), LineSpec("b", 1, "The plain voice answers."),
             LineSpec("c", 0, "And the tuned voice closes.", lora))
    refs = (Reference(0, "Zero speaks.", _codes(5, 1)), Reference(1, "One speaks.", _codes(4, 2)))
    return SynthesisRequest("mix", lines, refs, Sampling(max_frames=12, seed_mode="fixed", seed=5))


def takes(engine: S2Engine, request: SynthesisRequest) -> dict[str, LineFinished]:
    events = collect(engine.generate(request, threading.Event()))
    failed = [e for e in events if isinstance(e, JobFailed)]
    assert not failed, failed
    return {e.line_id: e for e in events if isinstance(e, LineFinished)}


def test_each_line_renders_with_its_voices_weights(models: tuple[Path, Path, Path]) -> None:
    torch.set_num_threads(1)
    base_dir, lora, merged_dir = models
    mixed_engine = loaded(base_dir)
    mixed = takes(mixed_engine, script(lora))
    assert mixed_engine.last_switch_s is not None and mixed_engine.last_switch_s > 0
    base_engine = loaded(base_dir)
    base = takes(base_engine, script(None))
    merged = takes(loaded(merged_dir), script(None))

    for line in ("a", "c"):  # the LoRA voice's lines: the offline merge's codes, not the base's
        np.testing.assert_array_equal(mixed[line].codes, merged[line].codes)
        assert not np.array_equal(mixed[line].codes, base[line].codes)
    np.testing.assert_array_equal(mixed["b"].codes, base["b"].codes)  # the plain voice: the base model's
    assert not np.array_equal(mixed["b"].codes, merged["b"].codes)
    # a take made with a LoRA is not the same take as one without it
    assert mixed["a"].fingerprint != base["a"].fingerprint and mixed["b"].fingerprint == base["b"].fingerprint

    # the voice without its LoRA: the base model's codes for every line, from the switched engine
    again = takes(mixed_engine, script(None))
    for line in "abc":
        np.testing.assert_array_equal(again[line].codes, base[line].codes)
        np.testing.assert_array_equal(again[line].audio, base[line].audio)


def test_a_lora_of_another_model_fails_the_job_clearly(models: tuple[Path, Path, Path], tmp_path: Path) -> None:
    base_dir, _, _ = models
    other = write_demo_model(tmp_path / "mid", seed=1, size="mid")
    wrong = random_lora(other, tmp_path / "mid-lora.safetensors", rank=2)
    engine = loaded(base_dir)
    events = collect(engine.generate(script(wrong), threading.Event()))
    assert isinstance(events[-1], JobFailed)
    assert "was trained for another model's shape" in events[-1].error
    assert "use a LoRA trained on this model" in events[-1].error
    # the engine still renders the plain voice with the base weights afterwards
    fine = takes(engine, script(None))
    assert set(fine) == {"a", "b", "c"}
    # upstream batching speaks several lines in one batch: one set of weights, so mixed LoRAs are refused
    _, lora, _ = models
    mixed = script(lora)
    events = collect(engine.generate(replace(mixed, sampling=replace(mixed.sampling, batching="upstream")),
                                     threading.Event()))
    assert isinstance(events[-1], JobFailed) and "use line batching for voices with different LoRAs" in events[-1].error


def test_fingerprint_names_the_lora_only_when_there_is_one(models: tuple[Path, Path, Path], tmp_path: Path) -> None:
    _, lora, _ = models
    other = tmp_path / "copy.safetensors"
    other.write_bytes(lora.read_bytes())
    sampling = Sampling(seed_mode="fixed", seed=1)
    plain = line_fingerprint(LineSpec("a", 0, "Hi."), [], sampling)
    with_lora = line_fingerprint(LineSpec("a", 0, "Hi.", lora), [], sampling)
    assert with_lora != plain
    assert line_fingerprint(LineSpec("a", 0, "Hi.", other), [], sampling) == with_lora  # the bytes, not the path


def test_each_switch_is_reported_on_its_line(models: tuple[Path, Path, Path]) -> None:
    from s2studio.engine.api import LineStarted

    torch.set_num_threads(1)
    base_dir, lora, _merged = models
    engine = loaded(base_dir)
    started = [e for e in collect(engine.generate(script(lora), threading.Event())) if isinstance(e, LineStarted)]
    # a: the LoRA merged, b: back to the base weights, c: merged again; each timed
    assert [e.line_id for e in started] == ["a", "b", "c"]
    assert all(e.lora_switch_s is not None and e.lora_switch_s > 0 for e in started)
    assert started[-1].lora_switch_s == engine.last_switch_s
    plain = [e for e in collect(loaded(base_dir).generate(script(None), threading.Event()))
             if isinstance(e, LineStarted)]
    assert [e.lora_switch_s for e in plain] == [None, None, None]  # the base weights were in place
