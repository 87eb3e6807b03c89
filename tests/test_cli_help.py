"""What a person reads from the command line: every `--help` is free of the project's internal references, and
`s2studio serve` computes as the studio's default mode does (the fast path) and says which mode serves."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from s2studio.cli import build_parser, main

INTERNAL = re.compile(r"§|design\.md|spec/|\bissue \d|perf\.md")


def every_parser(parser: argparse.ArgumentParser, name: str = "s2studio"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from every_parser(sub, f"{name} {sub_name}")


def test_no_help_names_an_internal_document_or_issue() -> None:
    helps = dict((name, parser.format_help()) for name, parser in every_parser(build_parser()))
    assert {"s2studio serve", "s2studio synth", "s2studio train export", "s2studio codec encode"} <= helps.keys()
    leaks = {name: INTERNAL.findall(text) for name, text in helps.items() if INTERNAL.search(text)}
    assert leaks == {}


def test_the_helps_say_what_a_new_user_needs_first() -> None:
    helps = dict((name, " ".join(parser.format_help().split())) for name, parser in every_parser(build_parser()))
    assert "without a COMMAND, `s2studio` opens the studio's window" in helps["s2studio"]
    assert "synth speak text or a script into audio files (and S2 codes)" in helps["s2studio"]
    assert "into audio (--out)" in helps["s2studio synth"]
    assert "the voice's name, as scripts" in helps["s2studio voice add"] and "free text kept" in helps[
        "s2studio voice add"]
    assert "the checks download nothing" in helps["s2studio synth"] and "downloaded on first use" not in (
        helps["s2studio synth"])


def test_serve_runs_the_studios_fast_mode_unless_asked_for_the_exact_one(monkeypatch, tmp_path: Path,
                                                                          capsys) -> None:
    pytest.importorskip("fastapi")
    import s2studio.serve.server as server
    from s2studio.engine.fake import FAKE_INFO

    asked = []

    class Started:
        info = FAKE_INFO

        class library:  # noqa: N801 - stands in for the voice library the line counts
            @staticmethod
            def list() -> list:
                return []

    def start_state(config, load, library, on_loading=None, **_):
        asked.append(load)
        return Started()

    monkeypatch.setattr(server, "start_state", start_state)
    monkeypatch.setattr(server, "serve_forever", lambda state, sock=None: None)
    monkeypatch.setattr(server, "bind", lambda host, port: None)
    for flags, speed, said in (([], "fast", "in the fast mode"), (["--no-fast"], "exact", "in the exact mode"),
                               (["--quantize", "int8"], "fast", "in the 8-bit fast mode")):
        assert main(["serve", "--model", str(tmp_path), *flags]) == 0
        assert asked[-1].speed == speed
        assert said in capsys.readouterr().err
