"""The take checks on real audio: espeak-ng speaks each line clean or with one of S2's known faults, the tests'
real speech-recognition model (tests/asr-model.txt) hears it, and each fault must be caught by its own check with
its reason in words while the clean take passes every check."""

from __future__ import annotations

import importlib.util
import multiprocessing
import pickle
from pathlib import Path

import numpy as np
import pytest

from s2studio.audio import SAMPLE_RATE
from s2studio.audio.asr import AsrSettings
from s2studio.checks.settings import SETTINGS, CheckSettings, check_key
from s2studio.checks.words import compare, normalise, words_check
from s2studio.state.take_check import CheckResult, TakeCheck, best
from speech import tiny_model
from spoken_takes import LINES, faulty, skipped_word, write_clips

LINE = LINES[0]
TAGGED = "[whispering] " + LINES[1]
MAX_FRAMES = 256


def needs_checks_extra() -> None:
    """The voice encoder's weights ship in the resemblyzer wheel (found, never imported: its own front end
    imports pkg_resources, which new setuptools no longer has)."""
    if importlib.util.find_spec("resemblyzer") is None:
        pytest.skip("the checks extra is not installed: pip install -e '.[checks]'")


@pytest.fixture(scope="module")
def checker_and_clips(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    needs_checks_extra()
    from s2studio.checks.checker import Checker, Clip  # noqa: PLC0415

    model = str(tiny_model())
    clips = tuple(Clip(str(p), t) for p, t in write_clips(tmp_path_factory.mktemp("clips")))
    return Checker(asr=AsrSettings(model)), clips


def check(checker_and_clips, text: str, fault: str) -> TakeCheck:  # noqa: ANN001
    from s2studio.checks.checker import CheckJob  # noqa: PLC0415

    checker, clips = checker_and_clips
    audio = faulty(text, fault, MAX_FRAMES)
    return checker.check(CheckJob("take", "line", text, audio, SAMPLE_RATE, MAX_FRAMES, clips))


def test_a_clean_take_passes_every_check(checker_and_clips) -> None:  # noqa: ANN001
    result = check(checker_and_clips, LINE, "clean")
    assert result.verdict == "passed", result.summary()
    assert {c.name for c in result.checks} == {"words", "pace", "fade", "end", "runaway", "silence", "clipping",
                                               "voice"}
    assert all(c.verdict == "passed" for c in result.checks), result.summary()
    assert result.of("words").reason == "every word as written"


@pytest.mark.parametrize(("fault", "check_name", "reason"), [
    ("cut", "end", "cut off"),
    ("fade", "fade", "dB quieter than the first"),
    ("skip", "words", "missed “{skipped}”"),
    ("runaway", "runaway", "ran to the frame limit"),
    ("voice", "voice", "sounds like another voice"),
])
def test_each_fault_is_caught_by_its_check_with_its_reason(checker_and_clips, fault: str, check_name: str,
                                                           reason: str) -> None:
    result = check(checker_and_clips, LINE, fault)
    found = result.of(check_name)
    assert found is not None and found.verdict == "failed", result.summary()
    expected = reason.format(skipped=skipped_word(LINE).strip(",.").lower())
    assert expected in found.reason, found.reason
    assert result.verdict == "failed" and f"{check_name} ({found.reason})" in result.summary()


def test_a_tag_read_aloud_fails_words_while_the_tag_spoken_as_a_tag_passes(checker_and_clips) -> None:  # noqa: ANN001
    aloud = check(checker_and_clips, TAGGED, "tag").of("words")
    assert aloud is not None and aloud.verdict == "failed"
    assert "reads the tag aloud (“whisper" in aloud.reason, aloud.reason  # tiny.en hears "Whisper, please …"
    clean = check(checker_and_clips, TAGGED, "clean").of("words")
    assert clean is not None and clean.verdict == "passed", clean.reason


def test_a_fade_of_12_db_measures_between_the_thresholds_it_was_chosen_for(checker_and_clips) -> None:  # noqa: ANN001
    fade = check(checker_and_clips, LINE, "fade").of("fade")
    assert fade is not None and CheckSettings().fade_fail_db <= fade.value <= 12.0


# -- the words check without a recognizer: the transcript given -------------------------------------------


def test_numbers_tags_and_punctuation_are_normalised_before_comparing() -> None:
    assert normalise("[excited] We need 42 chairs, & 3rd-row seats!") == [
        "we", "need", "forty", "two", "chairs", "and", "third", "row", "seats"]
    assert compare("It cost 42 pounds.", "It cost forty-two pounds").error_rate == 0.0


def test_words_reasons_name_what_was_missed_added_and_replaced() -> None:
    settings = CheckSettings()
    missed = words_check("Bring the blue folder from my desk.", "Bring the folder from my desk.", "en", settings)
    assert missed.verdict == "failed" and "missed “blue”" in missed.reason
    babble = words_check("The river was calm.", "The river was calm and then the the river river.", "en",
                         settings)
    assert babble.verdict == "failed" and "added “and then the the river river”" in babble.reason
    replaced = words_check("She painted the kitchen yellow today.", "She painted the kitchen purple today.",
                           "en", settings)
    assert "replaced “yellow” with “purple”" in replaced.reason
    tag = words_check("[laughing] That was funny.", "Laughing. That was funny.", "en", settings)
    assert tag.verdict == "failed" and "reads the tag aloud (“laughing”)" in tag.reason


def test_a_word_skipped_fails_but_a_word_misheard_or_spelled_otherwise_does_not() -> None:
    """The line between a take that skipped a word and a recognizer that misheard one (the probabilities are
    what tiny.en gave on espeak-ng: a skipped word 0.0002, "bus" heard as "most" 0.0004, "hidden" unheard 0.0067)."""
    s = CheckSettings()
    skipped = words_check("Bring the blue folder.", "Bring the folder.", "en", s, lambda: [0.9, 0.9, 0.0002, 0.9])
    assert skipped.verdict == "failed" and "missed “blue”" in skipped.reason
    misheard = words_check("The bus driver waited.", "The most driver waited.", "en", s,
                           lambda: [0.9, 0.0004, 0.9, 0.9])
    assert misheard.verdict == "warning" and "replaced “bus” with “most”" in misheard.reason
    line = "She found a golden key hidden under a loose stone in the wall."
    unheard = words_check(line, line.replace(" hidden", ""), "en", s, lambda: [0.9] * 5 + [0.0067] + [0.9] * 7)
    assert unheard.verdict == "passed" and "not heard “hidden”" in unheard.reason
    spelled = compare("Colourful silk radios.", "Colorful silk radio.")
    assert spelled.doubted == (("colourful", "colorful"), ("radios", "radio")) and spelled.error_rate == 0.5 / 3


# -- results: ranking, the project file's form, the key -------------------------------------------------------


def result(*verdicts: str, score: float = 1.0) -> TakeCheck:
    return TakeCheck(tuple(CheckResult(f"c{i}", v, score, None, v) for i, v in enumerate(verdicts)), "k")


def test_pace_is_judged_against_the_voices_clips_and_the_lines_around_it() -> None:
    from s2studio.checks.signal import pace_check  # noqa: PLC0415

    s = CheckSettings()
    like_neighbours = pace_check(6.0, 4.0, 6.0, s)  # as fast as its chapter, half again its voice's own pace
    assert like_neighbours.verdict == "warning"
    assert like_neighbours.reason == ("too fast: 6.0 syllables/s against 4.0 for this voice's clips and 6.0 for the "
                                      "lines around it")
    rushed = pace_check(4.0, 4.0, 8.0, s)  # its voice's pace, half its neighbours'
    assert (rushed.verdict, rushed.reason.split(":")[0]) == ("failed", "too slow")
    assert pace_check(4.0, None, 4.2, s).verdict == "passed"
    assert pace_check(4.0, None, None, s).verdict == "skipped"


def test_the_best_take_has_fewest_failures_then_warnings_then_the_highest_score() -> None:
    takes = [(0, result("failed", "passed")), (1, None), (2, result("passed", "warning")),
             (3, result("passed", "warning", score=0.5)), (4, result("failed", "failed"))]
    assert best(takes) == 2
    assert best([(0, None)]) is None
    assert result("skipped").verdict == "skipped" and result("passed", "skipped").verdict == "passed"


def test_a_result_reads_back_equal_and_its_key_follows_the_thresholds() -> None:
    stored = TakeCheck((CheckResult("words", "failed", 0.5, 0.5, "missed “blue”"),
                        CheckResult("runaway", "skipped", 1.0, None, "frame limit unknown")), "abc")
    assert TakeCheck.from_json(stored.to_json()) == stored
    assert check_key(CheckSettings(), "tiny", "en") == check_key(CheckSettings(), "tiny", "en")
    assert check_key(CheckSettings(fade_fail_db=9.0), "tiny", "en") != check_key(CheckSettings(), "tiny", "en")
    assert check_key(CheckSettings(), "base", "en") != check_key(CheckSettings(), "tiny", "en")
    with pytest.raises(Exception, match="words_warn"):
        SETTINGS.parse({"words_warn": 7}, "checks")


# -- the checker's own process ------------------------------------------------------------------------------


def test_the_checker_process_answers_each_take_and_reports_one_it_cannot_check(tmp_path: Path) -> None:
    needs_checks_extra()
    from s2studio.checks.checker import CheckJob  # noqa: PLC0415
    from s2studio.checks.process import serve  # noqa: PLC0415

    ours, theirs = multiprocessing.get_context("spawn").Pipe()
    proc = multiprocessing.get_context("spawn").Process(
        target=serve, args=(theirs, CheckSettings(), AsrSettings("no-such-model")), daemon=True)
    proc.start()
    try:
        audio = faulty(LINE, "cut", MAX_FRAMES)
        ours.send(("check", CheckJob("t1", "l1", LINE, audio, SAMPLE_RATE, MAX_FRAMES)))
        ours.send(("check", CheckJob("t2", "l1", LINE, "not audio", SAMPLE_RATE, MAX_FRAMES)))
        assert ours.poll(120)
        kind, take_id, found = ours.recv()
        assert (kind, take_id) == ("done", "t1"), found
        assert found.of("end").verdict == "failed"
        assert found.of("words").verdict == "skipped" and "no-such-model" in found.of("words").reason
        assert ours.poll(60)
        kind, take_id, message = ours.recv()
        assert (kind, take_id) == ("failed", "t2") and message
        # the studio ending in the middle of a send leaves half a message: the process ends quietly
        ours.send_bytes(pickle.dumps(("check", CheckJob("t3", "l1", LINE, audio, SAMPLE_RATE, MAX_FRAMES)))[:40])
        ours.close()
        proc.join(30)
        assert proc.exitcode == 0
    finally:
        if proc.is_alive():
            proc.kill()


def test_the_voice_encoder_embeds_as_resemblyzer_does() -> None:
    """Our reading of Resemblyzer's network and front end against Resemblyzer's own `embed_utterance`, run in a
    separate environment where it imports (tests/voice_golden.py says how the golden was made)."""
    needs_checks_extra()
    from s2studio.checks.voice_encoder import VoiceEncoder  # noqa: PLC0415 - torch
    from voice_golden import voiced  # noqa: PLC0415

    reference = np.load(Path(__file__).parent / "golden" / "voice_encoder" / "resemblyzer.npy")
    encoder = VoiceEncoder()
    ours = np.stack([encoder.embed(voiced(3.0, 130.0, 0)), encoder.embed(voiced(5.0, 210.0, 1))])
    np.testing.assert_allclose(ours, reference, atol=1e-5)
    assert float(reference[0] @ reference[1]) < 0.9  # two different sounds: the comparison can fail
