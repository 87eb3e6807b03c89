"""`s2studio train` end to end on the tiny demo model: data from a folder and from a voice, checkpoints, resume on
the very trajectory, Ctrl+C, metrics, export, and the inputs it refuses before writing anything."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from safetensors.torch import load_file, save_file

from s2studio.cli import main
from s2studio.demo_model import write_demo_model
from s2studio.errors import UserError
from s2studio.train.clips import clips_from_folder
from s2studio.train.loop import TrainSettings
from s2studio.train.run import RunRequest, StopFlag, train

SETTINGS = dict(preset="r_8_alpha_16", batch_size=1, max_length=128, seed=7)


def write_clips(folder: Path, seconds: float = 8.0, count: int = 4, speaker: str = "alice", lab: bool = True) -> Path:
    rng = np.random.default_rng(3)
    (folder / speaker).mkdir(parents=True, exist_ok=True)
    for i in range(count):
        t = np.arange(int(44100 * seconds)) / 44100
        x = 0.3 * np.sin(2 * np.pi * (150 + 40 * i) * t) + 0.01 * rng.standard_normal(len(t))
        sf.write(folder / speaker / f"clip{i}.wav", x.astype(np.float32), 44100, subtype="PCM_16")
        if lab:
            (folder / speaker / f"clip{i}.lab").write_text(f"Clip number {i}, spoken clearly.", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_demo_model(tmp_path_factory.mktemp("train-model") / "tiny", seed=1)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_clips(tmp_path_factory.mktemp("train-data"))


def request(tiny: Path, data: Path, out: Path, steps: int, **kw) -> RunRequest:
    return RunRequest(tiny, out, tuple(clips_from_folder(data)), TrainSettings(steps=steps, **SETTINGS), **kw)


def steps_of(events) -> list:
    return [e.metrics for e in events if e.kind == "step"]


def test_resume_continues_the_same_trajectory(tiny: Path, data: Path, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    whole = list(train(request(tiny, data, tmp_path / "whole", 4, save_every=2)))
    straight = steps_of(whole)
    assert [m.step for m in straight] == [1, 2, 3, 4]
    assert straight[0].lr == 0 and straight[0].loss == straight[1].loss and straight[2].loss != straight[1].loss

    part = tmp_path / "part"
    shutil.copytree(tmp_path / "whole" / "checkpoints" / "step_000000002", part / "checkpoints" / "step_000000002")
    shutil.copytree(tmp_path / "whole" / "tokens", part / "tokens")
    resumed = steps_of(train(request(tiny, data, part, 4, resume=part)))
    assert [m.step for m in resumed] == [3, 4]
    for a, b in zip(resumed, straight[2:], strict=True):
        assert (a.loss, a.grad_norm, a.lr) == (b.loss, b.grad_norm, b.lr)
    assert (part / "lora.safetensors").read_bytes() == (tmp_path / "whole" / "lora.safetensors").read_bytes()


def test_cli_trains_writes_metrics_and_exports(tiny: Path, data: Path, tmp_path: Path, capsys) -> None:
    out, metrics = tmp_path / "run", tmp_path / "m.jsonl"
    rc = main(["train", "--model", str(tiny), "--data", str(data), "--out", str(out), "--steps", "2",
               "--batch-size", "1", "--max-length", "128", "--metrics-out", str(metrics)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert captured.out.strip() == str(out / "lora.safetensors")
    assert "step 2/2" in captured.err and "ETA" in captured.err
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2] and lines[0]["lr"] == 0.0 and lines[1]["lr"] == 1e-5
    assert set(lines[0]) == {"step", "loss", "base_loss", "semantic_loss", "top_5_accuracy", "grad_norm", "lr",
                             "seconds"}
    lora = load_file(str(out / "lora.safetensors"))
    assert len(lora) == 48 and "layers.0.attention.wqkv.lora_A" in lora and "fast_output.lora_B" in lora
    assert json.loads((out / "lora.json").read_text())["lora"] == "r_8_alpha_16"

    rc = main(["train", "export", "--lora", str(out / "lora.safetensors"), "--out", str(tmp_path / "exp")])
    assert rc == 0, capsys.readouterr().err
    assert {"config.json", "model.pth", "tokenizer.json", "codec.pth"} <= {p.name for p in (tmp_path / "exp").iterdir()}


def test_stop_saves_a_checkpoint_that_resumes(tiny: Path, data: Path, tmp_path: Path) -> None:
    stop = StopFlag()
    events = []
    for event in train(request(tiny, data, tmp_path / "run", 5), stop):
        events.append(event)
        if event.kind == "step" and event.metrics.step == 1:
            stop.set()
    assert events[-1].kind == "stopped" and events[-1].path.name == "step_000000001"
    assert not (tmp_path / "run" / "lora.safetensors").exists()
    resumed = steps_of(train(request(tiny, data, tmp_path / "run", 3, resume=tmp_path / "run")))
    assert [m.step for m in resumed] == [2, 3]


def test_refusals_write_nothing(tiny: Path, data: Path, tmp_path: Path, capsys) -> None:
    short = write_clips(tmp_path / "short", seconds=5.0, count=2)
    out = tmp_path / "out"
    assert main(["train", "--model", str(tiny), "--data", str(short), "--out", str(out)]) == 2
    assert "only 10.0 s of transcribed speech" in capsys.readouterr().err and not out.exists()

    bare = write_clips(tmp_path / "bare", count=1, lab=False)
    assert main(["train", "--model", str(tiny), "--data", str(bare), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "1 clip(s) have no transcript (first: alice/clip0.wav)" in err and not out.exists()

    # a damaged checkpoint: refused before the run folder is touched
    run = tmp_path / "damaged"
    (run / "checkpoints" / "step_000000002").mkdir(parents=True)
    (run / "checkpoints" / "step_000000002" / "state.pt").write_bytes(b"not a checkpoint")
    save_file({"x.lora_A": torch.zeros(2, 2), "x.lora_B": torch.zeros(2, 2)},
              str(run / "checkpoints" / "step_000000002" / "lora.safetensors"))
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    with pytest.raises(UserError, match="is damaged"):
        list(train(request(tiny, data, run, 4, resume=run)))
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before

    # a run folder that already holds a run needs --resume
    with pytest.raises(UserError, match="add --resume"):
        list(train(request(tiny, data, run, 4)))


def test_a_lora_of_another_shape_is_refused_by_export(tiny: Path, tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.safetensors"
    save_file({"layers.0.attention.wqkv.lora_A": torch.zeros(8, 32), "layers.0.attention.wqkv.lora_B": torch.zeros(5, 8)},
              str(bad))
    assert main(["train", "export", "--lora", str(bad), "--out", str(tmp_path / "exp"), "--model", str(tiny)]) == 2
    assert "was trained for another model's shape" in capsys.readouterr().err
    assert not (tmp_path / "exp").exists()
    (tmp_path / "junk.safetensors").write_bytes(b"\x00" * 40)
    assert main(["train", "export", "--lora", str(tmp_path / "junk.safetensors"), "--out", str(tmp_path / "exp"),
                 "--model", str(tiny)]) == 2
    assert "is not a readable LoRA file" in capsys.readouterr().err and not (tmp_path / "exp").exists()
