"""A project's JSON read a piece at a time gives what `json.loads` gives, and json's own error for text it cannot
read."""

from __future__ import annotations

import json
import random

import pytest

from s2studio.state import json_steps


def random_value(rng: random.Random, depth: int) -> object:
    kinds = ["int", "float", "str", "bool", "none"] + (["list", "dict"] if depth < 4 else [])
    kind = rng.choice(kinds)
    if kind == "list":
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == "dict":
        return {rng.choice(["a", "é", "\"q\"", "l1", "\\", "日本", ""]) + str(i): random_value(rng, depth + 1)
                for i in range(rng.randrange(4))}
    return {"int": lambda: rng.randrange(-10**20, 10**20), "float": lambda: rng.uniform(-1e9, 1e9),
            "str": lambda: "".join(rng.choice("ab \n\t\"\\é😀{}[],:") for _ in range(rng.randrange(8))),
            "bool": lambda: rng.random() < 0.5, "none": lambda: None}[kind]()


@pytest.mark.parametrize("seed", range(40))
def test_what_is_read_equals_what_json_reads(seed: int) -> None:
    rng = random.Random(seed)
    value = random_value(rng, 0)
    for text in (json.dumps(value), json.dumps(value, indent=rng.choice([1, 2, "\t"]), ensure_ascii=False),
                 " \n" + json.dumps(value, separators=(",", ":")) + "\r\n "):
        for depth in (0, 1, 2, 5):
            assert json_steps.loads(text, depth) == json.loads(text)


@pytest.mark.parametrize("text", ['{"a": 1,}', '{"a" 1}', "[1, 2", '{"a": [1, 2}', "", "  ", '{"a": 1} x', "[1,,2]",
                                  '{1: 2}', '{"a": NaX}', '["\\x"]', '{"a": "\n"}', "[] []"])
def test_text_that_is_not_json_raises_jsons_own_error(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    with pytest.raises(json.JSONDecodeError) as raised:
        json_steps.loads(text)
    assert str(raised.value) == str(expected.value)


def test_each_row_of_a_books_lines_is_read_by_a_call_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between two calls into json's scanner the interpreter may run another thread: no call reads two rows."""
    rows = {f"l{i}": {"takes": [{"id": f"t{i}", "seconds": i / 7, "sizes": {"48": [1, 2, 3]}}], "picked": 0}
            for i in range(1000)}
    text = json.dumps({"format": 3, "script": "Ann: hi\n" * 100, "lines": rows, "line_ids": list(rows)}, indent=1)
    scanned: list[object] = []
    scan = json_steps._scan

    def counted(text: str, at: int) -> tuple[object, int]:
        value, end = scan(text, at)
        scanned.append(value)
        return value, end

    monkeypatch.setattr(json_steps, "_scan", counted)
    assert json_steps.loads(text) == json.loads(text)
    assert sum(1 for value in scanned if isinstance(value, dict)) == 1000  # each row, alone
    assert not [value for value in scanned if isinstance(value, dict) and "lines" in value]
