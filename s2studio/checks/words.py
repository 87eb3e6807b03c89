"""The "words" check: what the take says against what the line says.

Both texts are put in one form first: the line without its `[tags]`, lower case, without punctuation, numbers
written out in words (num2words, in the language the recognizer heard), so "42" and "forty-two" are the same
words. `align` pairs the two word lists (which words were missed, added or replaced, and the error rate), a
substitution costing less the more alike the words are spelled (rapidfuzz measures it).

A recognizer mishears (the tests' tiny.en turns espeak's "sandwiches" into "sand which is"), so a word the
transcript got wrong is asked about once more: Whisper is told the line and says how sure it is of each of its
words in the audio (`audio.asr.word_probabilities`). A word it finds there (probability at least `SURE`) is the
recognizer's doubt and counts a quarter, as does a word heard spelled nearly alike ("colorful" for "colourful",
"radio" for "radios": the recognizer's spelling); any other word heard wrong is an error. A word of the line that
carries meaning, with nothing heard in its place and not in the audio, is missed, and fails whatever the rate, as
do a tag's words in the transcript ("reads the tag aloud") or a run of three added words: those are a speech
model's faults. Something heard in a word's place is a mishearing, however unsure Whisper is of the word (on
clean espeak takes tiny.en hears "most" for "bus", at a probability as low as a skipped word's); a word with
nothing in its place that Whisper still finds in the audio (at least `ABSENT`) is "not heard", an error but no
proof the take skipped it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from s2studio.checks.settings import CheckSettings
from s2studio.state.tags import find_tags, without_tags
from s2studio.state.take_check import CheckResult

LIGHT_WORDS = frozenset(
    "a an the of to and or in on at by for with from as is are was were be been it its it's this that these those "
    "i you he she we they me him her us them my your his our their so but if then than do does did not no yes oh "
    "ah uh um".split())
"""Short words a recognizer drops on its own: missing one of them is not proof the take skipped it."""
ADDED_RUN = 3
"""Added words in a row that fail the check (a speech model babbling or repeating a phrase)."""
SURE = 0.1
"""Whisper's probability of a word of the line, told the line, above which the word is in the audio."""
ABSENT = 0.003
"""Below this the word is not in the audio: missed, whatever the transcript made of it (espeak's words that were
left out score under 0.0005 with the tests' tiny.en; words it said but tiny.en misheard, 0.007 and up)."""
NEAR = 0.8
"""Spelling similarity (Levenshtein, normalised) at which a word heard for the line's word is its spelling, not
another word: one letter in five."""
ALIKE_DISCOUNT = 0.6
"""How much cheaper aligning two words is the more alike they are spelled (0: not at all)."""
DOUBT_WEIGHT = 0.25
"""What a word the transcript got wrong but the audio holds counts, as an error."""
ADDED_WEIGHT = 0.5
"""An added word outside a run: often a word the recognizer split in two ("sand which" for "sandwiches")."""

Support = Callable[[], Sequence[float | None]]
"""Asked only when the transcript differs from the line: how sure Whisper is of each of the line's normalised
words in the audio (None where it cannot tell)."""


@dataclass(frozen=True)
class WordDiff:
    """The alignment of a transcript against a line, in its normalised words."""

    reference: tuple[str, ...]
    heard: tuple[str, ...]
    missed: tuple[str, ...]
    """Words of the line neither heard nor found in the audio."""
    added: tuple[tuple[str, ...], ...]
    """Runs of added words."""
    replaced: tuple[tuple[str, str], ...]
    """(the line's word, what was heard instead) where the audio does not hold the line's word."""
    doubted: tuple[tuple[str, str], ...]
    """(the line's word, what was heard, "" when nothing) where the audio holds the line's word, or what was heard
    is spelled nearly alike: misheard."""
    tag_words: tuple[str, ...]
    """What was heard of the line's tags: their words anywhere, or any words where a tag stands."""
    unheard: tuple[str, ...] = ()
    """Words of the line with nothing heard in their place that Whisper finds in the audio, unsure."""

    @property
    def error_rate(self) -> float:
        """Errors per word of the line: missed and replaced words 1, doubted ones `DOUBT_WEIGHT`, added ones
        `ADDED_WEIGHT` (1 in a run of `ADDED_RUN`)."""
        added = sum(len(r) * (1.0 if len(r) >= ADDED_RUN else ADDED_WEIGHT) for r in self.added)
        errors = (len(self.missed) + len(self.replaced) + len(self.unheard) + DOUBT_WEIGHT * len(self.doubted)
                  + added)
        return errors / max(len(self.reference), 1)


def _number_words(token: str, lang: str) -> str:
    from num2words import num2words  # noqa: PLC0415 - the checks extra

    try:
        if re.fullmatch(r"\d+(st|nd|rd|th)", token):
            return num2words(int(token[:-2]), lang=lang, to="ordinal")
        if re.fullmatch(r"1[1-9]\d\d|20\d\d", token):
            return num2words(int(token), lang=lang, to="year")
        return num2words(float(token) if "." in token else int(token), lang=lang)
    except (NotImplementedError, OverflowError, ValueError):
        return token if lang == "en" else _number_words(token, "en")


def normalise(text: str, lang: str = "en") -> list[str]:
    """`text` as words to compare: tags out, lower case, numbers in words, no punctuation or apostrophes."""
    text = unicodedata.normalize("NFKC", without_tags(text)).lower()
    text = re.sub(r"(?<=\d),(?=\d{3})", "", text)  # 10,000 -> 10000
    text = re.sub(r"\d+(?:\.\d+)?(?:st|nd|rd|th)?", lambda m: f" {_number_words(m.group(), lang)} ", text)
    text = text.replace("&", " and ").replace("'", "").replace("’", "")
    return re.findall(r"[^\W_]+", text)


def tag_words(text: str) -> tuple[set[str], set[int]]:
    """The words of the line's tags ("whispering" of [whispering]; short ones left out), and where the tags stand
    among the line's normalised words (the index of the word after each)."""
    tags, _ = find_tags(text)
    words = {w for t in tags for w in normalise(t.name) if len(w) > 2 and w not in LIGHT_WORDS}
    return words, {len(normalise(text[:t.start])) for t in tags}


def similarity(a: str, b: str) -> float:
    from rapidfuzz.distance import Levenshtein  # noqa: PLC0415 - the checks extra

    return Levenshtein.normalized_similarity(a, b)


def align(reference: Sequence[str], heard: Sequence[str]) -> list[tuple[str, int, int]]:
    """The cheapest edit of `reference` into `heard`, as (op, reference index, heard index) with op "equal",
    "substitute", "delete" or "insert". A substitution costs less the more alike the two words are spelled, so
    "meeting starts" against "the stars" pairs "starts" with "stars" and leaves "meeting" out."""
    n, m = len(reference), len(heard)
    cost = np.zeros((n + 1, m + 1))
    cost[:, 0], cost[0, :] = np.arange(n + 1), np.arange(m + 1)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            r, h = reference[i - 1], heard[j - 1]
            step = 0.0 if r == h else 1.0 - ALIKE_DISCOUNT * similarity(r, h)
            cost[i, j] = min(cost[i - 1, j - 1] + step, cost[i - 1, j] + 1, cost[i, j - 1] + 1)
    ops: list[tuple[str, int, int]] = []
    i, j = n, m
    while i or j:
        r, h = (reference[i - 1] if i else ""), (heard[j - 1] if j else "")
        step = 0.0 if r == h else 1.0 - ALIKE_DISCOUNT * similarity(r, h)
        if i and j and np.isclose(cost[i, j], cost[i - 1, j - 1] + step):
            ops.append(("equal" if r == h else "substitute", i - 1, j - 1))
            i, j = i - 1, j - 1
        elif i and np.isclose(cost[i, j], cost[i - 1, j] + 1):
            ops.append(("delete", i - 1, j))
            i -= 1
        else:
            ops.append(("insert", i, j - 1))
            j -= 1
    return ops[::-1]


def compare(line: str, transcript: str, lang: str = "en", support: Support | None = None) -> WordDiff:
    reference, heard = normalise(line, lang), normalise(transcript, lang)
    tags, places = tag_words(line)
    tags -= set(reference)
    if not reference or not heard:
        return WordDiff(tuple(reference), tuple(heard), tuple(reference), (tuple(heard),) if heard else (), (), (),
                        tuple(w for w in heard if _is_tag(w, tags)))
    ops = align(reference, heard)
    sure: Sequence[float | None] = [None] * len(reference)
    if support is not None and any(op in ("delete", "substitute") for op, _, _ in ops):
        found = list(support())
        sure = found if len(found) == len(reference) else sure
    missed: list[str] = []
    added: list[tuple[str, ...]] = []
    replaced: list[tuple[str, str]] = []
    doubted: list[tuple[str, str]] = []
    unheard: list[str] = []
    found_tags: list[str] = []
    run: list[str] = []
    for k, (op, i, j) in enumerate(ops):
        if op == "insert":
            h = heard[j]
            if i in places or _is_tag(h, tags):  # words where a tag stands: the tag, however it was heard
                found_tags.append(h)
            else:
                run.append(h)
            if run and (k + 1 == len(ops) or ops[k + 1][0] != "insert"):
                added.append(tuple(run))
                run = []
            continue
        if op == "equal":
            continue
        r, h = reference[i], heard[j] if op == "substitute" else ""
        p = sure[i]
        if h and _is_tag(h, tags):
            found_tags.append(h)
            h = ""
        if p is not None and p >= SURE or h and similarity(r, h) >= NEAR:
            doubted.append((r, h))
        elif h:
            replaced.append((r, h))
        elif p is None or p < ABSENT:
            missed.append(r)
        else:
            unheard.append(r)
    return WordDiff(tuple(reference), tuple(heard), tuple(missed), tuple(added), tuple(replaced), tuple(doubted),
                    tuple(dict.fromkeys(found_tags)), tuple(unheard))


def support_of(words: Sequence[tuple[str, float]], reference: Sequence[str], lang: str) -> list[float | None]:
    """Whisper's word probabilities (its own words, punctuation apart) as one per normalised word of the line
    ([] when they do not line up)."""
    out: list[float | None] = []
    for word, probability in words:
        out += [probability] * len(normalise(word, lang))
    return out if len(out) == len(reference) else []


def _is_tag(word: str, tags: set[str]) -> bool:
    return any(word == t or (len(word) > 3 and similarity(word, t) >= 0.8) for t in tags)


def _quoted(words: Sequence[str]) -> str:
    return ", ".join(f"“{w}”" for w in words)


def words_check(line: str, transcript: str, lang: str, settings: CheckSettings,
                support: Support | None = None) -> CheckResult:
    """The verdict on a take whose speech was transcribed as `transcript`."""
    diff = compare(line, transcript, lang, support)
    rate = diff.error_rate
    heavy_missed = [w for w in diff.missed if w not in LIGHT_WORDS]
    runs = [r for r in diff.added if len(r) >= ADDED_RUN]
    reasons = []
    if diff.tag_words:
        reasons.append(f"reads the tag aloud ({_quoted(diff.tag_words)})")
    if diff.missed:
        reasons.append(f"missed {_quoted(diff.missed)}")
    if diff.added:
        reasons.append(f"added {_quoted([' '.join(r) for r in diff.added])}")
    if diff.replaced:
        reasons.append("replaced " + ", ".join(f"“{r}” with “{h}”" for r, h in diff.replaced))
    if diff.unheard:
        reasons.append("not heard " + _quoted(diff.unheard))
    if diff.doubted:
        reasons.append("unclear " + _quoted([r for r, _ in diff.doubted]))
    if not diff.heard:
        reasons = ["no words heard"]
    failed = bool(diff.tag_words or heavy_missed or runs or not diff.heard) or rate > settings.words_fail
    verdict = "failed" if failed else "warning" if rate > settings.words_warn else "passed"
    reason = "; ".join(reasons) if reasons else "every word as written"
    if reasons:
        reason += f" (word error rate {rate:.0%}, heard “{transcript.strip()[:200]}”)"
    return CheckResult("words", verdict, max(0.0, 1.0 - rate), round(rate, 4), reason)
