"""Takes spoken by espeak-ng, clean or with one of the faults S2's users know (a cut-off end, a fade, a skipped
word, a tag read aloud, a runaway of babble, another voice): what the take checks are tested and measured on
(tests/test_take_checks.py, bench/take_checks.py), and what `SpeakingEngine` speaks in the studio's tests."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from s2studio.audio import FRAME_SAMPLES, SAMPLE_RATE
from s2studio.audio.dsp import resample
from s2studio.engine.api import LineFinished, SynthesisRequest
from s2studio.engine.fake import FakeEngine
from s2studio.state.tags import find_tags

VOICE = "en-us"
OTHER_VOICE = "en-us+f3"
"""espeak-ng's female variant: what "a wrong voice" sounds like to the voice check."""
CLIP_TEXTS = ("The old lighthouse stood at the edge of the cliff for more than a hundred years.",
              "In the spring the village held a market in the square beside the church.")
FAULTS = ("clean", "cut", "fade", "skip", "tag", "runaway", "voice")

LINES = (
    "The weather was calm this morning, so we walked along the river to the old stone bridge.",
    "Please bring the blue folder from my desk before the meeting starts.",
    "She painted the kitchen yellow and hung new curtains by the window.",
    "Our train was delayed by twenty minutes because of snow on the tracks.",
    "He forgot his umbrella at the station and came home soaking wet.",
    "The children built a castle of sand and decorated it with shells.",
    "A small boat drifted slowly across the lake in the evening light.",
    "The library closes early on Fridays, so return your books by noon.",
    "My grandmother keeps a garden full of roses, mint and tomatoes.",
    "The engineer checked every cable twice before switching on the machine.",
    "We could hear the sea from our room, even with the windows closed.",
    "The baker opens his shop at six and sells out of bread by ten.",
    "A strange noise came from the attic, but it was only the wind.",
    "They planted forty young trees along the road to the school.",
    "The museum shows old maps, coins and letters from sailors.",
    "After dinner we played cards and told stories until midnight.",
    "The doctor asked me to drink more water and sleep a little longer.",
    "Thick fog covered the valley, and the mountains disappeared from view.",
    "The cat jumped onto the table and knocked over a glass of milk.",
    "Every winter the pond freezes and the whole town goes skating.",
    "The pilot announced that we would land in about fifteen minutes.",
    "My brother repairs old bicycles in the garage behind our house.",
    "The teacher wrote three questions on the board and waited quietly.",
    "A family of ducks crossed the street while the traffic stopped.",
    "The concert began late, but the orchestra played beautifully.",
    "We packed sandwiches, apples and cold tea for the long walk.",
    "The old clock in the hall strikes twelve every night at midnight.",
    "Heavy rain flooded the cellar and ruined several boxes of photographs.",
    "The market sells fresh fish, spices and colourful silk scarves.",
    "She practised the piano every afternoon for almost an hour.",
    "The farmer counted his sheep twice and found that one was missing.",
    "Bright lanterns hung above the square during the summer festival.",
    "The bus driver waited patiently while an old man climbed aboard.",
    "Our neighbours invited us to a barbecue in their back garden.",
    "The river rose quickly after the storm and covered the path.",
    "He wrote a long letter to his sister who lives across the ocean.",
    "The mountain hut had a warm stove and a shelf full of books.",
    "A gentle breeze carried the smell of pine trees through the camp.",
    "The students visited a factory where chocolate is made by hand.",
    "My phone battery died just before the taxi arrived at the hotel.",
    "The gardener trimmed the hedges and swept the leaves from the path.",
    "At the end of the street there is a bakery with a red door.",
    "The captain ordered the crew to lower the sails before the storm.",
    "We watched the sunset from the hill behind the little chapel.",
    "The shop on the corner repairs watches, radios and old cameras.",
    "She found a golden key hidden under a loose stone in the wall.",
    "The festival ended with fireworks over the harbour at midnight.",
    "His dog waits by the gate every evening until he comes home.",
    "The soup needed more salt, so the cook added a pinch of pepper too.",
    "A quiet village lies at the foot of the mountain near the lake.",
)
"""Fifty clean lines for the false-alarm figure (bench/take_checks.py)."""


def espeak_exe() -> str:
    exe = shutil.which("espeak-ng")
    if exe is None:
        pytest.skip("espeak-ng is not installed (scripts/setup installs it: apt-get install espeak-ng)")
    return exe


def speak(text: str, voice: str = VOICE, words_per_minute: int = 160) -> np.ndarray:
    """`text` spoken by espeak-ng, at the studio's rate (44.1 kHz mono float32)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "take.wav"
        subprocess.run([espeak_exe(), "-v", voice, "-s", str(words_per_minute), "-w", str(path), text], check=True,
                       capture_output=True)
        data, rate = sf.read(str(path), dtype="float32")
    return resample(data, rate, SAMPLE_RATE).astype(np.float32)


def spoken_text(line: str) -> str:
    """What espeak says for a clean take: the line without its tags."""
    tags, _ = find_tags(line)
    out, at = "", 0
    for tag in tags:
        out += line[at:tag.start]
        at = tag.end
    return " ".join((out + line[at:]).split())


def skipped_word(line: str) -> str:
    """The word a "skip" take leaves out: the longest word of the second half."""
    words = spoken_text(line).split()
    return max(words[len(words) // 2:], key=lambda w: len(w.strip(",.")))


def faulty(line: str, fault: str, max_frames: int = 256) -> np.ndarray:
    """A take of `line` with `fault` (one of FAULTS)."""
    text = spoken_text(line)
    if fault == "skip":
        words = text.split()
        gone = skipped_word(line)
        words.remove(gone)
        return speak(" ".join(words))
    if fault == "tag":  # the tags' words spoken where they stand
        return speak(" ".join(line.replace("[", " ").replace("]", " ").split()))
    if fault == "voice":
        return speak(text, OTHER_VOICE)
    audio = speak(text)
    if fault == "clean":
        return audio
    if fault == "cut":  # stopped in the middle of a word, about two thirds in
        loud = np.flatnonzero(np.abs(audio) > 0.05 * np.abs(audio).max())
        at = int(loud[0] + 0.68 * (loud[-1] - loud[0]))
        window = np.abs(audio[at:at + 2048])
        return audio[:at + int(np.argmax(window)) + 1].copy()
    if fault == "fade":  # 12 dB quieter by the end, evenly in dB
        return (audio * 10 ** (np.linspace(0.0, -12.0, len(audio)) / 20)).astype(np.float32)
    if fault == "runaway":  # the line, then babble to the frame limit
        babble = speak("and then the and of the the river river bridge and so the and of", words_per_minute=190)
        parts, total = [audio], len(audio)
        while total < max_frames * FRAME_SAMPLES:
            parts.append(babble)
            total += len(babble)
        return np.concatenate(parts)[:(max_frames - 1) * FRAME_SAMPLES].astype(np.float32)
    raise ValueError(fault)


def write_clips(folder: Path, voice: str = VOICE) -> list[tuple[Path, str]]:
    """The voice's reference clips as FLAC files, with their transcripts."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, text in enumerate(CLIP_TEXTS):
        path = folder / f"clip{i}.flac"
        sf.write(str(path), speak(text, voice), SAMPLE_RATE)
        out.append((path, text))
    return out


@dataclass
class SpeakingEngine(FakeEngine):
    """The fake engine's events and timing, with takes spoken by espeak-ng: `fault(line_id, attempt)` says what
    is wrong with each take (attempts of a line count from 0). Codes stay the fake engine's."""

    fault: Callable[[str, int], str] = lambda _line, _attempt: "clean"
    attempts: dict[str, int] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)

    def stream(self, request: SynthesisRequest, cancel):  # noqa: ANN001, ANN201 - the batching engine's job
        self.texts.update({ln.line_id: ln.text for ln in request.lines})
        for event in super().stream(request, cancel):
            if isinstance(event, LineFinished):
                attempt = self.attempts.get(event.line_id, 0)
                self.attempts[event.line_id] = attempt + 1
                audio = faulty(self.texts[event.line_id], self.fault(event.line_id, attempt),
                               request.sampling.max_frames or 256)
                frames = max(1, len(audio) // FRAME_SAMPLES)  # whole frames, as the codec gives them
                audio = np.pad(audio, (0, max(0, frames * FRAME_SAMPLES - len(audio))))[:frames * FRAME_SAMPLES]
                codes = np.resize(event.codes, (event.codes.shape[0], frames))
                event = LineFinished(event.job_id, event.line_id, event.take_id, codes, audio, event.seed,
                                     event.fingerprint)
            yield event
