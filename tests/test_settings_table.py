"""The generation settings' one table (`s2studio.settings`): every side reads it, and no bound is written elsewhere."""

from __future__ import annotations

import argparse
import pathlib
import re

import pytest

from s2studio.cli import main
from s2studio.commands import serve as serve_command
from s2studio.commands import synth as synth_command
from s2studio.engine.api import LoadRequest
from s2studio.engine.plan import load_request
from s2studio.errors import UserError
from s2studio.serve.routes_fish import TTSBody
from s2studio.serve.routes_openai import SpeechBody
from s2studio.settings import CHOICES, LIMITS, Loading, Sampling
from s2studio.state.project import GenerationSettings

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "s2studio"


def options(register) -> dict[str, argparse.Action]:  # noqa: ANN001 - a command's add_parser
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    (command,) = sub.choices.values()
    return {a.dest: a for a in command._actions}


@pytest.mark.parametrize("register", [synth_command.add_parser, serve_command.add_parser])
def test_the_command_lines_options_read_the_table(register) -> None:
    found = options(register)
    for name in ("device", "precision", "speed", "quantize"):
        assert found[name].metavar == "|".join(CHOICES[name]), name
    for name in ("threads",) + (("seed", "temperature", "top_p", "top_k") if "top_k" in found else ("max_batch",)):
        limit = LIMITS[name]
        assert found[name].type is (int if limit.integer else float), name
        assert f"({limit.range_text()}; default " in found[name].help, name
    assert found["threads"].default == LIMITS["threads"].auto


def test_no_bound_of_the_table_is_written_anywhere_else() -> None:
    """The literals of the table's bounds (and the panel's old spin box ranges) appear in no other module."""
    stray = re.compile(r"1\.95|2\s*\*\*\s*31|2147483647|\bSETTINGS_LIMITS\b|MAX_BATCH_LIMIT")
    found = [f"{p.relative_to(PACKAGE)}:{n}" for p in PACKAGE.rglob("*.py") if p.name != "settings.py"
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if stray.search(line)]
    assert found == []
    panel = (PACKAGE / "ui" / "inspector" / "settings_panel.py").read_text(encoding="utf-8")
    assert re.findall(r"setRange\(\s*-?\d|min\(max\(\w+, \d", panel) == []


def test_the_two_types_check_against_the_table_with_one_message() -> None:
    with pytest.raises(UserError, match=r"^temperature must be between 0\.05 and 1\.95, got 2\.5$"):
        Sampling(temperature=2.5)
    with pytest.raises(UserError, match=r"^the largest batch must be 0 \(automatic\) or between 1 and 256, got 300$"):
        Loading(max_batch=300)
    with pytest.raises(UserError, match=r"^unknown speed 'quick'; choose one of auto, exact, fast$"):
        LoadRequest("l", pathlib.Path("m"), speed="quick")  # type: ignore[arg-type]
    with pytest.raises(UserError, match=r"^top-k must be between 1 and 4096, got 0$"):
        Sampling(top_k=0)
    for speed in CHOICES["speed"]:  # "auto" on every side: the project, the request, the command line
        settings = GenerationSettings.from_dict({"speed": speed})
        assert load_request("j", pathlib.Path("m"), settings).speed == speed
    assert GenerationSettings().speed == "fast" and LoadRequest("j", pathlib.Path("m")).speed == "auto"
    assert load_request("j", pathlib.Path("m"), GenerationSettings()).loading == GenerationSettings().loading


def test_the_servers_request_fields_are_bounded_by_the_table() -> None:
    for body, names in ((SpeechBody, ("seed", "temperature", "top_p")),
                        (TTSBody, ("seed", "temperature", "top_p", "top_k"))):
        schema = body.model_json_schema()["properties"]
        for name in names:
            bounds = next((s for s in schema[name].get("anyOf", [schema[name]]) if "minimum" in s), schema[name])
            assert (bounds["minimum"], bounds["maximum"]) == (LIMITS[name].lo, LIMITS[name].hi), (body, name)
        assert body.model_fields["temperature"].default == LIMITS["temperature"].default


def test_out_of_range_values_on_the_command_line_get_the_tables_message(tmp_path, capsys) -> None:
    assert main(["serve", "--model", str(tmp_path), "--threads", "300"]) == 2
    assert capsys.readouterr().err.strip() == (
        "s2studio serve: error: threads must be 0 (automatic) or between 1 and 256, got 300")
    assert main(["serve", "--model", str(tmp_path), "--max-batch", "-1"]) == 2
    assert capsys.readouterr().err.strip().endswith("the largest batch must be 0 (automatic) or between 1 and 256, "
                                                    "got -1")
    assert main(["serve", "--model", str(tmp_path), "--speed", "quick"]) == 2
    assert capsys.readouterr().err.strip().endswith("unknown speed 'quick'; choose one of auto, exact, fast")
    assert main(["synth", "--model", str(tmp_path), "--text", "hi", "--threads", "999"]) == 2
    assert capsys.readouterr().err.strip().endswith("--threads must be 0 (automatic) or between 1 and 256, got 999")
    assert main(["synth", "--model", str(tmp_path), "--text", "hi", "--top-k", "5000"]) == 2
    assert capsys.readouterr().err.strip().endswith("top-k must be between 1 and 4096, got 5000")
