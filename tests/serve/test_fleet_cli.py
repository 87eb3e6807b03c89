"""`synth --script … --server URL#kind --local-slots N`: the command line renders a script's scenes over this
computer and a live server (the seam's FakeEngine on both sides, so the test is about the plan, not the model),
prints each engine's line, and refuses a malformed --server in one line."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest
import soundfile as sf
from serve_helpers import API_KEY, live_server
from tones import tone

from s2studio import paths
from s2studio.commands.script_args import add_script_arguments
from s2studio.commands.script_render import run_script
from s2studio.engine.api import LoadRequest
from s2studio.engine.fake import FakeEngine
from s2studio.errors import UserError
from s2studio.state.voices import VoiceLibrary

SCRIPT = "# One\nAnn: Hello there.\nAnn: How are you?\n# Two\nAnn: Fine, thanks.\n# Three\nAnn: Good night.\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="s2studio synth")
    for flag, default in (("--model", "no-model"), ("--device", "cpu"), ("--precision", "fp32")):
        p.add_argument(flag, default=default)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--seed", type=int, default=42)
    for flag, value in (("--max-new-tokens", 0), ("--chunk-length", 300), ("--top-k", 30)):
        p.add_argument(flag, type=int, default=value)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--batching", default=None)
    p.add_argument("-q", "--quiet", action="store_true")
    add_script_arguments(p)
    return p


@pytest.fixture
def book(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(paths.ENV_DATA_DIR, str(tmp_path / "data"))
    VoiceLibrary(tmp_path / "data" / "voices").create("Ann", [(tone(tmp_path / "a.wav", 1.0, 220.0), "Hi there.")])
    (tmp_path / "book.txt").write_text(SCRIPT, encoding="utf-8")
    return tmp_path / "book.txt"


def test_synth_renders_the_scenes_over_this_computer_and_a_server(book: Path, library, tmp_path, capsys) -> None:
    with live_server(LoadRequest("load", tmp_path), library, engine_factory=FakeEngine) as server:
        out = tmp_path / "book.wav"
        argv = ["--script", str(book), "--cast", "Ann=Ann", "--out", str(out), "--server",
                f"{server.url}#s2studio*2", "--server-key", API_KEY, "--local-slots", "1"]
        assert run_script(parser().parse_args(argv), engine_factory=FakeEngine) == 0
        jobs = [r for r in server.state.history if r.outcome == "finished"]
    audio, rate = sf.read(out)
    assert rate == 44100 and len(audio) > 0
    err = capsys.readouterr().err
    assert "this computer: " in err and f"{server.url.split('//')[1]}: " in err
    served = int(err.split(server.url.split("//")[1] + ": ")[1].split(" lines")[0])
    local = int(err.split("this computer: ")[1].split(" lines")[0])
    assert served + local == 4 and len(jobs) >= 1  # every line once, some of them on the server


def test_a_malformed_server_option_is_one_line(book: Path, tmp_path) -> None:
    base = ["--script", str(book), "--cast", "Ann=Ann", "--out", str(tmp_path / "o.wav")]
    with pytest.raises(UserError, match="unknown kind 'grpc'"):
        run_script(parser().parse_args(base + ["--server", "http://x:1#grpc"]), engine_factory=FakeEngine)
    with pytest.raises(UserError, match="--local-slots needs at least one --server"):
        run_script(parser().parse_args(base + ["--local-slots", "3"]), engine_factory=FakeEngine)
    assert not (tmp_path / "o.wav").exists()


class Terminal(io.StringIO):
    """A person at a terminal, typing `answer`."""

    def isatty(self) -> bool:
        return True


def test_what_cannot_travel_is_asked_on_a_terminal_refused_without_one_and_yes_goes_on(
        book: Path, library, tmp_path, capsys, monkeypatch) -> None:
    with live_server(LoadRequest("load", tmp_path), library, engine_factory=FakeEngine) as server:
        out = tmp_path / "book.wav"
        argv = ["--script", str(book), "--cast", "Ann=Ann", "--out", str(out), "--server", f"{server.url}#vllm",
                "--server-key", API_KEY, "--local-slots", "0"]
        note = f"warning: {server.url} does not take seeds (vllm): its takes cannot be re-rendered from their seed"
        monkeypatch.setattr("sys.stdin", io.StringIO(""))  # no terminal: one line, nothing rendered
        with pytest.raises(UserError, match=r"cannot do all that this computer does .*; add --yes to render anyway"):
            run_script(parser().parse_args(argv), engine_factory=FakeEngine)
        assert note in capsys.readouterr().err and not out.exists()
        monkeypatch.setattr("sys.stdin", Terminal("n\n"))
        with pytest.raises(UserError, match="render cancelled; nothing was written"):
            run_script(parser().parse_args(argv), engine_factory=FakeEngine)
        assert "Render anyway? [y/N]" in capsys.readouterr().err and not out.exists()
        monkeypatch.setattr("sys.stdin", Terminal("y\n"))
        assert run_script(parser().parse_args(argv), engine_factory=FakeEngine) == 0 and out.exists()
        out.unlink()
        monkeypatch.setattr("sys.stdin", io.StringIO(""))
        assert run_script(parser().parse_args(argv + ["--yes"]), engine_factory=FakeEngine) == 0 and out.exists()
        assert note in capsys.readouterr().err
