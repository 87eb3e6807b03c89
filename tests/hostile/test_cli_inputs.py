"""The command line given what a hostile or unlucky user gives it: bytes that are not UTF-8, the wrong
kind of file, a folder where a file belongs, a data dir that is a file, clips the engine cannot use,
leftovers of killed runs. Each failure is one line on stderr, exit code 2, and writes nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from tones import tone

from s2studio.cli import main
from s2studio.state.voices import VoiceLibrary

NOT_UTF8 = os.fsdecode(b"caf\xe9\xff")
"""What Python makes of argv bytes that are not UTF-8 (surrogate escapes)."""


@pytest.fixture
def data(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "data"
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(root))
    return root


def fails(argv: list[str], capsys) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"s2studio {argv[0]}: error: ")
    assert all(ch == " " or ch.isprintable() for ch in lines[0]), lines[0]
    return lines[0].split(": error: ", 1)[1]


def synth_args(inputs, *extra: str) -> list[str]:
    return ["synth", "--model", str(inputs["model"]), "--device", "cpu", "--precision", "fp32",
            "--max-new-tokens", "3", "-q", *extra]


def test_bytes_that_are_not_utf8_in_names_and_text_are_refused(data, tmp_path, capsys, inputs):
    clip = tone(tmp_path / "c.wav", 4.0)
    assert "the voice name holds bytes that are not UTF-8 (caf\\xe9\\xff)" in fails(
        ["voice", "add", "--name", NOT_UTF8, "--clip", str(clip), "--text", "Hi."], capsys)
    assert "the transcript holds bytes that are not UTF-8" in fails(
        ["voice", "add", "--name", "Ok", "--clip", str(clip), "--text", NOT_UTF8], capsys)
    assert "--text holds bytes that are not UTF-8" in fails(synth_args(inputs, "--text", NOT_UTF8,
                                                                        "--codes-out", str(tmp_path / "c.npy")), capsys)
    assert not (data / "voices").exists() or not any((data / "voices").iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.wav"]


def test_paths_that_are_not_utf8_work(data, tmp_path, inputs):
    """Linux file names are bytes: a clip and an output with such a name are read and written as any other
    (a real process, so argv really holds the bytes)."""
    folder = os.fsencode(tmp_path)
    clip = folder + b"/clip-\xff.wav"
    tone(Path(os.fsdecode(clip)), 4.0)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "S2STUDIO_DATA_DIR": str(data)}
    add = subprocess.run([sys.executable, b"-m", b"s2studio", b"voice", b"add", b"--name", b"Odd", b"--clip", clip,
                          b"--text", b"Hi there."], env=env, capture_output=True, timeout=300)
    assert add.returncode == 0, add.stderr
    out = folder + b"/out-\xfe.wav"
    synth = subprocess.run([sys.executable, b"-m", b"s2studio", *[os.fsencode(a) for a in synth_args(
        inputs, "--text", "<|speaker:0|>Hi.")], b"--out", out], env=env, capture_output=True, timeout=300)
    assert synth.returncode == 0, synth.stderr
    with open(out, "rb") as f:
        assert sf.info(f).samplerate == 44100
    assert b"\\xfe" in synth.stdout or b"out-" not in synth.stdout  # printed escaped, if at all


def test_the_wrong_kind_of_file(data, tmp_path, capsys, inputs):
    npz = tmp_path / "codes.npz"
    np.savez(npz, a=np.zeros((10, 4), np.int64))
    text = tmp_path / "codes.txt"
    text.write_text("10 20 30\n")
    pickled = tmp_path / "pickled.npy"
    arr = np.empty(1, dtype=object)
    arr[0] = {"x": 1}
    np.save(pickled, arr, allow_pickle=True)
    out = tmp_path / "o.wav"
    msg = fails(["codec", "decode", "--model", str(inputs["model"]), str(npz), "--out", str(out)], capsys)
    assert msg == f"codes {npz} is a .npz archive; give one (10, frames) array saved with numpy.save (.npy)"
    for bad, expected in ((text, "is not a .npy array"), (pickled, "holds Python objects, not numbers")):
        msg = fails(synth_args(inputs, "--text", "hi", "--reference-codes", str(bad), "--reference-text", "t",
                               "--codes-out", str(tmp_path / "c.npy")), capsys)
        assert expected in msg and "allow_pickle" not in msg and "unsafe" not in msg.lower()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["codes.npz", "codes.txt", "pickled.npy"]


def test_folders_where_files_belong(data, tmp_path, capsys, inputs):
    folder = tmp_path / "folder.wav"
    folder.mkdir()
    assert fails(synth_args(inputs, "--text", "hi", "--out", str(folder)), capsys) == \
        f"--out {folder} is a folder; give a file name"
    assert fails(synth_args(inputs, "--script", str(inputs["script"]), "--cast", "Alice=x", "--out", str(folder)),
                 capsys) == f"--out {folder} is a folder; give a file name"
    assert fails(["voice", "add", "--name", "A", "--clip", str(tmp_path), "--text", "Hi."], capsys) == \
        f"{tmp_path} is a folder; give an audio file (WAV, FLAC, OGG or MP3)"
    assert "is a folder" in fails(synth_args(inputs, "--text", "hi", "--reference-codes", str(tmp_path),
                                             "--reference-text", "t"), capsys)
    assert list(folder.iterdir()) == []


def test_a_data_dir_that_is_a_file_is_named(tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "file"))
    assert fails(["voice", "list"], capsys) == (f"the data folder {tmp_path}/file is unusable: {tmp_path}/file is a "
                                                "file; set S2STUDIO_DATA_DIR to a folder")


@pytest.mark.parametrize("make,message,codec_refuses", [
    (lambda p: tone(p, 600.0, rate=8000), "is 600 s long; use a clip of at most 30 s", True),
    (lambda p: tone(p, 4.0, rate=100, hz=10), "has a sample rate of 100 Hz, too low to be speech", True),
    (lambda p: sf.write(p, np.array([0.1, np.nan, np.inf] * 4000, np.float32), 44100, subtype="FLOAT") or p,
     "contains invalid samples (NaN or infinity)", True),
    (lambda p: sf.write(p, np.array([0.1], np.float32), 44100) or p, "is 0.00 s long (1 samples)", False),
])
def test_clips_the_engine_would_refuse_are_refused_when_added(make, message, codec_refuses, data, tmp_path, capsys):
    clip = make(tmp_path / "clip.wav")
    assert message in fails(["voice", "add", "--name", "A", "--clip", str(clip), "--text", "Hi."], capsys)
    assert VoiceLibrary(data / "voices").list() == []
    from s2studio.audio.io import read_channels
    from s2studio.errors import UserError

    if codec_refuses:  # the same rule, in the same words, where the codec reads a reference
        with pytest.raises(UserError, match=re.escape(message)):
            read_channels(clip)
    else:  # a voice's clip needs a quarter second; the codec encodes any length, as upstream (a parity case)
        assert read_channels(clip)[0].shape == (1, 1)


def _old(path: Path) -> Path:
    past = time.time() - 3600
    os.utime(path, (past, past))
    return path


def test_stale_temp_files_of_killed_runs_are_cleaned(data, tmp_path, capsys, inputs):
    """A killed run leaves `.o.wav.<pid>.tmp` beside its output and `.new-*` folders in the library; the next
    run removes those older than itself that no live process holds locked."""
    out = tmp_path / "o.wav"
    for name in (".o.wav.4242.tmp", ".o.wav.4343-abcd.tmp", ".p.wav.4242.tmp"):  # the last: not this output's
        (tmp_path / name).write_bytes(b"x" * 100)
        _old(tmp_path / name)
    held = tmp_path / ".o.wav.4343-abcd.tmp"
    voices = data / "voices"
    (voices / ".new-abc123").mkdir(parents=True)
    (voices / ".new-abc123" / "clip1.flac").write_bytes(b"0" * 1000)
    _old(voices / ".new-abc123")
    locker = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time\n"
                               "f = open(sys.argv[1], 'rb'); fcntl.flock(f, fcntl.LOCK_EX); print('locked', flush=True)\n"
                               "time.sleep(600)", str(held)], stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout.readline().strip() == "locked"
        assert main(synth_args(inputs, "--text", "<|speaker:0|>Hi.", "--out", str(out))) == 0
        assert main(["voice", "list"]) == 0
    finally:
        locker.kill()
        locker.wait()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".o.wav.4343-abcd.tmp", ".p.wav.4242.tmp", "data", "o.wav"]
    assert list(voices.iterdir()) == []


def _voice_file(tmp_path: Path, name: str, transcript: str, codes: dict[str, np.ndarray] | None = None) -> Path:
    """A `.s2voice` made by a real library, then edited as a hostile sender would."""
    import json

    from safetensors.numpy import save

    lib = VoiceLibrary(tmp_path / "sender")
    v = lib.find("Sender") or lib.create("Sender", [(tone(tmp_path / "s.wav", 4.0), "Fine words.")])
    src = lib.export(v.id, tmp_path / "v.s2voice")
    with zipfile.ZipFile(src) as z:
        files = {n: z.read(n) for n in z.namelist()}
    doc = json.loads(files["voice.json"])
    doc["name"], doc["clips"][0]["transcript"] = name, transcript
    files["voice.json"] = json.dumps(doc).encode()
    if codes is not None:
        files["codes.safetensors"] = save(codes, metadata={"c1": "x", "format": "s2studio-codes-1"})
    out = tmp_path / "hostile.s2voice"
    with zipfile.ZipFile(out, "w") as z:
        for n, b in files.items():
            z.writestr(n, b)
    return out


def test_voice_list_and_import_print_no_control_characters(data, tmp_path, capsys):
    evil = _voice_file(tmp_path, "\x1b]0;owned\x07Eve\x1b[2J\u202e", "Hi\x1b[31m there\r\nfriend")
    assert main(["voice", "import", str(evil)]) == 0
    assert main(["voice", "list"]) == 0
    voice = VoiceLibrary(data / "voices").list()[0]
    assert main(["voice", "show", voice.id]) == 0
    out = capsys.readouterr()
    printed = out.out + out.err
    assert "\x1b" not in printed and "\x07" not in printed and "\u202e" not in printed and "\r" not in printed
    assert voice.name == "]0;ownedEve[2J" and voice.clips[0].transcript == "Hi[31m there friend"


def test_cached_codes_that_cannot_be_the_clips_are_dropped_and_encoded_again(data, tmp_path, caplog):
    lib = VoiceLibrary(data / "voices")
    for bad in (np.full((10, 40), -3, np.int64), np.full((10, 40), 99999, np.int64),
                np.zeros((10, 100_000), np.int64), np.zeros((3, 40), np.int64)):
        voice = lib.import_voice(_voice_file(tmp_path, "Eve", "Hi.", {"c1": bad}))
        assert not (lib.folder(voice.id) / "codes.safetensors").exists()  # dropped on import
        calls = []
        good = np.ones((10, 87), np.int64)
        assert np.array_equal(lib.codes(voice, lambda p: calls.append(p) or good, "x")[0], good) and len(calls) == 1
        # a cache damaged after import (same key, bad content) is dropped on load too
        from safetensors.numpy import save

        clip_sha = lib.get(voice.id).clips[0].sha256
        (lib.folder(voice.id) / "codes.safetensors").write_bytes(
            save({"c1": bad}, metadata={"c1": f"{clip_sha}:x", "format": "s2studio-codes-1"}))
        assert np.array_equal(lib.codes(voice, lambda p: calls.append(p) or good, "x")[0], good) and len(calls) == 2
        lib.delete(voice.id)
    assert "dropping its cached codes" in caplog.text
