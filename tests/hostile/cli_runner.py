"""Runs several `s2studio` command lines in one process (torch is imported once), each through
`s2studio.cli.main` exactly as `python -m s2studio` runs it, and writes what each did as JSON: the exit
code, its stderr (a traceback that escaped included) and what it left in the watched folder, which is
then emptied for the next command (`-` watches nothing).

    python cli_runner.py RESULTS.json WATCHED_FOLDER KEEP... -- ARGS... -- [ENV:NAME=VALUE...] ARGS...
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
import traceback
from pathlib import Path


def main() -> None:
    results_path, watched, *rest = sys.argv[1:]
    split = rest.index("--")
    keep, commands, current = set(rest[:split]), [], []
    for arg in rest[split + 1:] + ["--"]:
        if arg == "--":
            commands.append(current)
            current = []
        else:
            current.append(arg)
    from s2studio.cli import main as cli

    folder = Path(watched)
    results = []
    for args in commands:
        while args and args[0].startswith("ENV:"):  # ENV:NAME=VALUE before a command sets it for that one
            name, _, value = args.pop(0)[4:].partition("=")
            os.environ[name] = value
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = cli(args)
            except BaseException:  # noqa: BLE001 - exactly what the test must never see
                traceback.print_exc()
                code = 1
        left = [] if watched == "-" else sorted(
            str(p.relative_to(folder)) for p in folder.rglob("*") if str(p.relative_to(folder)) not in keep)
        for name in left:
            p = folder / name
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        results.append({"args": args, "code": code, "stderr": err.getvalue(), "left": left})
    Path(results_path).write_text(json.dumps(results), encoding="utf-8")


if __name__ == "__main__":
    main()
