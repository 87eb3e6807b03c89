"""Headless entry point: `s2studio SUBCOMMAND …` (no subcommand opens the studio).

Each subcommand lives in `s2studio/commands/<name>.py` with `add_parser(subparsers)` and
`run(args) -> int`; this module only dispatches, so `s2studio --help` stays fast (no torch).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from s2studio.errors import UserError, printable
from s2studio.threads import prepare_threads

COMMANDS = ("synth", "codec", "voice", "transcribe", "demo-model", "serve", "train", "train-job")
"""Subcommand name -> module `s2studio.commands.<name with '-' as '_'>`."""


def _module(name: str):
    return importlib.import_module("s2studio.commands." + name.replace("-", "_"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="s2studio", description="Fish Audio S2 Pro studio and command line: "
                                     "without a COMMAND, `s2studio` opens the studio's window.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log details to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            mod = _module(name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("s2studio.commands"):
                continue  # subcommand not built yet
            raise
        mod.add_parser(sub)
    return parser


def _one_line(exc: BaseException) -> str:
    """What a person reads for an error that is not a `UserError` (the traceback goes to the log)."""
    if isinstance(exc, MemoryError):
        return "out of memory; close other programs or use a smaller model, --quantize or --device cpu"
    if isinstance(exc, OSError) and exc.strerror:
        where = f" {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}:{where}" if where else exc.strerror
    return f"unexpected {type(exc).__name__}: {exc} (a bug; run with -v for the details)"


def terminal_logging(verbose: bool) -> None:
    """What the terminal shows: warnings, or with -v the details. The terminal's handler keeps that level when the
    studio's log file later takes the root logger to INFO, so the studio's activity goes to its file only."""
    level = logging.INFO if verbose else logging.WARNING
    root = logging.getLogger()
    before = list(root.handlers)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    for handler in root.handlers:
        if handler not in before:
            handler.setLevel(level)


def main(argv: list[str] | None = None) -> int:
    prepare_threads()  # before anything imports torch: OpenMP reads these once
    for stream in (sys.stdout, sys.stderr):  # a path that is not UTF-8 is shown escaped, never a crash
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    parser = build_parser()
    args = parser.parse_args(argv)
    terminal_logging(args.verbose)
    if args.command is None:
        from s2studio import app  # the window; imported lazily so the CLI never loads Qt

        return app.main()
    try:
        return int(_module(args.command).run(args) or 0)
    except UserError as exc:
        message = str(exc)
    except KeyboardInterrupt:
        print(f"s2studio {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - one line for the person, the traceback for -v
        logging.getLogger(__name__).debug("%s failed", args.command, exc_info=True)
        message = _one_line(exc)
    print(f"s2studio {args.command}: error: {printable(message, 2000)}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
