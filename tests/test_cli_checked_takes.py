"""`synth --script --takes N --pick best --check FILE --strict`: takes spoken by espeak-ng with known faults (the
engine seam's fake, `SpeakingEngine`), checked by the real recognizer of the tests; the best take is the one kept
and mixed, the report says why, and only --strict turns a failed check into exit status 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import soundfile as sf

from s2studio import paths
from s2studio.commands.script_render import run_script
from s2studio.errors import UserError
from s2studio.state.voices import VoiceLibrary
from speech import tiny_model
from spoken_takes import LINES, SpeakingEngine, skipped_word, write_clips
from test_script_render import parser
from test_take_checks import needs_checks_extra

SCRIPT = f"Narrator: {LINES[0]}\nNarrator: {LINES[2]}\n"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    needs_checks_extra()
    root = tmp_path_factory.mktemp("checked-data")
    VoiceLibrary(root / "data" / "voices").create("Reader", write_clips(root / "clips"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(paths.ENV_DATA_DIR, str(root / "data"))
        yield root / "data"


def render(tmp_path: Path, engine: SpeakingEngine, *extra: str, quiet: bool = True) -> int:
    script = tmp_path / "scene.txt"
    script.write_text(SCRIPT, encoding="utf-8")
    argv = ["--script", str(script), "--cast", "Narrator=Reader", "--out", str(tmp_path / "out.wav"), "--seed", "5",
            "--max-new-tokens", "256", "--gap", "0", "--check-asr-model", str(tiny_model()), *(["-q"] if quiet else []),
            *extra]
    return run_script(parser().parse_args(argv), engine_factory=lambda: engine)


def test_best_of_two_keeps_the_clean_take_and_the_report_says_why(tmp_path: Path, data_dir: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    faults = {(0, 0): "skip", (0, 1): "clean", (2, 0): "clean", (2, 1): "cut"}
    engine = SpeakingEngine()
    engine.fault = lambda line_id, attempt: faults[(LINES.index(engine.texts[line_id]), attempt)]
    report = tmp_path / "report.jsonl"
    assert render(tmp_path, engine, "--takes", "2", "--pick", "best", "--check", str(report)) == 0
    lines = [json.loads(row) for row in report.read_text("utf-8").splitlines()]
    assert [r["line"] for r in lines] == [1, 2] and [len(r["takes"]) for r in lines] == [2, 2]
    assert lines[0]["kept"] == 2 and lines[0]["verdict"] == "passed"
    skipped = lines[0]["takes"][0]
    assert skipped["verdict"] == "failed" and f"missed “{skipped_word(LINES[0]).strip(',.')}”" in skipped["summary"]
    assert [c["name"] for c in skipped["checks"]][:1] == ["words"]
    assert lines[1]["kept"] == 1 and "cut off" in lines[1]["takes"][1]["summary"]
    assert engine.attempts == {lines[0]["line_id"]: 2, lines[1]["line_id"]: 2}
    mixed = sf.info(str(tmp_path / "out.wav")).frames
    kept_s = lines[0]["takes"][1]["seconds"] + lines[1]["takes"][0]["seconds"]  # the mix holds the kept takes
    assert abs(mixed - kept_s * 44100) < 50  # (seconds in the report are rounded to the millisecond)
    assert "every kept take passed or only warned (2 line(s))" in capsys.readouterr().err


def test_a_failed_check_exits_1_only_with_strict(tmp_path: Path, data_dir: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    cut = SpeakingEngine(fault=lambda _line, _attempt: "cut")
    assert render(tmp_path, cut, "--strict") == 1
    err = capsys.readouterr().err
    assert "checks: 2 of 2 kept take(s) failed a check, line(s) 1, 2" in err
    assert (tmp_path / "out.wav").is_file()  # the audio is written all the same


def test_the_options_are_refused_before_the_render_where_they_cannot_work(tmp_path: Path, data_dir: Path) -> None:
    engine = SpeakingEngine()
    with pytest.raises(UserError, match="--takes must be between 1 and 16, got 0"):
        render(tmp_path, engine, "--takes", "0")
    with pytest.raises(UserError, match="unknown --pick 'worst'"):
        render(tmp_path, engine, "--pick", "worst")
    with pytest.raises(UserError, match="render with --batching line"):
        render(tmp_path, engine, "--check", str(tmp_path / "r.jsonl"), "--batching", "upstream")
    assert engine.calls == []


def test_a_recognizer_that_is_not_here_is_said_once_with_the_option_that_fixes_it(
        tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report.jsonl"
    assert render(tmp_path, SpeakingEngine(), "--check", str(report), "--check-asr-model", "base", quiet=False) == 0
    err = capsys.readouterr().err
    assert "checking line" not in err  # stderr is no terminal here: no progress rewritten with \r in a log
    assert err.count("warning: the words check is skipped: the speech-recognition model “base”") == 1
    assert "is not on this computer: pass --check-asr-model SIZE|DIR with one that is" in err
    assert "(or download it once: s2studio transcribe --model base CLIP)" in err and "Settings" not in err
    words = [json.loads(row)["takes"][0]["checks"][0] for row in report.read_text("utf-8").splitlines()]
    assert [(c["name"], c["verdict"]) for c in words] == [("words", "skipped"), ("words", "skipped")]
