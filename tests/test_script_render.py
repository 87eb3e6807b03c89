"""`synth --script`: a three-speaker script rendered by the real engine on the tiny demo model to every
export format, read back; stems, subtitles and the events log checked against the takes; bad input
gives one clear error and leaves nothing on disk (the FakeEngine stands in where the model adds nothing)."""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from s2studio import __version__, paths
from s2studio.commands.script_args import add_script_arguments
from s2studio.commands.script_render import run_script
from s2studio.demo_model import write_demo_model
from s2studio.engine.api import SAMPLE_RATE, AudioChunk, Event, LineFinished
from s2studio.engine.fake import FakeEngine
from s2studio.errors import UserError
from s2studio.state.voices import VoiceLibrary

SR = SAMPLE_RATE
GAP = 0.25
SCRIPT = """# Scene one
Alice: Hello there, [whispering] how are you?
Bob: [laughing] I am fine, thanks.
Carol: Good to hear.
Alice: See you soon.
"""
SPOKEN = [("Alice", "Hello there, [whispering] how are you?"), ("Bob", "[laughing] I am fine, thanks."),
          ("Carol", "Good to hear."), ("Alice", "See you soon.")]
HEARD = [("Alice", "Hello there, how are you?"), ("Bob", "I am fine, thanks."), ("Carol", "Good to hear."),
         ("Alice", "See you soon.")]
"""What the subtitles show: the lines without their delivery tags."""


def parser() -> argparse.ArgumentParser:
    """synth's options that `run_script` reads, plus the script options (until synth is wired)."""
    p = argparse.ArgumentParser(prog="s2studio synth")
    p.add_argument("--model", type=Path, default=Path("no-model"))
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--max-new-tokens", type=int, default=0)
    p.add_argument("--chunk-length", type=int, default=300)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--top-k", type=int, default=30)
    p.add_argument("--batching", default=None)
    p.add_argument("-q", "--quiet", action="store_true")
    add_script_arguments(p)
    return p


class Recorder:
    """An engine wrapper that keeps every generate event (with samples) for the checks."""

    def __init__(self, engine) -> None:
        self.engine, self.events = engine, []

    def load(self, request, cancel):
        return self.engine.load(request, cancel)

    def encode(self, request, cancel):
        return self.engine.encode(request, cancel)

    def generate(self, request, cancel) -> Iterator[Event]:
        for ev in self.engine.generate(request, cancel):
            self.events.append(ev)
            yield ev


def clip(path: Path, seconds: float, rate: int, freq: float, noise: float = 0.0) -> Path:
    n = round(seconds * rate)
    rng = np.random.default_rng(int(freq))
    x = 0.3 * np.sin(2 * np.pi * freq * np.arange(n) / rate) + noise * rng.standard_normal(n)
    sf.write(str(path), x.astype(np.float32), rate)
    return path


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_demo_model(tmp_path_factory.mktemp("tiny") / "tiny", seed=3)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("render-data")
    lib = VoiceLibrary(root / "data" / "voices")
    lib.create("Ann", [(clip(root / "a.wav", 1.5, 22050, 220.0), "A short first clip.")])
    lib.create("Ben", [(clip(root / "b.wav", 1.0, 44100, 150.0, noise=0.05), "Second one.")])
    lib.create("Cleo", [(clip(root / "c.wav", 2.0, 44100, 330.0), "Third voice here."),
                        (clip(root / "c2.wav", 1.0, 22050, 300.0, noise=0.02), "And more.")])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(paths.ENV_DATA_DIR, str(root / "data"))
        yield root / "data"


@pytest.fixture(scope="module")
def engine():
    from s2studio.engine.s2 import S2Engine

    return S2Engine()


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "scene.txt"
    path.write_text(SCRIPT, encoding="utf-8")
    return path


CAST = ["--cast", "Alice=Ann", "--cast", "Bob=Ben", "--cast", "Carol=Cleo"]


def render(argv: list[str], engine_factory=None) -> int:
    return run_script(parser().parse_args(argv), engine_factory=engine_factory)


def events_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def real_render(tmp_path: Path, script: Path, model_dir: Path, engine, out: str, *extra: str) -> tuple[Recorder, Path]:
    rec = Recorder(engine)
    argv = ["--script", str(script), *CAST, "--model", str(model_dir), "--max-new-tokens", "8", "--seed", "7",
            "--gap", str(GAP), "--out", str(tmp_path / out), "--events", str(tmp_path / "ev.jsonl"), *extra]
    assert render(argv, lambda: rec) == 0
    return rec, tmp_path / "ev.jsonl"


def takes(rec: Recorder) -> list[LineFinished]:
    return [ev for ev in rec.events if isinstance(ev, LineFinished)]


def starts_of(lengths: list[int]) -> list[int]:
    gap, pos, out = round(GAP * SR), 0, []
    for n in lengths:
        out.append(pos)
        pos += n + gap
    return out


def ms(s: int) -> str:
    t = round(s * 1000 / SR)
    return f"{t // 3_600_000:02d}:{t // 60_000 % 60:02d}:{t // 1000 % 60:02d},{t % 1000:03d}"


# ----------------------------------------------------------------------------- the real engine


def test_wav_stems_subtitles_and_events_match_the_takes(tmp_path: Path, script: Path, model_dir: Path,
                                                        data_dir: Path, engine, capsys) -> None:
    rec, events = real_render(tmp_path, script, model_dir, engine, "mix.wav", "--stems", str(tmp_path / "stems"),
                              "--clips", str(tmp_path / "clips"), "--srt", str(tmp_path / "mix.srt"),
                              "--vtt", str(tmp_path / "mix.vtt"))
    err = capsys.readouterr().err
    assert re.fullmatch(r"rendered 4 line\(s\), \d+ frames, [\d.]+ s in [\d.]+ s \(RTF [\d.]+\) -> .*\n", err), err
    got = takes(rec)
    assert len(got) == 4
    lengths = [len(t.audio) for t in got]
    assert all(n == 2048 * t.codes.shape[1] and 0 < t.codes.shape[1] <= 7 for n, t in zip(lengths, got))
    starts = starts_of(lengths)
    total = starts[-1] + lengths[-1]

    mix, sr = sf.read(str(tmp_path / "mix.wav"), dtype="float32")
    assert sr == SR and len(mix) == total
    for start, take in zip(starts, got):  # each take sits where the cue says, between silent gaps
        np.testing.assert_allclose(mix[start:start + len(take.audio)], np.clip(take.audio, -1, 1), atol=1 / 32768)
    for start, n in zip(starts[1:], lengths):
        assert not mix[start - round(GAP * SR):start].any()
    with sf.SoundFile(str(tmp_path / "mix.wav")) as f:
        meta = f.copy_metadata()
    assert meta["title"] == "Scene one" and meta["artist"] == "Ann, Ben, Cleo"
    assert meta["software"].startswith(f"S2 Studio {__version__} (tiny)")  # libsndfile appends its own name
    assert meta["comment"] == "AI-generated speech; model: tiny"

    stems = sorted((tmp_path / "stems").iterdir())
    assert [p.name for p in stems] == ["01_Alice.wav", "02_Bob.wav", "03_Carol.wav"]  # one track per speaker
    summed = sum(sf.read(str(p), dtype="float32")[0].astype(np.float64) for p in stems)
    assert len(summed) == total
    np.testing.assert_allclose(summed, mix, atol=4 / 32768)
    clips = sorted((tmp_path / "clips").iterdir())
    assert [p.name for p in clips] == ["001_Alice_hello-there-how-are-you.wav", "002_Bob_i-am-fine-thanks.wav",
                                       "003_Carol_good-to-hear.wav", "004_Alice_see-you-soon.wav"]
    for path, take in zip(clips, got, strict=True):  # each line's take alone, trimmed to it
        np.testing.assert_allclose(sf.read(str(path), dtype="float32")[0], np.clip(take.audio, -1, 1), atol=1 / 32768)

    srt = (tmp_path / "mix.srt").read_text("utf-8")
    assert srt == "\n".join(f"{i + 1}\n{ms(s)} --> {ms(s + n)}\n{who}: {text}\n"
                            for i, ((who, text), s, n) in enumerate(zip(HEARD, starts, lengths)))
    vtt = (tmp_path / "mix.vtt").read_text("utf-8")
    cues = re.findall(r"(\d\d:\d\d:\d\d\.\d\d\d) --> (\d\d:\d\d:\d\d\.\d\d\d)\n<v (\w+)>(.*)\n", vtt)
    assert cues == [(ms(s).replace(",", "."), ms(s + n).replace(",", "."), who, text)
                    for (who, text), s, n in zip(HEARD, starts, lengths)]

    log = events_of(events)
    kinds = [e["kind"] for e in log]
    assert kinds[0] == "ModelLoading" and "ModelReady" in kinds and "ClipEncoded" in kinds
    assert kinds[-1] == "JobFinished" and all("samples" not in e or isinstance(e["samples"], int) for e in log)
    walls = [e["wall_s"] for e in log]
    assert walls == sorted(walls)
    for take in got:
        chunks = [e for e in log if e["kind"] == "AudioChunk" and e["line_id"] == take.line_id]
        finished = [e for e in log if e["kind"] == "LineFinished" and e["line_id"] == take.line_id]
        assert chunks[0]["start_sample"] == 0 and chunks[0]["samples"] <= 4 * 2048 and chunks[0]["frames"] <= 4
        assert [c["start_sample"] for c in chunks] == list(np.cumsum([0] + [c["samples"] for c in chunks[:-1]]))
        assert sum(c["samples"] for c in chunks) == finished[0]["samples"] == len(take.audio)
        assert finished[0]["frames"] == take.codes.shape[1] and finished[0]["seed"] == take.seed
        assert finished[0]["take_id"] == take.take_id and finished[0]["fingerprint"] == take.fingerprint
        streamed = [ev.samples for ev in rec.events if isinstance(ev, AudioChunk) and ev.line_id == take.line_id]
        np.testing.assert_allclose(np.concatenate(streamed), take.audio, atol=1e-6)


@pytest.mark.parametrize("fmt", ["flac", "ogg", "opus", "mp3"])
def test_every_format_reads_back_at_the_right_length(tmp_path: Path, script: Path, model_dir: Path,
                                                     data_dir: Path, engine, fmt: str) -> None:
    rec, _ = real_render(tmp_path, script, model_dir, engine, f"mix.{fmt}", "--normalize", "peak")
    lengths = [len(t.audio) for t in takes(rec)]
    total = starts_of(lengths)[-1] + lengths[-1]
    data, sr = sf.read(str(tmp_path / f"mix.{fmt}"), dtype="float32")
    rate = 48000 if fmt == "opus" else SR
    assert sr == rate and len(data) == round(total * rate / SR)
    with sf.SoundFile(str(tmp_path / f"mix.{fmt}")) as f:
        assert f.format == {"flac": "FLAC", "ogg": "OGG", "opus": "OGG", "mp3": "MP3"}[fmt]
        assert f.subtype == {"flac": "PCM_24", "ogg": "VORBIS", "opus": "OPUS", "mp3": "MPEG_LAYER_III"}[fmt]
    if fmt == "flac":  # peak-normalised to -1 dBFS
        assert abs(20 * np.log10(np.abs(data).max()) + 1.0) < 1e-3


def test_a_clip_that_is_not_audio_fails_before_rendering(tmp_path: Path, script: Path, model_dir: Path,
                                                         data_dir: Path, engine, monkeypatch) -> None:
    data = tmp_path / "data"
    shutil.copytree(data_dir, data)
    monkeypatch.setenv(paths.ENV_DATA_DIR, str(data))
    ben = VoiceLibrary(data / "voices").find("Ben")
    (data / "voices" / ben.id / "clip1.flac").write_bytes(b"this is not audio at all" * 40)
    with pytest.raises(UserError, match=r"^voice 'Ben', clip 1: clip1\.flac is not an audio file"):
        render(["--script", str(script), *CAST, "--model", str(model_dir), "--max-new-tokens", "4",
                "--out", str(tmp_path / "mix.wav"), "--events", str(tmp_path / "ev.jsonl")], lambda: engine)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "scene.txt"]


# ----------------------------------------------------------------------------- the fake engine


def test_upstream_batching_gives_one_cue_per_batch(tmp_path: Path, script: Path, model_dir: Path,
                                                  data_dir: Path, engine) -> None:
    rec, events = real_render(tmp_path, script, model_dir, engine, "mix.wav", "--batching", "upstream",
                              "--chunk-length", "60", "--srt", str(tmp_path / "mix.srt"))
    got = takes(rec)
    plan = [e["plan"] for e in events_of(events) if e["kind"] == "JobStarted" and e["job_id"].startswith("render")]
    assert [t.line_id for t in got] == plan[0] and len(got) == 3  # 60-byte batches: the last two lines share one
    srt = (tmp_path / "mix.srt").read_text("utf-8")
    cues = re.findall(r"\d\n[\d:,]+ --> [\d:,]+\n(.*)\n", srt)
    assert cues == [f"{HEARD[0][0]}: {HEARD[0][1]}", f"{HEARD[1][0]}: {HEARD[1][1]}",
                    f"Carol, Alice: {HEARD[2][1]} {HEARD[3][1]}"]
    lengths = [len(t.audio) for t in got]
    assert len(sf.read(str(tmp_path / "mix.wav"))[0]) == starts_of(lengths)[-1] + lengths[-1]


def test_progress_bar_on_a_terminal(tmp_path: Path, script: Path, data_dir: Path, monkeypatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    err = Tty()
    monkeypatch.setattr("sys.stderr", err)
    assert render(["--script", str(script), *CAST, "--out", str(tmp_path / "a.wav")], FakeEngine) == 0
    text = err.getvalue()
    assert text.startswith("loaded fake on cpu (fp32) in ")
    assert "\r[" + "#" * 24 + "] 4/4 lines  " in text and "  RTF " in text
    assert text.splitlines()[-1].startswith("rendered 4 line(s), ")
    err.truncate(0)
    err.seek(0)
    assert render(["--script", str(script), *CAST, "--out", str(tmp_path / "a.wav"), "-q"], FakeEngine) == 0
    assert err.getvalue().startswith("rendered 4 line(s), ")  # quiet: only the summary


def test_parser_warnings_point_at_the_line(tmp_path: Path, data_dir: Path, capsys) -> None:
    path = tmp_path / "w.txt"
    path.write_text("Alice: Hi [unclosed.\n\nBob: Fine.\n", encoding="utf-8")
    ben = VoiceLibrary(data_dir / "voices").find("Ben")
    assert render(["--script", str(path), "--cast", "Alice=ann", "--cast", f"Bob={ben.id}", "--cast", "Dan=Ben",
                   "--out", str(tmp_path / "a.wav")], FakeEngine) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith(f"{path}:1: warning: ")
    assert lines[1] == f"warning: --cast Dan: no such speaker in {path}"


def test_a_failing_line_leaves_nothing_behind(tmp_path: Path, script: Path, data_dir: Path) -> None:
    from s2studio.state.script import parse_script

    bob = parse_script(SCRIPT).lines[1].line_id
    outs = ["--out", str(tmp_path / "a.wav"), "--stems", str(tmp_path / "stems"), "--srt", str(tmp_path / "a.srt"),
            "--vtt", str(tmp_path / "a.vtt"), "--events", str(tmp_path / "a.jsonl")]
    with pytest.raises(UserError, match=f"^generation failed on line {bob}: fake failure$"):
        render(["--script", str(script), *CAST, *outs], lambda: FakeEngine(fail_on_line=bob))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scene.txt"]


def test_an_export_failure_removes_what_was_already_written(tmp_path: Path, script: Path, data_dir: Path) -> None:
    (tmp_path / "stems" / "03_Carol.wav").mkdir(parents=True)  # a folder where a stem must go
    with pytest.raises(UserError, match="^cannot write .*03_Carol.wav: "):
        render(["--script", str(script), *CAST, "--out", str(tmp_path / "a.wav"), "--stems", str(tmp_path / "stems"),
                "--events", str(tmp_path / "a.jsonl")], FakeEngine)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scene.txt", "stems"]
    assert [p.name for p in (tmp_path / "stems").iterdir()] == ["03_Carol.wav"]


def bad(tmp_path: Path, source: str | bytes | None, argv: list[str]) -> str:
    path = tmp_path / "s.txt"
    if isinstance(source, str):
        path.write_text(source, encoding="utf-8")
    elif isinstance(source, bytes):
        path.write_bytes(source)
    outs = ["--out", str(tmp_path / "o.wav"), "--srt", str(tmp_path / "o.srt"), "--events", str(tmp_path / "o.jsonl")]
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(UserError) as exc:
        render(["--script", str(path), *argv, *outs], FakeEngine)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    message = str(exc.value)
    assert "\n" not in message
    return message.replace(str(tmp_path), "T")


def test_bad_input_is_one_clear_line_and_writes_nothing(tmp_path: Path, data_dir: Path) -> None:
    ok = "Alice: Hello.\n"
    assert bad(tmp_path, ok, ["--cast", "Alice=Nobody"]) == (
        "--cast Alice=Nobody: no voice called 'Nobody'; `s2studio voice list` shows the voices")
    assert bad(tmp_path, " \n\n", ["--cast", "Alice=Ann"]) == (
        "script T/s.txt is empty; write lines like 'Alice: Hello.'")
    assert bad(tmp_path, "# Only a heading\n", ["--cast", "Alice=Ann"]) == (
        "script T/s.txt has nothing to speak; write lines like 'Alice: Hello.'")
    assert bad(tmp_path, "Alice: [laughing]\n[sighing] [pause]\n", ["--cast", "Alice=Ann"]) == (
        "the script has only tags and no words to speak; add text after the tags")
    assert bad(tmp_path, "Alice: Hi.\n" * 1_000_000, ["--cast", "Alice=Ann"]) == (
        "script T/s.txt is 11.0 MB; split it into files under 2 MB")
    assert bad(tmp_path, b"Alice: caf\xe9\n", ["--cast", "Alice=Ann"]) == (
        "script T/s.txt is not UTF-8 text (byte 10); save it as UTF-8")
    assert bad(tmp_path, "Alice: Hi.\nCarol: Yes.\n", ["--cast", "Alice=Ann"]) == (
        "no voice for speaker 'Carol'; cast it (e.g. --cast 'Carol=VOICE')")
    assert bad(tmp_path, ok, ["--cast", "Alice"]) == "--cast 'Alice': write it as NAME=VOICE, e.g. --cast 'Alice=My voice'"
    assert bad(tmp_path, ok, ["--cast", "Alice=Ann", "--gap", "-1"]) == "--gap must be between 0 and 60 seconds, got -1.0"
    assert bad(tmp_path, ok, ["--cast", "Alice=Ann", "--normalize", "loud"]) == (
        "unknown --normalize 'loud'; use none, peak or loudness")
    assert bad(tmp_path, ok, ["--cast", "Alice=Ann", "--temperature", "3"]) == "temperature must be between 0.05 and 1.95, got 3.0"


def test_missing_files_and_folders(tmp_path: Path, data_dir: Path) -> None:
    script = tmp_path / "s.txt"
    script.write_text("Alice: Hello.\n", encoding="utf-8")
    cases = {
        "cannot write --out T/no/o.wav: folder T/no does not exist": ["--out", str(tmp_path / "no" / "o.wav")],
        "cannot tell the format of o.aac; end it in .wav, .flac, .ogg, .opus or .mp3": ["--out", str(tmp_path / "o.aac")],
        "nothing to write; give --out FILE (and/or --stems DIR, --clips DIR, --chapters DIR, --srt FILE, --vtt FILE)": [],
        "--stems T/s.txt exists and is not a folder": ["--stems", str(script)],
        "--chapters T/s.txt exists and is not a folder": ["--chapters", str(script)],
        "--cue describes the chapters of the --out file; give --out too": ["--cue", str(tmp_path / "c.cue"),
                                                                           "--srt", str(tmp_path / "c.srt")],
        "unknown --stems-format 'aac'; use one of wav, flac, ogg, opus, mp3": [
            "--out", str(tmp_path / "o.wav"), "--stems-format", "aac"],
        "--clips T/s.txt exists and is not a folder": ["--clips", str(script)],
        "--bitrate 100 is not offered for mp3; use one of 64, 96, 128, 160, 192, 256, 320": [
            "--out", str(tmp_path / "o.mp3"), "--bitrate", "100"],
        "--bitrate is for .mp3 and .opus files; wav has none": ["--out", str(tmp_path / "o.wav"), "--bitrate", "128"],
    }
    for message, outs in cases.items():
        with pytest.raises(UserError) as exc:
            render(["--script", str(script), "--cast", "Alice=Ann", *outs], FakeEngine)
        assert str(exc.value).replace(str(tmp_path), "T") == message
    with pytest.raises(UserError, match=r"^cannot read script .*missing\.txt: No such file or directory$"):
        render(["--script", str(tmp_path / "missing.txt"), "--cast", "Alice=Ann", "--out", str(tmp_path / "o.wav")],
               FakeEngine)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.txt"]


def test_an_unusable_data_dir_is_named(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv(paths.ENV_DATA_DIR, str(tmp_path / "file" / "data"))
    script = tmp_path / "s.txt"
    script.write_text("Alice: Hello.\n", encoding="utf-8")
    with pytest.raises(UserError) as exc:
        render(["--script", str(script), "--cast", "Alice=Ann", "--out", str(tmp_path / "o.wav")], FakeEngine)
    assert str(exc.value) == (f"the data folder {tmp_path}/file/data is unusable: {tmp_path}/file is a file; "
                              f"set {paths.ENV_DATA_DIR} to a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "s.txt"]


def test_load_failure_is_the_engines_message(tmp_path: Path, script: Path, data_dir: Path) -> None:
    with pytest.raises(UserError, match="^cannot load the model in no-model: fake failure$"):
        render(["--script", str(script), *CAST, "--out", str(tmp_path / "a.wav"), "--events", str(tmp_path / "e.jsonl")],
               lambda: FakeEngine(fail_on_load=True))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scene.txt"]


def test_synths_own_parser_takes_the_script_options(tmp_path: Path, script: Path, data_dir: Path) -> None:
    """The options must not clash with synth's (it has its own --out), and `run_script` must find every
    synth option it reads under synth's names."""
    from s2studio.commands import synth

    sub = argparse.ArgumentParser().add_subparsers()
    synth.add_parser(sub)
    p = sub.choices["synth"]
    text = [] if "--script" in p._option_string_actions else ["--text", "unused"]  # wired: --script excludes --text
    add_script_arguments(p)
    add_script_arguments(p)  # options it has already are left alone
    args = p.parse_args(["--model", "m", *text, "--script", str(script), *CAST, "--batching", "line",
                         "--out", str(tmp_path / "a.flac"), "--srt", str(tmp_path / "a.srt"), "--gap", "0.1"])
    assert run_script(args, engine_factory=FakeEngine) == 0
    data, sr = sf.read(str(tmp_path / "a.flac"))
    assert sr == SR and len(data) > 0
    assert (tmp_path / "a.srt").read_text().count(" --> ") == 4


def _synth_has_script() -> bool:
    from s2studio.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return "--script" in sub.choices["synth"]._option_string_actions


@pytest.mark.skipif(not _synth_has_script(), reason="synth --script is not wired into the CLI yet")
def test_through_the_command_line(tmp_path: Path, script: Path, model_dir: Path, data_dir: Path, capsys) -> None:
    from s2studio.cli import main

    base = ["synth", "--model", str(model_dir), "--device", "cpu", "--precision", "fp32", "--script", str(script),
            "--max-new-tokens", "4", "--batching", "line"]
    assert main([*base, *CAST, "--out", str(tmp_path / "a.ogg"), "--vtt", str(tmp_path / "a.vtt")]) == 0
    assert capsys.readouterr().err.startswith("rendered 4 line(s), ")
    assert sf.info(str(tmp_path / "a.ogg")).subtype == "VORBIS"
    assert (tmp_path / "a.vtt").read_text().count(" --> ") == 4
    assert main([*base, "--cast", "Alice=Nobody", "--out", str(tmp_path / "b.wav")]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "s2studio synth: error: --cast Alice=Nobody: no voice called 'Nobody'; `s2studio voice list` shows the voices")
    assert not (tmp_path / "b.wav").exists()


def test_a_book_gets_chapters_a_cue_sheet_and_flac_stems(tmp_path: Path, data_dir: Path, capsys) -> None:
    """The studio's export code through the command line: the headings as WAV cue points, a CUE sheet, one file
    per chapter, and stems in a format of their own."""
    path = tmp_path / "book.txt"
    path.write_text("# One\nAlice: First line.\nBob: Second line.\n# Two\nAlice: Third line.\n", encoding="utf-8")
    out = tmp_path / "book.wav"
    assert render(["--script", str(path), "--cast", "Alice=Ann", "--cast", "Bob=Ben", "--out", str(out),
                   "--cue", str(tmp_path / "book.cue"), "--chapters", str(tmp_path / "parts"),
                   "--stems", str(tmp_path / "stems"), "--stems-format", "flac"], FakeEngine) == 0
    assert capsys.readouterr().err.strip().endswith(
        f"-> {out}, 2 speaker stems in {tmp_path / 'stems'}, 2 chapter files in {tmp_path / 'parts'}, "
        f"{tmp_path / 'book.cue'}")
    assert sorted(p.name for p in (tmp_path / "parts").iterdir()) == ["01_One.wav", "02_Two.wav"]
    assert sorted(p.name for p in (tmp_path / "stems").iterdir()) == ["01_Alice.flac", "02_Bob.flac"]
    second = sf.info(str(tmp_path / "parts" / "01_One.wav")).frames + round(0.4 * SR)
    data = out.read_bytes()
    cue = data.index(b"cue ")
    assert struct.unpack_from("<III", data, cue + 8) == (2, 1, 0)  # two points, the first at 0
    assert struct.unpack_from("<I", data, cue + 12 + 24 + 4)[0] == second
    assert (tmp_path / "book.cue").read_text().count("TRACK") == 2


SCENES = "# One\nAlice: Hello there, how are you?\nBob: I am fine.\n# Two\nCarol: Good to hear.\nAlice: See you soon.\n"


def test_scenes_and_takes_render_side_by_side(tmp_path: Path, data_dir: Path) -> None:
    """A heading starts a scene: the scenes' jobs run at once (their events interleave), each line drawn with the
    seed it has in the whole script; `--takes 2` runs both passes' scenes at once too, and `--pick first` keeps
    the first pass: the plain render's audio."""
    script = tmp_path / "book.txt"
    script.write_text(SCENES, encoding="utf-8")
    base = ["--script", str(script), *CAST, "--seed", "7"]

    def renders(name: str, *extra: str) -> list[dict]:
        assert render([*base, "--out", str(tmp_path / f"{name}.wav"), "--events", str(tmp_path / f"{name}.jsonl"),
                       *extra], FakeEngine) == 0
        return [e for e in events_of(tmp_path / f"{name}.jsonl") if e["job_id"].startswith("render-")]  # no encodes

    events = renders("plain")
    jobs = [e["job_id"] for e in events if e["kind"] == "JobStarted"]
    assert len(jobs) == 2  # one job per scene
    first_end = next(i for i, e in enumerate(events) if e["kind"] == "JobFinished")
    assert {e["job_id"] for e in events[:first_end] if e["kind"] == "LineStarted"} == set(jobs)  # side by side
    seeds = {e["line_id"]: e["seed"] for e in events if e["kind"] == "LineFinished"}
    from s2studio.state.script import parse_script
    assert [seeds[ln.line_id] for ln in parse_script(SCENES).lines] == [7, 8, 9, 10]

    events = renders("two", "--takes", "2", "--pick", "first")
    jobs = [e["job_id"] for e in events if e["kind"] == "JobStarted"]
    assert len(jobs) == 4 and len({j.rsplit("-take", 1)[1][0] for j in jobs}) == 2  # two passes of two scenes
    first_end = next(i for i, e in enumerate(events) if e["kind"] == "JobFinished")
    assert {e["job_id"] for e in events[:first_end] if e["kind"] == "LineStarted"} == set(jobs)  # all at once
    assert sorted(e["seed"] for e in events if e["kind"] == "LineFinished") == list(range(7, 15))
    plain, first = (sf.read(str(tmp_path / n))[0] for n in ("plain.wav", "two.wav"))
    assert np.array_equal(plain, first)


def test_speakers_named_like_a_voice_need_no_cast(tmp_path: Path, data_dir: Path, capsys) -> None:
    path = tmp_path / "named.txt"
    path.write_text("ann: Hello there.\nBen: Hi.\nCarol: Me too.\n", encoding="utf-8")
    rec = Recorder(FakeEngine())
    assert render(["--script", str(path), "--cast", "Carol=Cleo", "--out", str(tmp_path / "n.wav")], lambda: rec) == 0
    assert "warning" not in capsys.readouterr().err
    assert len(takes(rec)) == 3


def test_takes_go_each_to_its_own_files_at_once(tmp_path: Path, script: Path, data_dir: Path, capsys) -> None:
    """`--takes 3` without --pick: every output once per take (`mix_take1.wav` …), the takes side by side on the
    batch; take k draws line i with seed + (k - 1)·lines + i, so take 1 is the plain render and take 2 the plain
    render seeded 4 further on (the script has 4 lines)."""
    class Counting(FakeEngine):
        """Counts the streams that run at once."""

        def stream(self, request, cancel):
            self.now = getattr(self, "now", 0) + 1
            self.most_at_once = max(getattr(self, "most_at_once", 0), self.now)
            try:
                yield from super().stream(request, cancel)
            finally:
                self.now -= 1

    engine = Counting()
    outs = ["--out", str(tmp_path / "mix.wav"), "--srt", str(tmp_path / "subs.srt"), "--seed", "5"]
    assert render(["--script", str(script), *CAST, *outs, "--takes", "3"], lambda: engine) == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".wav", ".srt")) == [
        "mix_take1.wav", "mix_take2.wav", "mix_take3.wav", "subs_take1.srt", "subs_take2.srt", "subs_take3.srt"]
    assert "rendered 4 line(s) × 3 takes" in capsys.readouterr().err
    assert engine.most_at_once >= 3  # the three passes' streams ran side by side
    mixes = [sf.read(str(tmp_path / f"mix_take{k}.wav"))[0] for k in (1, 2, 3)]
    for k, seed in ((1, 5), (2, 9)):
        plain = tmp_path / f"plain{k}"
        plain.mkdir()
        assert render(["--script", str(script), *CAST, "--out", str(plain / "mix.wav"), "--seed", str(seed)],
                      FakeEngine) == 0
        assert np.array_equal(sf.read(str(plain / "mix.wav"))[0], mixes[k - 1])
    assert not np.array_equal(mixes[0], mixes[1])
    with pytest.raises(UserError, match="--check and --strict judge the takes to keep one of each line; add --pick"):
        render(["--script", str(script), *CAST, *outs, "--takes", "2", "--strict"], FakeEngine)
