"""Every command that writes files, run as a real process onto a full disk, a read-only one and a folder
it may not write: exit code 2, one line that says which of the three it was, no traceback, and nothing
left behind (no file under a final name, no temp file). And on a good disk, every output is 0644 under
umask 022."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from disks import CHECKED_FIRST, KINDS, MESSAGES, run_cli


def _commands(inputs: dict[str, Path], out: Path) -> dict[str, list[str]]:
    """Every command that writes, all its outputs in `out` (voice add: `out/lib` is the data dir)."""
    m = ["--model", str(inputs["model"]), "--device", "cpu", "--precision", "fp32", "--max-new-tokens", "4"]
    cast = ["--cast", "Alice=Alice voice", "--cast", "Bob=Bob voice"]
    return {
        "synth --codes-out --codes-out-dir --out": [
            "synth", *m, "-q", "--text", "<|speaker:0|>Hello there.", "--codes-out", f"{out}/c.npy",
            "--codes-out-dir", f"{out}/batches", "--out", f"{out}/o.wav"],
        "synth --script --out --stems --srt --vtt --events": [
            "synth", *m, "-q", "--script", str(inputs["script"]), *cast, "--out", f"{out}/a.flac",
            "--stems", f"{out}/stems", "--srt", f"{out}/a.srt", "--vtt", f"{out}/a.vtt", "--events", f"{out}/a.jsonl"],
        "synth --script --srt": ["synth", *m, "-q", "--script", str(inputs["script"]), *cast, "--srt", f"{out}/a.srt"],
        "codec encode": ["codec", "encode", "--model", str(inputs["model"]), str(inputs["clip"]),
                         "--codes-out", f"{out}/e.npy"],
        "codec decode": ["codec", "decode", "--model", str(inputs["model"]), str(inputs["codes"]), "--out", f"{out}/d.wav"],
        "voice export": ["voice", "export", "Alice voice", f"{out}/alice.s2voice"],
        "voice add": [f"ENV:S2STUDIO_DATA_DIR={out}/lib", "voice", "add", "--name", "Carol", "--clip", str(inputs["clip"]),
                      "--text", "Hi there."],
    }


@pytest.mark.parametrize("kind", KINDS)
def test_an_unlucky_disk_is_one_line_and_leaves_nothing(kind, inputs, child_env, tmp_path):
    out = tmp_path / "out"
    commands = _commands(inputs, out)
    results = run_cli(kind, out, list(commands.values()), child_env, prepare=("lib", "lib/voices"))
    problems = []
    for name, r in zip(commands, results, strict=True):
        lines = r.stderr.strip().splitlines()
        expected = f"s2studio {r.args[0]}: error: "
        if name == "voice add":
            expected += "cannot write to the voice library: "
        said = MESSAGES[kind] in lines[0] or (kind == "full" and name.startswith("synth --script")
                                              and CHECKED_FIRST in lines[0]) if lines else False
        if (r.code != 2 or len(lines) != 1 or "Traceback" in r.stderr or not lines[0].startswith(expected)
                or not said or ".tmp" in lines[0] or ".new-" in lines[0] or r.left):
            problems.append(f"{name}: exit {r.code}, left {r.left}, stderr {r.stderr!r}")
    assert problems == []


def test_outputs_get_the_umask_mode(inputs, child_env, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    commands = _commands(inputs, out)
    del commands["voice add"], commands["synth --script --srt"]
    script = commands["synth --script --out --stems --srt --vtt --events"]
    script[script.index(f"{out}/a.flac")] = f"{out}/a.mp3"
    runner = [sys.executable, str(Path(__file__).with_name("cli_runner.py")), str(tmp_path / "r.json"), "-"]
    for args in commands.values():
        runner += ["--", *args]
    proc = subprocess.run(runner, env=child_env, capture_output=True, text=True, preexec_fn=lambda: os.umask(0o022),
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((tmp_path / "r.json").read_text())
    assert all(r["code"] == 0 for r in results), results
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == ["a.jsonl", "a.mp3", "a.srt", "a.vtt", "alice.s2voice", "batches/batch_000.npy", "c.npy",
                     "d.wav", "e.npy", "o.wav", "stems/01_Alice.mp3", "stems/02_Bob.mp3"]
    assert {f: stat.S_IMODE((out / f).stat().st_mode) for f in files} == {f: 0o644 for f in files}
    assert not list(out.rglob(".*"))  # no temp file left
