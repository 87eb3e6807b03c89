"""How long a fine-tuning run will take and how much memory it needs, measured before it starts.

One real training step of the chosen preset, batch size and maximum length is timed on this machine: the model
is loaded and the LoRA attached exactly as `loop.Trainer` does, and one batch is drawn from the voice's clips.
The clips are not encoded for it (that needs the codec and takes longer than the step): each clip stands in as
codes of zeros with the frame count its duration gives, and a step's cost depends on the tokens' count, never on
their values. The figure is then `seconds per step × steps` (plus nothing for encoding, which the run reports as
it goes).

Memory is the measured peak of that step: on CUDA the allocator's peak (`max_memory_allocated`), on the CPU the
process's resident high-water mark (`VmHWM`, reset before through `/proc/self/clear_refs`) above what it held
before. Where neither can be read the memory planner's figure stands in: the weights at the training precision
plus the LoRA's parameters, gradients and AdamW moments (`engine.s2.memory.param_counts`). The estimate then
says whether that fits in the memory free now (`engine.s2.memory.free_memory`).

Before anything is measured or encoded, `step_bytes` predicts a step's memory from the model's shape, the batch
and the longest sample the clips can make (`longest_sample`): the weights and the LoRA's optimiser state, the
attention mask and scores (which grow with the square of the length), the layers' saved inputs and the logits.
It errs high; `check_step_memory` refuses a run whose prediction exceeds the free memory with one line, so neither
the command line nor the studio's Estimate button starts a step that the system would kill (a batch of 64 samples of
32768 tokens needs terabytes).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from s2studio import garbage
from s2studio.audio import FRAME_SAMPLES, SAMPLE_RATE
from s2studio.errors import UserError, printable
from s2studio.train.clips import TrainClip

GB = 1e9
CLEAR_REFS = Path("/proc/self/clear_refs")
STATUS = Path("/proc/self/status")


@dataclass(frozen=True)
class Estimate:
    seconds_per_step: float
    steps: int
    peak_bytes: int
    """Memory the run needs beyond what the process held before it."""
    free_bytes: int | None
    """Memory free on the device now (None: cannot be told)."""
    measured_memory: bool
    """True: `peak_bytes` was measured; False: the planner's figure."""
    device: str

    @property
    def seconds(self) -> float:
        return self.seconds_per_step * self.steps

    @property
    def fits(self) -> bool:
        return self.free_bytes is None or self.peak_bytes <= self.free_bytes

    def describe(self) -> str:
        """"about 4 min, 2.1 GB" and, when it will not fit, what is free."""
        text = f"{duration_words(self.seconds)}, {self.peak_bytes / GB:.1f} GB"
        if not self.fits and self.free_bytes is not None:
            text += f" — only {self.free_bytes / GB:.1f} GB is free on {self.device}"
        return text


def duration_words(seconds: float) -> str:
    """Plain words for a duration: "a few seconds", "under a minute", "about 4 min", "about 2 h 10 min"."""
    if seconds < 60:
        return "under a minute" if seconds >= 10 else "a few seconds"
    minutes = math.ceil(seconds / 60)
    if minutes < 60:
        return f"about {minutes} min"
    h, m = divmod(minutes, 60)
    return f"about {h} h {m} min" if m else f"about {h} h"


def stand_in_groups(clips: tuple[TrainClip, ...], num_codebooks: int) -> list:
    """The clips as the trainer sees them, with codes of zeros of each clip's length in frames."""
    from s2studio.train.data import groups_from

    codes = [np.zeros((num_codebooks, max(1, math.ceil(c.seconds * SAMPLE_RATE / FRAME_SAMPLES))), np.int64)
             for c in clips]
    return groups_from(clips, codes)


def _status_kb(field: str) -> int | None:
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _reset_cpu_peak() -> bool:
    try:
        CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


def planned_bytes(trainer) -> int:  # noqa: ANN001 - a loop.Trainer
    """The planner's figure: every weight at the training precision plus the LoRA's parameter, gradient and two
    AdamW moments in float32."""
    from s2studio.engine.s2.memory import param_counts

    counts = param_counts(trainer.model.config)
    size = 2 if trainer.precision == "bf16-true" else 4
    lora = sum(p.numel() for p in trainer.trainable)
    return (counts.total + lora) * size + lora * 3 * 4


def clip_tokens(clips: tuple[TrainClip, ...], tokenizer) -> list[tuple[int, int]]:  # noqa: ANN001 - S2Tokenizer
    """Per clip: the tokens of its text part (system line, user turn with the transcript, assistant header)
    and of its audio (one per frame, plus the closing `<|im_end|>`), as `data.encode_sentence` lays them out."""
    from s2studio.train.data import SYSTEM_TEXT, clean_text, pack_text

    fixed = len(tokenizer.encode(SYSTEM_TEXT)) + 1 + len(tokenizer.encode("<|speaker:assistant|> <|voice|>"))
    return [(fixed + len(tokenizer.encode(f"<|speaker:user|> {clean_text(pack_text(c.text))}")),
             math.ceil(c.seconds * SAMPLE_RATE / FRAME_SAMPLES) + 1) for c in clips]


def check_transcripts(clips: tuple[TrainClip, ...], tokens: list[tuple[int, int]], max_length: int) -> None:
    """A UserError naming the first clip whose text alone leaves no room for its audio in `max_length` tokens
    (a sample cut there would hold no audio to learn from)."""
    for clip, (text, _audio) in zip(clips, tokens, strict=True):
        if text + 1 > max_length:
            raise UserError(f"{printable(clip_name(clip))}: its transcript takes {text} tokens, and a maximum length "
                            f"of {max_length} leaves no room for its audio; raise the maximum length above {text + 1} "
                            "or split the clip and its transcript")


def clip_name(clip: TrainClip) -> str:
    return f"{clip.speaker}/{Path(clip.audio).name}"


def longest_sample(clips: tuple[TrainClip, ...], tokens: list[tuple[int, int]], max_length: int) -> int:
    """The longest sample (in tokens, cut at `max_length`) the data can draw: a speaker's `max_length // 20`
    longest clips together."""
    from s2studio.train.data import CLIPS_PER_TOKENS

    by_speaker: dict[str, list[int]] = {}
    for clip, (text, audio) in zip(clips, tokens, strict=True):
        by_speaker.setdefault(clip.speaker, []).append(text + audio)
    count = max(1, max_length // CLIPS_PER_TOKENS)
    longest = max(sum(sorted(lengths, reverse=True)[:count]) for lengths in by_speaker.values())
    return min(longest, max_length)


BASE_BYTES = 256 * 2**20
"""What a step allocates whatever its size (the tokenizer, the optimiser's bookkeeping, allocator slack)."""


def step_bytes(config, batch: int, length: int, precision: str) -> int:  # noqa: ANN001 - DualARConfig
    """Predicted peak memory of one training step of `batch` samples of `length` tokens (errs high: 1.2-1.3 times
    the measured peak on the tiny model, `tests/test_train_limits.py`): the weights at the training precision
    and the LoRA's optimiser state, the attention mask and one layer's attention scores (both grow with the
    square of the length), every layer's saved input, and the logits of the text head and of the codebook head
    over every position, with their gradients."""
    from s2studio.engine.s2.memory import param_counts

    s, f = config.slow, config.fast
    counts = param_counts(config)
    weights = counts.total * (2 if precision == "bf16-true" else 4) + counts.total // 8 * 16
    square = length * length * (1 + batch) + batch * s.n_head * length * length * 4
    per_token = ((s.n_layer + 2) * s.dim * 8 + 8 * max(s.intermediate_size, s.dim) * 4 + 3 * config.vocab_size * 4
                 + (config.num_codebooks + 1) * (f.n_layer * f.dim * 8 + 8 * max(f.intermediate_size, f.dim) * 4
                                                 + 2 * config.codebook_size * 4))
    return int(BASE_BYTES + weights + square + batch * length * per_token)


def check_step_memory(config, settings, clips: tuple[TrainClip, ...], tokenizer, device: str) -> int:  # noqa: ANN001
    """Refuse (one UserError) a run whose predicted step (`step_bytes`) exceeds the memory free on `device`,
    or whose transcripts leave no room for audio; returns the predicted bytes."""
    from s2studio.engine.s2.device import resolve_device
    from s2studio.engine.s2.memory import free_memory
    from s2studio.train.loop import run_precision

    tokens = clip_tokens(clips, tokenizer)
    check_transcripts(clips, tokens, settings.max_length)
    where = resolve_device(device)
    length = longest_sample(clips, tokens, settings.max_length)
    need = step_bytes(config, settings.batch_size, length, run_precision(settings, where))
    free = free_memory(str(where) if where.type == "cuda" else where.type)
    if free is not None and need > free:
        raise UserError(f"a training step of {settings.batch_size} sample(s) of up to {length} tokens needs about "
                        f"{need / GB:.1f} GB, but {free / GB:.1f} GB is free on {where}; lower the batch size or the "
                        "maximum length")
    return need


def measure_step(model_dir: Path, clips: tuple[TrainClip, ...], settings, device: str = "auto") -> Estimate:
    """Time one real training step of `settings` (a `loop.TrainSettings`) on `device`, and its memory; refused
    first when the predicted memory (`check_step_memory`) does not fit."""
    import torch

    from s2studio.engine.s2.device import resolve_device
    from s2studio.engine.s2.memory import free_memory
    from s2studio.engine.s2.setup import load_tokenizer
    from s2studio.model.config import load_config
    from s2studio.train.loop import Trainer

    config = load_config(Path(model_dir))
    check_step_memory(config, settings, clips, load_tokenizer(Path(model_dir)), device)
    groups = stand_in_groups(clips, config.num_codebooks)
    where = resolve_device(device)
    cuda = where.type == "cuda"
    before = _status_kb("VmRSS")
    if cuda:
        torch.cuda.reset_peak_memory_stats(where)
        before = torch.cuda.memory_allocated(where)
    cpu_peak = not cuda and before is not None and _reset_cpu_peak()
    rng = torch.get_rng_state()
    trainer = Trainer(Path(model_dir), groups, settings, device=device)
    try:
        started = time.perf_counter()
        trainer.step()
        seconds = time.perf_counter() - started
        planned = planned_bytes(trainer)
        if cuda:
            peak: int | None = torch.cuda.max_memory_allocated(where) - int(before or 0)
        elif cpu_peak:
            high = _status_kb("VmHWM")
            peak = None if high is None else high - int(before or 0)
        else:
            peak = None
    finally:
        del trainer
        garbage.collect()
        torch.set_rng_state(rng)
        if cuda:
            torch.cuda.empty_cache()
    measured = peak is not None and peak > 0
    return Estimate(seconds, settings.steps, int(peak) if measured else planned,
                    free_memory(str(where) if cuda else where.type), measured, str(where))
