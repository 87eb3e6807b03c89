"""A session's changes to a project's takes, at random: takes made, picked, deleted, brought back by Undo and
checked, through the project's own methods (the property tests of captures and saves)."""

from __future__ import annotations

import random
from collections.abc import Callable

from s2studio.state.project import Project, Take
from s2studio.state.take_check import CheckResult, TakeCheck


class RandomChanges:
    """`step(project)`: one change to a line among the first `lines`; `make(take_id, line_id)` makes a new take.
    `checks`: some changes are check results (`Project.touch`), else none are."""

    def __init__(self, seed: int, lines: int, make: Callable[[str, str], Take], checks: bool = False) -> None:
        self.rng = random.Random(seed)
        self.lines, self.make, self.checks = lines, make, checks
        self.made = 0
        self.deleted: list[tuple[Take, int, bool]] = []

    def step(self, project: Project, round_: int = 0) -> None:
        rng = self.rng
        line_id = f"l{rng.randrange(self.lines)}"
        entry = project.lines.get(line_id)
        what = rng.random()
        if entry is None or what < 0.35:
            self.made += 1
            project.add_take(self.make(f"n{self.made:05d}", line_id), pick=rng.random() < 0.5)
        elif what < 0.5:
            project.pick(line_id, rng.randrange(len(entry.takes)))
        elif what < 0.7:
            gone = rng.choice(entry.takes)
            self.deleted.append((gone, project.delete_take(line_id, gone.take_id), rng.random() < 0.5))
        elif what < 0.85 or not self.checks:
            if self.deleted:
                project.restore_take(*self.deleted.pop())
        else:
            take = rng.choice(entry.takes)
            take.check = TakeCheck((CheckResult("words", rng.choice(["passed", "failed"]), 1.0, 0.0, ""),),
                                   f"k{round_}")
            project.touch(take)

    def round(self, project: Project, most: int, round_: int) -> None:
        """Up to `most` changes."""
        for _ in range(self.rng.randint(0, most)):
            self.step(project, round_)
