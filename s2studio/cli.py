"""Headless entry point: `s2studio SUBCOMMAND …` (no subcommand opens the studio).

Each subcommand lives in `s2studio/commands/<name>.py` with `add_parser(subparsers)` and
`run(args) -> int`; this module only dispatches, so `s2studio --help` stays fast (no torch).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from s2studio.errors import UserError

COMMANDS = ("synth", "codec", "voice", "demo-model", "serve")
"""Subcommand name -> module `s2studio.commands.<name with '-' as '_'>`."""


def _module(name: str):
    return importlib.import_module("s2studio.commands." + name.replace("-", "_"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="s2studio", description="Fish Audio S2 Pro studio and command line.")
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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if args.command is None:
        from s2studio import app  # the window; imported lazily so the CLI never loads Qt

        return app.main()
    try:
        return int(_module(args.command).run(args) or 0)
    except UserError as exc:
        print(f"s2studio {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"s2studio {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
