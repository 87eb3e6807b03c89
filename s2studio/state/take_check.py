"""What the automatic checks found in one take (design.md §6 "Checked takes"): a verdict per check with its
score and its reason in words, and what the whole take comes to. Pure Python: the project keeps it with the take
(`Take.check`, the `check` row of project.json), the studio shows it, the command line prints it.

A result records the `key` of what made it (the checker's version, its thresholds and the speech-recognition
model, `checks.settings.check_key`): a result whose key is not today's is still shown (marked as made with other
settings) until the take is checked again, so nothing is silently lost when a threshold changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Verdict = Literal["passed", "warning", "failed", "skipped"]
VERDICTS: tuple[Verdict, ...] = ("passed", "warning", "failed", "skipped")
"""skipped: the check could not run on this take (no speech-recognition model, a voice without clips); it counts
for nothing."""
MARKS = {"passed": "✓", "warning": "!", "failed": "✗", "skipped": "–"}


@dataclass(frozen=True)
class CheckResult:
    """One check of one take."""

    name: str
    """words, pace, fade, end, runaway, silence, clipping or voice."""
    verdict: Verdict
    score: float
    """How good the take is on this check, 0 (as bad as it gets) to 1 (nothing to find)."""
    value: float | None
    """What was measured, in the check's unit (word error rate, syllables per second, dB, similarity)."""
    reason: str
    """In words, what was found ("missed “river”", "the last third is 9.1 dB quieter than the first")."""


@dataclass(frozen=True)
class TakeCheck:
    """Every check of one take, and the `key` of the checker that made them."""

    checks: tuple[CheckResult, ...]
    key: str

    @property
    def verdict(self) -> Verdict:
        """The worst verdict of the checks that ran ("skipped" when none ran)."""
        ran = [c.verdict for c in self.checks if c.verdict != "skipped"]
        for worst in ("failed", "warning", "passed"):
            if worst in ran:
                return worst  # type: ignore[return-value]
        return "skipped"

    def of(self, name: str) -> CheckResult | None:
        return next((c for c in self.checks if c.name == name), None)

    def problems(self) -> list[CheckResult]:
        """The checks that failed, then those that warned."""
        return [c for c in self.checks if c.verdict == "failed"] + [c for c in self.checks if c.verdict == "warning"]

    def summary(self) -> str:
        """One line: "passed every check", or the reasons of what failed and warned ("failed: words (missed …)")."""
        failed = [c for c in self.checks if c.verdict == "failed"]
        warned = [c for c in self.checks if c.verdict == "warning"]
        parts = []
        if failed:
            parts.append("failed: " + "; ".join(f"{c.name} ({c.reason})" for c in failed))
        if warned:
            parts.append("warning: " + "; ".join(f"{c.name} ({c.reason})" for c in warned))
        if parts:
            return " — ".join(parts)
        return "passed every check" if self.verdict == "passed" else "not checked: " + "; ".join(
            c.reason for c in self.checks if c.reason)

    def rank(self) -> tuple[int, int, float]:
        """Sorts the best take first: fewer failed checks, then fewer warnings, then the higher mean score."""
        failed = sum(c.verdict == "failed" for c in self.checks)
        warned = sum(c.verdict == "warning" for c in self.checks)
        scores = [c.score for c in self.checks if c.verdict != "skipped"]
        return (failed, warned, -(sum(scores) / len(scores)) if scores else 0.0)

    # -- the project file's form ---------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "checks": [{"name": c.name, "verdict": c.verdict, "score": c.score,
                                             "value": c.value, "reason": c.reason} for c in self.checks]}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> TakeCheck:
        """From `to_json`'s form, already validated (`project_document.CHECK`)."""
        return cls(tuple(CheckResult(str(c["name"]), c["verdict"], float(c["score"]),
                                     None if c.get("value") is None else float(c["value"]), str(c["reason"]))
                         for c in raw["checks"]), str(raw["key"]))


def best(checked: Iterable[tuple[int, TakeCheck | None]]) -> int | None:
    """Of (index, check) pairs, the index of the best checked take (the first of equals); None when none is."""
    ranked = [(check.rank(), index) for index, check in checked if check is not None]
    return min(ranked)[1] if ranked else None
