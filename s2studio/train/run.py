"""A whole fine-tuning run as `s2studio train` and the studio's dialog drive it: clips checked, encoded, trained,
checkpointed, with metrics, progress and a clean stop.

Layout of the run folder `OUT/`:

    tokens/groups.json, tokens/<speaker>/<id>.npy   the clips' codes (the port's `tokens` stage layout), reused
                                                    on resume when the clips are the same
    checkpoints/step_NNNNNNNNN/                     lora.safetensors (upstream's names), lora.json, state.pt
    lora.safetensors, lora.json                     the final LoRA

Everything that can be checked is checked before anything is written (transcripts, at least 30 s of speech,
the model folder, a resumed checkpoint's settings), so a refused run leaves no folder behind.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from s2studio.errors import UserError, printable
from s2studio.state.atomic import OutputSet, write_text_atomic
from s2studio.state.disk import OPEN_FLAGS, write_error
from s2studio.train.clips import TrainClip, check_enough, speaker_folder_name
from s2studio.train.data import Group, groups_from, pack_text
from s2studio.train.events import RunEvent, StepMetrics
from s2studio.train.loop import Trainer, TrainSettings, latest_checkpoint

TOKENS = "tokens"
GROUPS = "groups.json"


@dataclass(frozen=True)
class RunRequest:
    model_dir: Path
    out_dir: Path
    clips: tuple[TrainClip, ...]
    settings: TrainSettings
    device: str = "auto"
    save_every: int = 0
    """0: only at the end (and on a stop)."""
    resume: Path | None = None
    """A checkpoint folder, or the run folder (its newest checkpoint)."""
    init_lora: Path | None = None
    metrics_out: Path | None = None


def clips_digest(clips: tuple[TrainClip, ...]) -> str:
    h = hashlib.sha256()
    for c in clips:
        h.update(f"{c.speaker}|{c.id}|{c.text}|".encode())
        h.update(hashlib.sha256(Path(c.audio).read_bytes()).digest())
    return h.hexdigest()


def _write_tokens(folder: Path, clips: tuple[TrainClip, ...], codes: list[np.ndarray], digest: str) -> None:
    import io

    with OutputSet() as out:
        index: dict[str, list[dict]] = {}
        for clip, c in zip(clips, codes, strict=True):
            speaker = speaker_folder_name(clip.speaker)
            (folder / speaker).mkdir(parents=True, exist_ok=True)
            buf = io.BytesIO()
            np.save(buf, c)
            out.add(folder / speaker / f"{clip.id}.npy", buf.getvalue())
            index.setdefault(speaker, []).append({"id": clip.id, "texts": [pack_text(clip.text)],
                                                  "codes": f"{speaker}/{clip.id}.npy"})
        groups = [{"name": name, "source": "folder", "sentences": sorted(s, key=lambda x: f"{x['id']}.npy")}
                  for name, s in sorted(index.items())]
        out.add_text(folder / GROUPS, json.dumps(groups, ensure_ascii=False, indent=1))
        out.add_text(folder / "source.json", json.dumps({"clips": digest}) + "\n")


def _cached_codes(folder: Path, clips: tuple[TrainClip, ...], digest: str) -> list[np.ndarray] | None:
    try:
        if json.loads((folder / "source.json").read_text(encoding="utf-8")).get("clips") != digest:
            return None
        return [np.load(folder / speaker_folder_name(c.speaker) / f"{c.id}.npy", allow_pickle=False) for c in clips]
    except (OSError, ValueError):
        return None


def encode(request: RunRequest, say: Callable[[str], None]) -> list[Group]:
    """The clips' codes: from `OUT/tokens/` when the same clips were encoded before, else by the model's codec."""
    import torch

    from s2studio.engine.s2.setup import load_codec_for
    from s2studio.train.tokens import encode_clips

    folder = request.out_dir / TOKENS
    digest = clips_digest(request.clips)
    codes = _cached_codes(folder, request.clips, digest)
    if codes is None:
        say(f"encoding {len(request.clips)} clip(s) with the model's codec")
        codec = load_codec_for(request.model_dir, request.device)
        codes = encode_clips(codec, request.clips, lambda done, total: say(f"encoded {done} of {total} clips"))
        del codec
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        _write_tokens(folder, request.clips, codes, digest)
    return groups_from(request.clips, codes)


class MetricsLog:
    """JSON lines, one per step. A resumed run first rewrites the file up to its checkpoint's step (atomically),
    so the log never shows a step twice."""

    def __init__(self, path: Path, keep_until: int) -> None:
        self.path = Path(path)
        kept = []
        if keep_until > 0 and self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    if int(json.loads(line)["step"]) <= keep_until:
                        kept.append(line)
                except (ValueError, KeyError, TypeError):
                    continue
        write_text_atomic(self.path, "".join(line + "\n" for line in kept))

    def append(self, metrics: StepMetrics) -> None:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | OPEN_FLAGS)
            try:
                os.write(fd, (metrics.json() + "\n").encode("utf-8"))
            finally:
                os.close(fd)
        except OSError as exc:
            raise write_error(exc, self.path) from None


class StopFlag:
    """Set by Ctrl+C (or the dialog's cancel) between steps; a second Ctrl+C interrupts at once."""

    def __init__(self) -> None:
        self.set_ = False

    def set(self) -> None:
        self.set_ = True

    def is_set(self) -> bool:
        return self.set_


@contextmanager
def sigint_stops(flag: StopFlag) -> Iterator[None]:
    def handler(signum, frame):  # noqa: ANN001 - signal's signature
        if flag.is_set():
            raise KeyboardInterrupt
        flag.set()

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: the caller stops it through the flag
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _resume_folder(request: RunRequest) -> Path | None:
    if request.resume is None:
        return None
    found = Path(request.resume)
    if (found / "state.pt").is_file():
        return found
    latest = latest_checkpoint(found)
    if latest is None:
        raise UserError(f"{printable(found)} holds no complete checkpoint to resume from (checkpoints/step_*/state.pt; "
                        "a run stopped before its first save has none): start it again without --resume")
    return latest


def check_request(request: RunRequest) -> None:
    """Everything that can be refused before anything is written or encoded: the model folder, the clips and
    their transcripts, the output and metrics paths, and whether a step fits in memory
    (`estimate.check_step_memory`)."""
    from s2studio.engine.s2.setup import check_model_folder, load_tokenizer
    from s2studio.model.config import load_config
    from s2studio.train.estimate import check_step_memory

    check_model_folder(request.model_dir)
    if not request.clips:
        raise UserError("no clips to train on")
    check_enough(list(request.clips))
    if request.save_every < 0:
        raise UserError("--save-every must be 0 (only at the end) or a number of steps")
    out = Path(request.out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {printable(out)} is a file; give a folder")
    if request.resume is None and latest_checkpoint(out) is not None:  # a step folder without its state is no run
        raise UserError(f"{printable(out)} already holds a run; add --resume to continue it, or choose another "
                        "--out")
    if request.metrics_out is not None:
        metrics = Path(request.metrics_out)
        if metrics.is_dir():
            raise UserError(f"--metrics-out {printable(metrics)} is a folder; give a file name")
        if not metrics.parent.is_dir() and metrics.parent.absolute() != out.absolute():  # --out is made below
            raise UserError(f"--metrics-out: the folder {printable(metrics.parent)} does not exist; create it first")
    tokenizer = load_tokenizer(Path(request.model_dir))
    check_step_memory(load_config(Path(request.model_dir)), request.settings, request.clips, tokenizer,
                      request.device)


def train(request: RunRequest, stop: StopFlag | None = None) -> Iterator[RunEvent]:
    """Run `request`, yielding events; a set `stop` saves a checkpoint after the current step and ends the run."""
    from s2studio.train.loop import read_state

    stop = stop or StopFlag()
    check_request(request)
    resume = _resume_folder(request)
    if resume is not None:  # a damaged or foreign checkpoint is refused before anything is written
        read_state(resume, request.settings, request.model_dir)
    statuses: list[str] = []
    say = statuses.append
    try:
        request.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(exc, request.out_dir) from None
    groups = encode(request, say)
    for message in statuses:
        yield RunEvent("status", message)
    yield RunEvent("status", "loading the model and setting up the LoRA")
    trainer = Trainer(request.model_dir, groups, request.settings, device=request.device,
                      init_lora=request.init_lora, resume=resume)
    metrics = MetricsLog(request.metrics_out, trainer.step_done) if request.metrics_out else None
    total = request.settings.steps
    times: list[float] = []
    if resume is not None:
        yield RunEvent("status", f"resumed from step {trainer.step_done}")
    while trainer.step_done < total:
        if stop.is_set():
            saved = trainer.save(request.out_dir) if trainer.step_done else None
            yield RunEvent("stopped", f"stopped after step {trainer.step_done}", path=saved.folder if saved else None)
            return
        m = trainer.step()
        times.append(m.seconds)
        if metrics:
            metrics.append(m)
        recent = times[-10:]
        eta = (total - m.step) * (sum(recent) / len(recent))
        yield RunEvent("step", metrics=m, eta_seconds=eta)
        if request.save_every and m.step % request.save_every == 0 and m.step < total:
            yield RunEvent("checkpoint", path=trainer.save(request.out_dir).folder)
    checkpoint = trainer.save(request.out_dir)
    yield RunEvent("checkpoint", path=checkpoint.folder)
    final = trainer.save_final(request.out_dir)
    yield RunEvent("finished", f"the LoRA is in {final}", path=final)


def format_eta(seconds: float) -> str:
    seconds = max(0, int(math.ceil(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}"


def progress_line(event: RunEvent, total: int) -> str:
    m = event.metrics
    assert m is not None
    return (f"step {m.step}/{total}  loss {m.loss:.4f}  grad {m.grad_norm:.3f}  lr {m.lr:.2e}  "
            f"{m.seconds:.2f} s/step  ETA {format_eta(event.eta_seconds or 0)}")

