"""The generation settings as command-line options, read from the one table (`s2studio.settings`): the choices a
flag names and the range its help states are the table's, and so is the message a value out of range gets (the
engine's types check it: `api.Sampling`, `api.LoadRequest`)."""

from __future__ import annotations

import argparse

from s2studio.settings import CHOICES, LIMITS, Loading, Speed


def choice_option(p: argparse.ArgumentParser | argparse._ArgumentGroup, name: str, default: str, help: str,
                  flag: str | None = None) -> None:
    """`--name` taking one of `CHOICES[name]` (checked where it is used, so a typo gets the one-line message)."""
    p.add_argument(flag or "--" + name.replace("_", "-"), default=default, metavar="|".join(CHOICES[name]),
                   help=help)


def number_option(p: argparse.ArgumentParser | argparse._ArgumentGroup, name: str, help: str,
                  default: float | None = None, flag: str | None = None, metavar: str = "N", why: str = "") -> None:
    """`--name` taking a number of `LIMITS[name]`'s range, which its help states (default: the table's; `why`:
    why the command's default is another)."""
    limit = LIMITS[name]
    default = limit.default if default is None else default
    shown = "automatic" if default == limit.auto else f"{default:g}"
    p.add_argument(flag or "--" + name.replace("_", "-"), type=int if limit.integer else float, default=default,
                   metavar=metavar, help=f"{help} ({limit.range_text()}; default {shown}{why})")


def speed_option(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """`--speed`, one of the table's speeds; without it the command's `--fast` switch decides."""
    choice_option(p, "speed", None, "the decode loop: exact (the reference implementation's own), fast (the fast "  # type: ignore[arg-type]
                  "path) or auto (fast except float32 on a CPU); replaces --fast")


def speed_of(args: argparse.Namespace, fast: bool) -> Speed:
    """`--speed` when given, else what `--fast` (`fast`) says."""
    speed = getattr(args, "speed", None)
    return speed if speed is not None else ("fast" if fast else "exact")


def loading_from_args(args: argparse.Namespace) -> Loading:
    """A command's load options as the load settings (`engine.plan.load_request` makes the request): the options a
    command lacks are the table's automatic values, and `--speed` or its `--fast` switch decides the speed."""
    return Loading(device=args.device, precision=args.precision, speed=speed_of(args, getattr(args, "fast", False)),
                   quantize=getattr(args, "quantize", "none"), threads=getattr(args, "threads", None) or 0,
                   max_batch=getattr(args, "max_batch", None) or 0)
