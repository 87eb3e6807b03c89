"""The take checks on espeak-ng speech: what they cost per second of audio on this CPU, how often they fail a
clean take (false alarms), and how often they catch each fault.

    .venv/bin/python bench/take_checks.py [--asr MODEL] [--clean 50] [--faulty 10] [--threads 1]

Clean takes are the 50 lines of tests/spoken_takes.py spoken by espeak-ng's en-us voice, checked against two clips
of the same voice; each faulty take is one of those lines with one fault (a cut-off end, a 12 dB fade, a skipped
word, a tag read aloud, a runaway of babble to the frame limit, another voice). The speech-recognition model is
the tests' tiny.en unless `--asr` names another (a size on this computer or a folder). The cost is the checker's
wall time per second of take audio, the models loaded beforehand (each take's transcript is made afresh: the
transcript cache is a temporary folder), with the checker's threads as the studio runs them (one). A script, not
a test: the figures vary by machine and load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--asr", default=None, help="speech-recognition model (default: the tests' tiny.en)")
    parser.add_argument("--clean", type=int, default=50, help="clean takes (default 50)")
    parser.add_argument("--faulty", type=int, default=10, help="lines given each fault (default 10)")
    parser.add_argument("--threads", type=int, default=1, help="threads for the checker (default 1, as the studio)")
    args = parser.parse_args()
    cache = tempfile.mkdtemp(prefix="take-checks-")
    os.environ["XDG_CACHE_HOME"] = cache  # no transcript from an earlier run
    os.environ["OMP_NUM_THREADS"] = str(args.threads)

    from s2studio.audio import SAMPLE_RATE
    from s2studio.audio.asr import AsrSettings
    from s2studio.checks.checker import Checker, CheckJob, Clip
    from s2studio.checks.process import limit_threads
    from speech import tiny_model
    from spoken_takes import FAULTS, LINES, faulty, skipped_word, write_clips

    limit_threads(args.threads)
    model = args.asr or str(tiny_model())
    clips = tuple(Clip(str(p), t) for p, t in write_clips(Path(cache) / "clips"))
    checker = Checker(asr=AsrSettings(model))
    t0 = time.perf_counter()
    checker.check(CheckJob("warm", "warm", LINES[0], faulty(LINES[0], "clean"), SAMPLE_RATE, 256, clips))
    print(f"models loaded and the voice's clips measured in {time.perf_counter() - t0:.1f} s "
          f"(speech recognition: {model}; load average {os.getloadavg()[0]:.1f})")

    def check(text: str, fault: str):  # noqa: ANN202
        audio = faulty(text, fault, 256)
        start = time.perf_counter()
        result = checker.check(CheckJob("t", "l", text, audio, SAMPLE_RATE, 256, clips))
        return result, time.perf_counter() - start, len(audio) / SAMPLE_RATE

    spent = audio_s = 0.0
    per_second: list[float] = []
    alarms, warned = [], 0
    for line in LINES[:args.clean]:
        result, seconds, length = check(line, "clean")
        spent, audio_s = spent + seconds, audio_s + length
        per_second.append(seconds / length)
        warned += result.verdict == "warning"
        if result.verdict == "failed":
            alarms.append((line, result.summary()))
    n = min(args.clean, len(LINES))
    print(f"cost: {spent / audio_s:.3f} s per second of audio over {audio_s:.0f} s of clean takes "
          f"(median take {statistics.median(per_second):.3f}, slowest {max(per_second):.3f}; "
          f"load average {os.getloadavg()[0]:.1f})")
    print(f"false alarms: {len(alarms)} of {n} clean takes failed a check, {warned} warned")
    for line, summary in alarms:
        print(f"  {line}\n    {summary}")
    expected = {"cut": "end", "fade": "fade", "skip": "words", "tag": "words", "runaway": "runaway", "voice": "voice"}
    for fault in FAULTS[1:]:
        caught, missed = 0, []
        for line in LINES[:args.faulty]:
            text = "[whispering] " + line if fault == "tag" else line
            result, _, _ = check(text, fault)
            check_of = result.of(expected[fault])
            hit = check_of is not None and check_of.verdict == "failed"
            if fault == "skip":
                hit = hit and f"“{skipped_word(line).strip(',.').lower()}”" in check_of.reason
            if fault == "tag":
                hit = hit and "reads the tag aloud" in check_of.reason
            caught += hit
            if not hit:
                missed.append(f"  {line}\n    {check_of.reason if check_of else '(not checked)'}")
        print(f"{fault}: caught {caught} of {min(args.faulty, len(LINES))} by the {expected[fault]} check")
        for entry in missed:
            print(entry)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
