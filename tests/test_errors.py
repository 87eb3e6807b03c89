"""What a person or a client reads when something goes wrong, for every route of the server and every command of
the command line: never a traceback, "(a bug)", starlette's "Internal Server Error" or one of the server's own
absolute paths; and no `--help` names the project's internal documents."""

from __future__ import annotations

import argparse
import importlib
import io
import json
import pkgutil
import re
from pathlib import Path

import httpx
import ormsgpack
import pytest
from serve_process import ROOT, ServeProcess, wav_bytes

from s2studio.cli import build_parser, main
from s2studio import serve
from s2studio.state.voices import VoiceLibrary
from s2studio.train.job import serve as serve_job

FORBIDDEN = ("Traceback", "(a bug)", "Internal Server Error")
FIELDS = ("text", "input", "voice", "references", "reference_id", "lines", "audios", "sampling", "cast", "seed",
          "top_k", "top_p", "temperature", "max_new_tokens", "chunk_length", "format", "response_format",
          "instructions", "speed", "streaming", "context", "batching", "prosody")


def routes() -> list[tuple[str, str]]:
    """Every route of every `serve/routes_*.py` module (a new module's routes are in without a change here)."""
    found = []
    for info in pkgutil.iter_modules(serve.__path__):
        if info.name.startswith("routes_"):
            for route in importlib.import_module(f"s2studio.serve.{info.name}").router.routes:
                found += [(method, route.path) for method in sorted(route.methods)]  # type: ignore[attr-defined]
    assert ("POST", "/v1/audio/voices") in found and ("POST", "/v1/tts") in found
    return found


def multipart(**fields: str) -> tuple[bytes, dict[str, str]]:
    """A form with `fields` and an `audio_sample` file at an odd rate, as httpx sends it."""
    odd = ("a.wav", wav_bytes(1.0, rate=8009))
    request = httpx.Request("POST", "http://x", data=fields, files={"audio_sample": odd})
    return request.read(), {"Content-Type": request.headers["Content-Type"]}


def hostile_bodies() -> list[tuple[str, bytes, dict[str, str]]]:
    json_type, msgpack_type = {"Content-Type": "application/json"}, {"Content-Type": "application/msgpack"}
    gone = {"input": "Hi.", "voice": "Gone", "text": "Hi.", "reference_id": "Gone", "cast": {"A": "Gone"}}
    return [
        ("no body", b"", {}),
        ("junk JSON", b"{\"text\": ", json_type),
        ("junk MessagePack", b"\xc1\xc1\xc1", msgpack_type),
        ("a list", b"[1, 2]", json_type),
        ("wrong types", json.dumps({k: 5 for k in FIELDS}).encode(), json_type),
        ("huge numbers", json.dumps({**{k: 2**80 for k in FIELDS}, "text": "Hi.", "input": "Hi."}).encode(), json_type),
        ("strings everywhere", ormsgpack.packb({k: "x" * 300 for k in FIELDS}), msgpack_type),
        ("deep", b"{\"text\": " + b"[" * 50_000 + b"]" * 50_000 + b"}", json_type),
        ("a voice whose clip is gone", json.dumps(gone).encode(), json_type),
        ("a reference that is no audio", ormsgpack.packb({"text": "Hi.", "audios": [b"RIFF"],
                                                          "references": [{"audio": b"RIFF", "text": "x"}]}),
         msgpack_type),
        ("a reference at an odd rate", ormsgpack.packb({"text": "Hi.", "audios": [wav_bytes(1.0, rate=8009)],
                                                        "references": [{"audio": wav_bytes(1.0, rate=8009),
                                                                        "text": "x"}]}), msgpack_type),
        ("form", b"text=hi&input=hi", {"Content-Type": "application/x-www-form-urlencoded"}),
        ("broken multipart", b"--x\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nA",
         {"Content-Type": "multipart/form-data; boundary=x"}),
        ("multipart without a boundary", b"--x\r\n", {"Content-Type": "multipart/form-data"}),
        ("multipart, odd rate", *multipart(name="A", consent="mine", ref_text="Hi.")),
        ("multipart, long name", *multipart(name="n" * 100_000, consent="mine", ref_text="Hi.")),
    ]


@pytest.fixture(scope="module")
def server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("errors")
    lib = VoiceLibrary(root / "data" / "voices")
    clip = root / "clip.wav"
    clip.write_bytes(wav_bytes(1.5))
    lib.create("Alice", [(clip, "Hello.")])
    gone = lib.create("Gone", [(clip, "Lost.")])
    (lib.root / gone.id / gone.clips[0].file).unlink()
    with ServeProcess(tiny_model, root / "data", root / "tmp", "--no-fast", "--max-new-tokens", "2",
                      "--body-timeout", "2", "--header-timeout", "2") as proc:
        proc.private = [str(root), str(tiny_model), str(Path.home()), str(ROOT)]  # type: ignore[attr-defined]
        yield proc


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from s2studio.demo_model import write_demo_model

    return write_demo_model(tmp_path_factory.mktemp("errors-model") / "tiny", seed=5)


def test_no_route_answers_with_a_traceback_a_bug_or_a_path(server) -> None:
    seen = 0
    with httpx.Client(base_url=server.url, timeout=120) as client:
        for method, path in routes():
            for what, body, headers in hostile_bodies():
                r = client.request(method, path, content=body or None, headers=headers)
                seen += 1
                text = r.text
                assert r.status_code < 500, (method, path, what, r.status_code, text[:300])
                assert not any(word in text for word in FORBIDDEN), (method, path, what, text[:300])
                assert not any(private in text for private in server.private), (method, path, what, text[:300])
            wrong = "GET" if method == "POST" else "POST"
            r = client.request(wrong, path)
            assert r.status_code in (405, 404) or r.status_code < 500, (wrong, path)
        for path in ("/v1/nothing", "/" + "x" * 5000, "/v1/../etc/passwd", "/%00", "/v1/voices/%2e%2e"):
            r = client.get(path)
            assert r.status_code == 404 and len(r.text) < 400 and not any(w in r.text for w in FORBIDDEN), path
    assert seen >= 100
    assert "Traceback" not in server.log, server.log[-3000:]


def cli_cases(tmp: Path, model: Path) -> list[list[str]]:
    junk = tmp / "junk.wav"
    junk.write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    odd = tmp / "odd.wav"
    odd.write_bytes(wav_bytes(1.0, rate=8009))
    folder = tmp / "folder"
    folder.mkdir(exist_ok=True)
    text = tmp / "t.txt"
    text.write_text("Alice: Hi.\n", encoding="utf-8")
    return [
        ["synth", "--model", str(folder), "--text", "Hi."],
        ["synth", "--model", str(model), "--text", "Hi.", "--seed", str(2**70), "--out", str(tmp / "o.wav")],
        ["synth", "--model", str(model), "--text", "Hi.", "--top-k", "0", "--out", str(tmp / "o.wav")],
        ["synth", "--model", str(model), "--script", str(text), "--cast", "Alice=Nobody", "--out", str(tmp / "o.wav")],
        ["synth", "--model", str(model), "--text", "Hi.", "--reference", str(odd), "--reference-text", "x",
         "--out", str(tmp / "o.wav")],
        ["codec", "encode", "--model", str(model), str(junk), "--codes-out", str(tmp / "c.npy")],
        ["codec", "encode", "--model", str(model), str(odd), "--codes-out", str(tmp / "c.npy")],
        ["codec", "decode", "--model", str(model), str(junk), "--out", str(tmp / "c.wav")],
        ["voice", "add", "--name", "A", "--clip", str(odd), "--text", "Hi."],
        ["voice", "add", "--name", "A", "--clip", "/dev/zero", "--text", "Hi."],
        ["voice", "show", "Nobody"],
        ["voice", "export", "Nobody", str(tmp / "x.s2voice")],
        ["voice", "import", str(junk)],
        ["voice", "remove", "Nobody"],
        ["transcribe", str(odd)],
        ["transcribe", "--language", "xx", str(junk)],
        ["transcribe", str(folder)],
        ["demo-model", str(junk)],
        ["serve", "--model", str(folder / "none")],
        ["serve", "--model", str(model), "--host", "0.0.0.0"],
        ["serve", "--model", str(model), "--port", "70000"],
        ["train", "--model", str(model), "--data", str(folder), "--out", str(tmp / "run")],
        ["train", "--model", str(model), "--voice", "Nobody", "--out", str(tmp / "run")],
        ["train", "--model", str(model), "--data", str(folder), "--out", str(tmp / "run"), "--seed", "-5"],
        ["train", "export", "--lora", str(junk), "--out", str(tmp / "exported"), "--model", str(model)],
        ["train", "attach", "--voice", "Nobody", "--lora", str(junk)],
    ]


def test_no_command_answers_with_a_traceback_or_a_bug(tiny_model: Path, tmp_path: Path, monkeypatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("S2STUDIO_API_KEY", raising=False)
    cases = cli_cases(tmp_path, tiny_model)
    commands = {argv[0] if argv[0] not in ("codec", "voice", "train") or argv[1].startswith("-") else
                " ".join(argv[:2]) for argv in cases}
    leaves = {name.removeprefix("s2studio ") for name, parser in parsers(build_parser())
              if name != "s2studio" and not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)}
    # `train` is a command and a group; `train-job` is the studio's own child process, tested below
    assert commands | {"voice list", "train-job"} == leaves | {"train"}
    for argv in cases:
        code = main(argv)
        err = capsys.readouterr().err.strip()
        assert code == 2, (argv, code, err)
        assert len(err.splitlines()) == 1 and err.startswith(f"s2studio {argv[0]}: error: "), (argv, err)
        assert not any(word in err for word in FORBIDDEN), (argv, err)
    (tmp_path / "a-file").write_text("x")
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "a-file"))  # what `voice list` can be given
    assert main(["voice", "list"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"s2studio voice: error: the data folder {tmp_path}/a-file is unusable: {tmp_path}/a-file is a " \
                  "file; set S2STUDIO_DATA_DIR to a folder"
    out = io.StringIO()  # the studio's fine-tuning child given a request it cannot read: one line for the studio
    assert serve_job(io.StringIO("{junk\n"), out) == 1
    assert out.getvalue().count("\n") == 1 and json.loads(out.getvalue())["error"].startswith("JSONDecodeError: ")


def parsers(parser: argparse.ArgumentParser, prefix: str = "s2studio") -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(prefix, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += parsers(sub, f"{prefix} {name}")
    return found


def test_no_help_names_internal_documents() -> None:
    every = parsers(build_parser())
    assert len(every) >= 15
    for name, parser in every:
        text = parser.format_help()
        assert not re.search(r"design\.md|issue \d|§|spec/|research/", text), (name, text)
