"""Write the LoRA-training goldens of this CPU: losses, gradient norms, LoRA weights and the exported model from an
independent implementation of upstream's recipe, for the parity tests (`tests/test_train_golden.py`).

Dev-only. Run it with the side venv that has the independent port `mizuoto-fishspeech` installed:

    .venv-ref/bin/python tools/make_lora_goldens.py [--only CASE ...]

The files go to the set of the running CPU capability (`tests/golden_sets.py`, kind "lora"), with a manifest
naming the machine, capability, torch and port. One thread, CPU float32. About a minute on one AVX2 core.

Per case (`tests/lora_cases.py`): our seeded tiny demo model (`s2studio.demo_model`, imported from this checkout)
and seeded random codes per speaker, written as the port's `tokens` stage leaves them (`tokens/groups.json` and a
`.npy` per clip). Injected cases drive the port's own pieces in its `stage_train` order (seeding, `initial_lora`
replaying upstream's draws, then the given A/B with dropout 0, AdamW, LambdaLR, the data loader's base seed,
`Samples`, `collate`, `losses`); seeded cases run the port's whole `train` stage through `stage_main`. Cases with
`export` then run its `export` stage and a seeded `generate_long` on the exported folder (the static-cache
attention of `make_lm_goldens.py`). Nothing of the port is copied here; it is only called.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tools")]

from golden_sets import MANIFEST, cases_to_make, folder_to_write, machine, port_version, write_manifest  # noqa: E402
from lora_cases import CASES, GOLDEN_KIND, SYNTH_FRAMES, SYNTH_SEED, SYNTH_TEXT, LoraCase, clip_text, speaker_codes  # noqa: E402
from lora_cases import injected_lora  # noqa: E402

from s2studio.demo_model import folder_digest, write_demo_model  # noqa: E402

MADE_BY = "tools/make_lora_goldens.py with mizuoto-fishspeech (independent port), CPU fp32, one thread"

FORMAT_VERSION = 1
TRAINER = "mizuoto_fishspeech.train:FishSpeechTrainer"


def write_tokens(case: LoraCase, workdir: Path) -> None:
    """`workdir/tokens/` as the port's tokens stage writes it."""
    from mizuoto_fishspeech.finetune import pack_text

    folder = workdir / "tokens"
    folder.mkdir(parents=True, exist_ok=True)
    index = []
    for name, clips in sorted(speaker_codes(case).items()):
        (folder / name).mkdir(exist_ok=True)
        sentences = []
        for i, codes in enumerate(clips):
            np.save(folder / name / f"c{i}.npy", codes)
            sentences.append({"id": f"c{i}", "texts": [pack_text(clip_text(name, i))], "codes": f"{name}/c{i}.npy"})
        index.append({"name": name, "source": "folder", "sentences": sentences})
    (folder / "groups.json").write_text(json.dumps(index, ensure_ascii=False, indent=1), encoding="utf-8")


def lora_shapes(config, lora) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
    from mizuoto_fishspeech.finetune import lora_targets

    return {t.path: ((lora.r, t.cin), (t.cout, lora.r)) for t in lora_targets(config, lora)}


def train_injected(case: LoraCase, model_dir: Path, workdir: Path) -> tuple[list[dict], dict[str, torch.Tensor], int]:
    """The port's stage_train, step for step, with injected A/B and dropout 0."""
    from mizuoto.text.tokenize.bpe import load_bpe
    from mizuoto_fishspeech import finetune as ft
    from mizuoto_fishspeech import train as pt

    seed = case.seed
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    tokenizer = load_bpe(model_dir)
    config = pt.model_args(model_dir, tokenizer)
    stock = ft.LORA_CONFIGS[case.preset]
    lora = ft.LoraConfig(stock.r, stock.alpha, 0.0, stock.targets)
    drawn = ft.initial_lora(config, lora, ft.Draws())  # the generator moves as upstream's does
    flat = injected_lora(lora_shapes(config, lora))
    init = {path: (flat[f"{path}.lora_A"].clone(), flat[f"{path}.lora_B"].clone()) for path in drawn}
    model = pt.load_model(model_dir, config)
    ft.setup_lora(model, lora, init, None)
    model.train()
    optimizer = torch.optim.AdamW(ft.param_groups(model), lr=case.lr, **pt.OPTIMIZER)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, ft.constant_with_warmup)
    base_seed = int(torch.empty((), dtype=torch.int64).random_().item())
    try:
        pad_id = tokenizer.token_to_id(pt.PAD_TOKEN)
    except KeyError:
        pad_id = 0
    pad_id = 0 if pad_id is None else pad_id
    samples = iter(ft.Samples(ft.load_groups(workdir / "tokens"), tokenizer, case.max_length,
                              model.config.semantic_begin_id, base_seed))
    trainable = [p for g in optimizer.param_groups for p in g["params"]]
    steps = []
    for step in range(1, case.steps + 1):
        batch = ft.collate([next(samples) for _ in range(case.batch_size)], case.max_length, pad_id)
        lr = float(optimizer.param_groups[0]["lr"])
        out = ft.losses(model, batch)
        optimizer.zero_grad(set_to_none=True)
        out["loss"].backward()
        norm = torch.nn.utils.clip_grad_norm_(trainable, pt.CLIP_NORM)
        optimizer.step()
        scheduler.step()
        steps.append({"step": step, "lr": lr, "grad_norm": float(norm.item()),
                      "batch_shape": list(batch["inputs"].shape),
                      **{k: float(v.item()) for k, v in out.items()}})
    return steps, ft.lora_state(model), base_seed


def stage(request: dict) -> list[dict]:
    """One `stage_main` call; its JSON events."""
    from mizuoto.core.jobs.jsonl import Emitter
    from mizuoto.training.stage import stage_main

    stream = io.StringIO()
    stage_main(request, Emitter(stream))
    events = []
    for line in stream.getvalue().splitlines():
        if line.startswith("@mizuoto "):
            events.append(json.loads(line[len("@mizuoto "):]))
    errors = [e for e in events if e.get("type") in ("error", "failed")]
    if errors:
        raise RuntimeError(f"port stage failed: {errors}")
    return events


def request(case: LoraCase, model_dir: Path, workdir: Path, which: str) -> dict:
    return {
        "trainer": TRAINER, "stage": which, "engine": "fishspeech", "workdir": str(workdir), "rows": [],
        "hyperparams": {"steps": case.steps, "batch_size": case.batch_size, "max_length": case.max_length,
                        "learning_rate": case.lr, "lora": case.preset},
        "base_model": {"id": "tiny", "dir": str(model_dir), "variant": "s2_pro"},
        "device": "cpu", "precision": "fp32", "seed": case.seed, "previews": False,
    }


def metric_steps(events: list[dict]) -> list[dict]:
    out = []
    for e in events:
        if e.get("type") == "metric":
            values = dict(e.get("values") or {})
            out.append({"step": e.get("step"), "lr": e.get("lr"), **values})
    return out


def tensor_digest(t: torch.Tensor) -> str:
    t = t.detach().contiguous().cpu()
    return hashlib.sha256(f"{t.dtype}|{tuple(t.shape)}|".encode() + t.view(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


def synth_on(folder: Path) -> list[np.ndarray]:
    """A seeded synthesis on an exported folder with the port (`make_lm_goldens.run_port`)."""
    from make_lm_goldens import Case, run_port

    case = Case("lora_export", SYNTH_TEXT, seed=SYNTH_SEED, max_new_tokens=SYNTH_FRAMES)
    codes, _, _ = run_port(case, folder, [], static_cache=True)
    return codes


def make(case: LoraCase, tmp: Path, out_dir: Path) -> None:
    from safetensors.torch import load_file, save_file

    model_dir = tmp / f"{case.name}-model"
    write_demo_model(model_dir, seed=0)
    workdir = tmp / case.name
    write_tokens(case, workdir)
    meta: dict = {"format_version": FORMAT_VERSION, "case": case.name, "model": {"seed": 0, "size": "tiny"},
                  "model_digest": folder_digest(model_dir), "reference": port_version(), **machine()}
    if case.injected:
        steps, lora, base_seed = train_injected(case, model_dir, workdir)
        meta["base_seed"] = base_seed
        (workdir / "lora").mkdir(exist_ok=True)
        save_file(lora, str(workdir / "lora" / "lora.safetensors"))
        (workdir / "lora" / "lora.json").write_text(json.dumps({"lora": case.preset, "steps": case.steps,
                                                                "precision": "32-true"}), encoding="utf-8")
    else:
        steps = metric_steps(stage(request(case, model_dir, workdir, "train")))
        lora = load_file(str(workdir / "lora" / "lora.safetensors"))
        meta["lora_file_sha256"] = hashlib.sha256((workdir / "lora" / "lora.safetensors").read_bytes()).hexdigest()
    meta["steps"] = steps
    meta["lora_digests"] = {k: tensor_digest(v) for k, v in sorted(lora.items())}
    out_dir.mkdir(parents=True, exist_ok=True)
    if case.full_lora:
        save_file(lora, str(out_dir / f"{case.name}.lora.safetensors"))
    if case.export:
        stage(request(case, model_dir, workdir, "export"))
        export = workdir / "export"
        state = torch.load(export / "model.pth", map_location="cpu", weights_only=True)
        meta["export"] = {
            "files": sorted(p.name for p in export.iterdir()),
            "config_json": (export / "config.json").read_text(encoding="utf-8"),
            "model_pth_sha256": hashlib.sha256((export / "model.pth").read_bytes()).hexdigest(),
            "keys": list(state),
            "digests": {k: tensor_digest(v) for k, v in state.items()},
            "synth": {"text": SYNTH_TEXT, "seed": SYNTH_SEED, "max_new_tokens": SYNTH_FRAMES,
                      "codes": [c.tolist() for c in synth_on(export)]},
        }
    (out_dir / f"{case.name}.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    losses = ", ".join(f"{s['loss']:.6f}" for s in steps[:3])
    print(f"{case.name}: {len(steps)} steps, loss {losses} ..., {len(lora)} LoRA tensors")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cases, only = cases_to_make(parser, CASES, argv)
    out_dir = folder_to_write(GOLDEN_KIND)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            make(case, Path(tmp), out_dir)
    write_manifest(out_dir, MADE_BY, port_version(),
                   [p.name.removesuffix(".json") for p in out_dir.glob("*.json") if p.name != MANIFEST],
                   None if only else time.perf_counter() - start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
