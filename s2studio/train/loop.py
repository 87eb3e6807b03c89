"""The fine-tuning run: model and LoRA set up, upstream's optimiser and schedule, checkpoints, resume
(spec s2-lora.md §2.2, §5).

A step is upstream's: forward, `zero_grad(set_to_none)`, backward, the gradients' total norm clipped to 1.0 (in
the optimiser's parameter order), `AdamW(betas=(0.9, 0.95), eps=1e-5, weight_decay=0)`, then the scheduler
(constant after 10 warm-up steps, so step 1 runs at learning rate 0). One batch of `batch_size` samples a step.

Before the first batch the generator is moved exactly as upstream moves it (`rng.initial_lora`), then the data
loader's base seed is drawn, then every step draws its dropout masks. A checkpoint keeps the LoRA (upstream's
names), the optimiser and scheduler, the torch generator and the sample stream's state, so a resumed run
continues the very trajectory of an uninterrupted one.
"""

from __future__ import annotations

import io
import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from safetensors.torch import save as save_safetensors

from s2studio.engine.s2.device import resolve_device
from s2studio.engine.s2.setup import load_model, load_tokenizer
from s2studio.engine.weights.lora import read_lora
from s2studio.state.lora_file import LORA_FILE
from s2studio.errors import UserError, printable
from s2studio.model.dual_ar import DualAR
from s2studio.state.atomic import OutputSet
from s2studio.settings import LIMITS
from s2studio.train.data import Batch, Group, Samples, collate, pad_id_of
from s2studio.train.events import StepMetrics
from s2studio.train.forward import losses
from s2studio.train.layers import LoraInit, attach_lora, load_lora_state, lora_state
from s2studio.train.presets import DEFAULT_PRESET, LoraPreset, lora_targets, preset_named
from s2studio.train.rng import base_seed, initial_lora

BETAS = (0.9, 0.95)
EPS = 1e-5
WARMUP = 10
CLIP_NORM = 1.0
DEFAULT_SEED = 1234
CHECKPOINTS = "checkpoints"
STATE_FILE = "state.pt"
META_FILE = "lora.json"
FORMAT = "s2studio-train-1"


@dataclass(frozen=True)
class TrainSettings:
    """What decides a run's numbers (a resumed run must have the same)."""

    preset: str = DEFAULT_PRESET
    steps: int = 1000
    batch_size: int = 4
    max_length: int = 4096
    lr: float = 1e-4
    seed: int = DEFAULT_SEED
    dropout: float | None = None
    """None: the preset's."""
    precision: str = "auto"
    """"auto": fp32 on the CPU, bf16 on CUDA; or "fp32" / "bf16"."""

    def __post_init__(self) -> None:
        if self.steps < 1 or self.steps > 1_000_000:
            raise UserError(f"--steps must be between 1 and 1000000, got {self.steps}")
        if not 1 <= self.batch_size <= 64:
            raise UserError(f"--batch-size must be between 1 and 64, got {self.batch_size}")
        if not 64 <= self.max_length <= 32768:
            raise UserError(f"--max-length must be between 64 and 32768, got {self.max_length}")
        LIMITS["seed"].check(self.seed, "--seed")
        if not 0 < self.lr < 1:
            raise UserError(f"--lr must be a small positive number, got {self.lr}")
        if self.precision not in ("auto", "fp32", "bf16"):
            raise UserError(f"--precision must be auto, fp32 or bf16, got {self.precision!r}")
        preset_named(self.preset, self.dropout)  # validates both

    def lora_preset(self) -> LoraPreset:
        return preset_named(self.preset, self.dropout)


def warmup_lambda(step: int) -> float:
    """`get_constant_schedule_with_warmup_lr_lambda` with 10 warm-up steps."""
    if step < WARMUP:
        return float(step) / float(max(1, WARMUP))
    return 1.0


def param_groups(model: torch.nn.Module) -> list[dict]:
    """Upstream's two AdamW groups (names as its Lightning module sees them, `model.` first); only trainable
    parameters, in `named_parameters()` order: the order the gradient norm is summed in."""
    decay, other = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        full = "model." + name
        (other if ".bias" in full or "norm.weight" in full or ".embeddings." in full else decay).append(p)
    return [{"params": decay}, {"params": other, "weight_decay": 0.0}]


def run_precision(settings: TrainSettings, device: torch.device) -> str:
    """upstream's Lightning precision for this device: "32-true" on a CPU, "bf16-true" on CUDA unless fp32."""
    if device.type == "cpu":
        if settings.precision == "bf16":
            raise UserError("bf16 training runs on CUDA only; use --precision fp32 (the default) on the CPU")
        return "32-true"
    return "32-true" if settings.precision == "fp32" else "bf16-true"


def seed_everything(seed: int) -> None:
    """The port's seeding (upstream's `seed_everything`): Python, NumPy and torch with the same seed."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def read_init_lora(path: Path) -> LoraInit:
    lora = read_lora(path)
    return {layer: (a, b) for layer, (a, b) in lora.pairs.items()}


@dataclass
class Checkpoint:
    folder: Path
    step: int


class Trainer:
    """One run: `Trainer(...)` loads and sets up everything, `step()` trains one batch, `save()` checkpoints."""

    def __init__(self, model_dir: Path, groups: list[Group], settings: TrainSettings, *, device: str = "auto",
                 init_lora: Path | None = None, resume: Path | None = None,
                 status: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.model_dir = Path(model_dir)
        say = status or (lambda _msg: None)
        self.device = resolve_device(device)
        self.precision = run_precision(settings, self.device)
        preset = settings.lora_preset()
        self.preset = preset
        self.tokenizer = load_tokenizer(self.model_dir)
        state = read_state(resume, settings, self.model_dir) if resume is not None else None
        if state is None:
            seed_everything(settings.seed)
        say("loading the model")
        model = load_model(self.model_dir, self.tokenizer, device="cpu", dtype=None)  # float32 as stored
        if state is None:
            say("initialising the LoRA")
            injected = read_init_lora(init_lora) if init_lora is not None else None
            init = initial_lora(model.config, preset, injected)
        else:
            init = {t.path: (torch.zeros(preset.r, t.n_in), torch.zeros(t.n_out, preset.r))
                    for t in lora_targets(model.config, preset)}
        attach_lora(model, preset, init)
        if self.precision == "bf16-true":
            model = model.to(torch.bfloat16)
        self.model: DualAR = model.to(self.device)
        self.model.train()
        self.optimizer = torch.optim.AdamW(param_groups(self.model), lr=settings.lr, betas=BETAS, eps=EPS,
                                           weight_decay=0.0)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, warmup_lambda)
        self.trainable = [p for g in self.optimizer.param_groups for p in g["params"]]
        self.pad_id = pad_id_of(self.tokenizer)
        if state is None:
            self.base_seed = base_seed()
            self.samples = Samples(groups, self.tokenizer, settings.max_length, self.base_seed)
            self.step_done = 0
        else:
            self._restore(state, groups)

    # ------------------------------------------------------------------ steps

    def next_batch(self) -> Batch:
        examples = [self.samples.draw() for _ in range(self.settings.batch_size)]
        return collate(examples, self.settings.max_length, self.pad_id).to(self.device)

    def step(self) -> StepMetrics:
        started = time.perf_counter()
        batch = self.next_batch()
        lr = float(self.optimizer.param_groups[0]["lr"])
        out = losses(self.model, batch)
        self.optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.trainable, CLIP_NORM)
        self.optimizer.step()
        self.scheduler.step()
        self.step_done += 1
        values = [float(v.item()) for v in (out.loss, out.base_loss, out.semantic_loss, out.top_5_accuracy, norm)]
        if not all(np.isfinite(values[:3])):
            raise UserError(f"the loss became {values[0]} at step {self.step_done}; lower --lr or resume from an "
                            "earlier checkpoint")
        return StepMetrics(self.step_done, *values, lr=lr, seconds=time.perf_counter() - started)

    # ------------------------------------------------------------------ saving

    def lora_bytes(self) -> bytes:
        """The LoRA as a safetensors file (no metadata: the bytes of upstream's and the port's file)."""
        return save_safetensors(lora_state(self.model))

    def meta(self) -> dict:
        return {"lora": self.settings.preset, "steps": self.step_done, "precision": self.precision,
                "alpha": self.preset.alpha, "r": self.preset.r, "format": FORMAT,
                "settings": asdict(self.settings), "model": str(self.model_dir)}

    def save(self, out_dir: Path) -> Checkpoint:
        """`out_dir/checkpoints/step_NNNNNNNNN/` with the LoRA, its meta and the state to resume from, all or
        nothing."""
        folder = Path(out_dir) / CHECKPOINTS / f"step_{self.step_done:09d}"
        folder.mkdir(parents=True, exist_ok=True)
        state = {
            "format": FORMAT,
            "step": self.step_done,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "sample_rng": _random_state_to_list(self.samples.rng.getstate()),
            "base_seed": self.base_seed,
            "settings": asdict(self.settings),
        }
        buf = io.BytesIO()
        torch.save(state, buf)
        with OutputSet() as out:
            out.add(folder / LORA_FILE, self.lora_bytes())
            out.add(folder / STATE_FILE, buf.getvalue())
            out.add_text(folder / META_FILE, json.dumps(self.meta(), indent=2) + "\n")
        return Checkpoint(folder, self.step_done)

    def save_final(self, out_dir: Path) -> Path:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        with OutputSet() as out:
            out.add(Path(out_dir) / LORA_FILE, self.lora_bytes())
            out.add_text(Path(out_dir) / META_FILE, json.dumps(self.meta(), indent=2) + "\n")
        return Path(out_dir) / LORA_FILE

    # ------------------------------------------------------------------ resume

    def _restore(self, state: dict, groups: list[Group]) -> None:
        load_lora_state(self.model, state["lora"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        self.base_seed = int(state["base_seed"])
        self.samples = Samples(groups, self.tokenizer, self.settings.max_length, self.base_seed)
        self.samples.rng.setstate(_random_state_from_list(state["sample_rng"]))
        self.step_done = int(state["step"])
        if self.step_done >= self.settings.steps:
            raise UserError(f"the checkpoint is at step {self.step_done}, already --steps {self.settings.steps}; "
                            "ask for more steps to continue")


def latest_checkpoint(out_dir: Path) -> Path | None:
    folder = Path(out_dir) / CHECKPOINTS
    found = sorted(p for p in folder.glob("step_*") if (p / STATE_FILE).is_file() and (p / LORA_FILE).is_file()
                   ) if folder.is_dir() else []
    return found[-1] if found else None


def read_state(folder: Path, settings: TrainSettings, model_dir: Path) -> dict:
    """A checkpoint's state, checked: readable, ours, and made with the same settings (steps may grow)."""
    folder = Path(folder)
    shown = printable(folder)
    try:
        state = torch.load(folder / STATE_FILE, map_location="cpu", weights_only=True)
        lora = load_file(str(folder / LORA_FILE))
    except FileNotFoundError:
        raise UserError(f"{shown} is not a training checkpoint (it needs {STATE_FILE} and {LORA_FILE})") from None
    except Exception as exc:  # noqa: BLE001 - a damaged file: torch and safetensors raise many types
        raise UserError(f"checkpoint {shown} is damaged ({type(exc).__name__}); resume from an earlier one") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise UserError(f"{shown} is not a checkpoint of this trainer; resume from one of its own checkpoints")
    saved = dict(state.get("settings") or {})
    mine = asdict(settings)
    differ = [k for k in mine if k != "steps" and saved.get(k) != mine[k]]
    if differ:
        raise UserError(f"checkpoint {shown} was made with other settings ({', '.join(differ)}); resume with the "
                        "same ones")
    state["lora"] = lora
    return state


def _random_state_to_list(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _random_state_from_list(state: list) -> tuple:
    version, internal, gauss = state
    return (int(version), tuple(int(x) for x in internal), gauss)
