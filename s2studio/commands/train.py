"""`s2studio train`: fine-tune S2's language model with LoRA on a voice's clips or a folder, as upstream does;
`s2studio train export`: merge a LoRA into its model and save a folder upstream, the port and we all load.

    s2studio train --model DIR (--voice NAME | --data DIR) --out DIR [--steps N] [--save-every N] [--resume]
    s2studio train export --lora FILE --out DIR [--model DIR]
    s2studio train attach --voice NAME (--lora FILE | --remove)

`--attach` (with `--voice`) gives the voice the final LoRA: its lines then render with it merged into the model.

Progress and ETA go to stderr; Ctrl+C saves a checkpoint after the current step and says how to resume.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

PRESET_NAMES = ("r_8_alpha_16", "r_32_alpha_16_fast")
"""Mirrors `s2studio.train.presets.PRESETS` (not imported here: `--help` must not load torch)."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("train", help="fine-tune a voice with LoRA (upstream's recipe); `train export` merges",
                              description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--model", type=Path, help="the S2 model folder to fine-tune")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--voice", help="a library voice (id or name): its clips and transcripts")
    source.add_argument("--data", type=Path, metavar="DIR",
                        help="a folder in upstream's layout: <speaker>/<clip>.wav|flac|mp3 with <clip>.lab or .txt")
    p.add_argument("--out", type=Path, help="the run folder (checkpoints, the final lora.safetensors)")
    p.add_argument("--preset", choices=PRESET_NAMES, default="r_8_alpha_16", help="LoRA preset (default r_8_alpha_16)")
    p.add_argument("--steps", type=int, default=1000, help="optimiser steps (default 1000)")
    p.add_argument("--batch-size", type=int, default=4, help="samples per step (default 4)")
    p.add_argument("--max-length", type=int, default=4096, help="tokens per sample (default 4096)")
    p.add_argument("--lr", type=float, default=1e-4, help="learning rate after the 10 warm-up steps (default 1e-4)")
    p.add_argument("--seed", type=int, default=1234, help="seed of the whole random stream (default 1234)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="where to train (default auto)")
    p.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="auto: fp32 on the CPU, bf16 on CUDA (upstream's bf16-true)")
    p.add_argument("--save-every", type=int, default=0, metavar="N",
                   help="save a checkpoint every N steps (default: only at the end)")
    p.add_argument("--resume", nargs="?", const=True, default=None, metavar="CHECKPOINT",
                   help="continue from a checkpoint folder (default: the newest in --out)")
    p.add_argument("--metrics-out", type=Path, metavar="FILE",
                   help="JSON lines per step: step, loss, base_loss, semantic_loss, grad_norm, lr, seconds")
    p.add_argument("--init-lora", type=Path, metavar="FILE", help="start from these A/B (tests)")
    p.add_argument("--dropout", type=float, default=None, help="LoRA dropout (default: the preset's)")
    p.add_argument("--attach", action="store_true",
                   help="give the --voice the final LoRA (its lines then render with it)")
    sub = p.add_subparsers(dest="train_command", metavar="export|attach")
    e = sub.add_parser("export", help="merge a LoRA into its model and save the folder")
    e.add_argument("--lora", type=Path, required=True, help="lora.safetensors (a run's or a checkpoint's)")
    e.add_argument("--out", type=Path, required=True, dest="export_out", help="the new model folder")
    e.add_argument("--model", type=Path, dest="export_model",
                   help="the base model (default: the one the LoRA was trained on, from lora.json)")
    a = sub.add_parser("attach", help="give a library voice a LoRA (or take it away)")
    a.add_argument("--voice", required=True, dest="attach_voice", help="the voice (id or name)")
    which = a.add_mutually_exclusive_group(required=True)
    which.add_argument("--lora", type=Path, dest="attach_lora", help="lora.safetensors (a run's or a checkpoint's)")
    which.add_argument("--remove", action="store_true", help="the voice speaks with the plain model again")
    a.add_argument("--model", type=Path, dest="attach_model", metavar="DIR",
                   help="check the LoRA against this model (default: the one lora.json names, when it exists)")


def lora_note(lora: Path) -> str:
    """How the LoRA in `lora` was made, from the lora.json training wrote beside it ("" when there is none)."""
    try:
        meta = json.loads(Path(lora).with_name("lora.json").read_text(encoding="utf-8"))
        return f"{meta['lora']}, {int(meta['steps'])} steps"
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def lora_model(lora: Path, model: Path | None) -> Path | None:
    """The model to check `lora` against: `model`, or the one its lora.json names when that folder exists."""
    if model is not None:
        return Path(model)
    try:
        named = Path(json.loads(Path(lora).with_name("lora.json").read_text(encoding="utf-8"))["model"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return named if named.is_dir() else None


def check_lora_model(lora: Path, model: Path) -> None:
    """A UserError unless the LoRA file `lora` fits the model in `model` (names and shapes)."""
    from s2studio.engine.weights.lora import check_lora_fits, model_shapes, read_lora
    from s2studio.errors import printable
    from s2studio.model.config import load_config

    check_lora_fits(read_lora(lora), model_shapes(load_config(model)), f"the model in {printable(model)}")


def attach(voice: str, lora: Path | None, model: Path | None = None) -> str:
    """Give `voice` the LoRA file `lora` (None: remove its LoRA); the line to print. The file is checked
    (`state.lora_file`: names, ranks, shapes, values), and against the model when one is known."""
    from s2studio.paths import voices_dir
    from s2studio.state.voices import VoiceLibrary

    library = VoiceLibrary(voices_dir())
    found = library.resolve(voice)
    if lora is None:
        library.remove_lora(found.id)
        return f"voice {found.name!r} speaks with the plain model again"
    target = lora_model(lora, model)
    if target is not None:
        check_lora_model(lora, target)
    updated = library.set_lora(found.id, lora, lora_note(lora))
    return f"voice {found.name!r} now renders with {lora}" + (f" ({updated.lora.note})" if updated.lora.note else "")


def _export(args: argparse.Namespace) -> int:
    from s2studio.errors import UserError
    from s2studio.train.export import export_model

    model = args.export_model or args.model
    if model is None:
        meta = Path(args.lora).with_name("lora.json")
        try:
            model = Path(json.loads(meta.read_text(encoding="utf-8"))["model"])
        except (OSError, ValueError, KeyError, TypeError):
            raise UserError(f"no --model given and {meta} does not name the base model; add --model DIR") from None
    folder = export_model(Path(model), Path(args.lora), Path(args.export_out))
    print(folder)
    return 0


def _clips(args: argparse.Namespace):
    from s2studio.errors import UserError
    from s2studio.train.clips import clips_from_folder, clips_from_voice

    if args.voice:
        from s2studio.paths import voices_dir
        from s2studio.state.voices import VoiceLibrary

        return clips_from_voice(VoiceLibrary(voices_dir()), args.voice)
    if args.data:
        return clips_from_folder(args.data)
    raise UserError("say what to train on: --voice NAME or --data DIR")


def run(args: argparse.Namespace) -> int:
    if args.train_command == "export":
        return _export(args)
    if args.train_command == "attach":
        print(attach(args.attach_voice, None if args.remove else args.attach_lora, args.attach_model))
        return 0
    from s2studio.errors import UserError
    from s2studio.train.loop import TrainSettings
    from s2studio.train.run import RunRequest, StopFlag, progress_line, sigint_stops, train

    if args.model is None or args.out is None:
        raise UserError("train needs --model DIR and --out DIR")
    if args.attach and not args.voice:
        raise UserError("--attach gives the trained LoRA to the --voice it was trained on; add --voice NAME")
    settings = TrainSettings(preset=args.preset, steps=args.steps, batch_size=args.batch_size,
                             max_length=args.max_length, lr=args.lr, seed=args.seed, dropout=args.dropout,
                             precision=args.precision)
    resume = None if args.resume is None else (Path(args.out) if args.resume is True else Path(args.resume))
    request = RunRequest(Path(args.model), Path(args.out), tuple(_clips(args)), settings, device=args.device,
                         save_every=args.save_every, resume=resume, init_lora=args.init_lora,
                         metrics_out=args.metrics_out)
    stop = StopFlag()
    with sigint_stops(stop):
        for event in train(request, stop):
            if event.kind == "status":
                print(event.message, file=sys.stderr)
            elif event.kind == "step":
                print(progress_line(event, settings.steps), file=sys.stderr, flush=True)
            elif event.kind == "checkpoint":
                print(f"saved {event.path}", file=sys.stderr)
            elif event.kind == "stopped":
                again = " ".join(shlex.quote(a) for a in sys.argv[1:] if a != "--resume")
                if event.path is None:
                    print(f"{event.message}: nothing to keep yet", file=sys.stderr)
                else:
                    print(f"{event.message}; the checkpoint is in {event.path}. Resume with:\n"
                          f"  s2studio {again} --resume", file=sys.stderr)
                return 130
            elif event.kind == "finished":
                print(event.path)
                if args.attach:
                    print(attach(args.voice, Path(event.path), Path(args.model)), file=sys.stderr)
    return 0
