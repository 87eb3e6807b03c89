"""A small declarative validator for the JSON documents S2 Studio reads back (project.json, settings).

A document may have been edited by hand or crafted by someone else, so every value is checked before
anything is built from it, and the first problem is one `SchemaError` naming the field the way a person
would look for it: `lines.l3fa….takes[2].seed must be an integer, got "abc"`. A document is described
once, as data:

    TAKE = Record({"take_id": Field(Text(pattern=TAKE_ID)), "seed": Field(Integer(), default=0)})

Adding a field is one line; a field with a `default` may be missing (files written before it existed).
Keys a record does not know are ignored, so a file written by a newer release of the same format opens.
Each kind also turns a value back into JSON (`dump`), so reading and writing share one description.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Union

from s2studio.errors import UserError, printable

REQUIRED: Any = object()
"""`Field.default` of a field that must be present."""
_ABSENT: Any = object()
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


Place = Union[str, tuple]
"""Where a value is in a document: "" for the document itself, else (parent place, key) or (parent place, key,
note), put into words (`place_text`: `lines.l3fa….takes[2].seed`) only when an error names it (a book's
document has 100,000 places; a valid one names none, and a tuple is much cheaper to make than an object)."""


class SchemaError(UserError, ValueError):
    """`where` (a dotted path into the document) holds something else than `expected`."""

    def __init__(self, where: Place, problem: str) -> None:
        where = place_text(where)
        super().__init__(f"{where} {problem}")
        self.where, self.problem = where, problem


def shown(value: Any) -> str:
    """A JSON value as it would appear in the file, shortened: `"abc"`, `12`, `a list`, `an object`."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    if value is None:
        return "null"
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, float) or math.isfinite(value) \
        else str(value)
    return printable(text, 40)


def place_text(place: Place) -> str:
    """A place as a person would look for it: `lines.l3fa….takes[2].seed`, `cast["Dr. Who"] (a key)`."""
    steps = []
    while not isinstance(place, str):
        steps.append(place)
        place = place[0]
    text = place
    for step in reversed(steps):
        key, note = step[1], step[2] if len(step) > 2 else ""
        if isinstance(key, int):
            text = f"{text}[{key}]"
        else:
            plain = _PLAIN_KEY.match(key)
            name = key if plain else f'"{printable(key, 40)}"'
            text = name if not text else f"{text}.{name}" if plain else f"{text}[{name}]"
        text += note
    return text


def child(where: Place, key: str | int) -> Place:
    return (where, key)


class Kind:
    """What a value must be. `parse` returns the checked Python value; `dump` its JSON form."""

    what = "a value"

    def parse(self, raw: Any, where: Place) -> Any:
        raise NotImplementedError

    def dump(self, value: Any) -> Any:
        return value

    def fail(self, raw: Any, where: Place, expected: str | None = None) -> SchemaError:
        return SchemaError(where, f"must be {expected or self.what}, got {shown(raw)}")


@dataclass(frozen=True)
class Integer(Kind):
    lo: int | None = None
    hi: int | None = None
    what: str = "an integer"

    def parse(self, raw: Any, where: Place) -> int:
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise self.fail(raw, where)
        if (self.lo is not None and raw < self.lo) or (self.hi is not None and raw > self.hi):
            raise self.fail(raw, where, _between(self.lo, self.hi))
        return raw


@dataclass(frozen=True)
class Number(Kind):
    """A finite number (JSON has no NaN or infinity, but Python's reader accepts them)."""

    lo: float | None = None
    hi: float | None = None
    what: str = "a number"

    def parse(self, raw: Any, where: Place) -> float:
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise self.fail(raw, where)
        value = float(raw)
        if not math.isfinite(value):
            raise self.fail(raw, where, "a finite number")
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            raise self.fail(raw, where, _between(self.lo, self.hi))
        return value


def _between(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f"between {lo} and {hi}"
    return f"at least {lo}" if lo is not None else f"at most {hi}"


@dataclass(frozen=True)
class Boolean(Kind):
    what: str = "true or false"

    def parse(self, raw: Any, where: Place) -> bool:
        if not isinstance(raw, bool):
            raise self.fail(raw, where)
        return raw


@dataclass(frozen=True)
class Text(Kind):
    pattern: re.Pattern[str] | None = None
    max_chars: int = 10_000_000
    what: str = "text"

    def parse(self, raw: Any, where: Place) -> str:
        if not isinstance(raw, str):
            raise self.fail(raw, where)
        if self.pattern is not None and not self.pattern.match(raw):
            raise self.fail(raw, where)
        if len(raw) > self.max_chars:
            raise SchemaError(where, f"is {len(raw)} characters long; at most {self.max_chars} are allowed")
        return raw


@dataclass(frozen=True)
class Timestamp(Kind):
    """ISO 8601 date and time as text (`2025-01-31T12:00:00+00:00`)."""

    what: str = "an ISO 8601 date and time"

    def parse(self, raw: Any, where: Place) -> str:
        if not isinstance(raw, str) or len(raw) > 40:
            raise self.fail(raw, where)
        try:
            datetime.fromisoformat(raw)
        except ValueError:
            raise self.fail(raw, where) from None
        return raw


@dataclass(frozen=True)
class Choice(Kind):
    values: tuple[Any, ...] = ()

    @property
    def what(self) -> str:  # type: ignore[override]
        return "one of " + ", ".join(json.dumps(v) for v in self.values)

    def parse(self, raw: Any, where: Place) -> Any:
        if isinstance(raw, (list, dict)) or raw not in self.values or isinstance(raw, bool):
            raise self.fail(raw, where)
        return raw


@dataclass(frozen=True)
class ListOf(Kind):
    item: Kind = field(default_factory=Kind)
    max_items: int = 1_000_000
    what: str = "a list"

    def parse(self, raw: Any, where: Place) -> list[Any]:
        if not isinstance(raw, list):
            raise self.fail(raw, where)
        if len(raw) > self.max_items:
            raise SchemaError(where, f"has {len(raw)} entries; at most {self.max_items} are allowed")
        item = self.item.parse
        return [item(v, (where, i)) for i, v in enumerate(raw)]

    def dump(self, value: Any) -> Any:
        return [self.item.dump(v) for v in value]


@dataclass(frozen=True)
class MapOf(Kind):
    """An object whose keys are names the document chose (line ids, speakers)."""

    value: Kind = field(default_factory=Kind)
    key: Text = field(default_factory=lambda: Text(max_chars=200))
    max_items: int = 1_000_000
    what: str = "an object"

    def parse(self, raw: Any, where: Place) -> dict[str, Any]:
        if not isinstance(raw, dict):
            raise self.fail(raw, where)
        if len(raw) > self.max_items:
            raise SchemaError(where, f"has {len(raw)} entries; at most {self.max_items} are allowed")
        out = {}
        key, value = self.key.parse, self.value.parse
        for k, v in raw.items():
            key(k, (where, k, " (a key)"))
            out[k] = value(v, (where, k))
        return out

    def dump(self, value: Any) -> Any:
        return {k: self.value.dump(v) for k, v in value.items()}


@dataclass(frozen=True)
class Field:
    kind: Kind
    default: Any = REQUIRED
    """Used when the key is missing; a callable (e.g. `dict`) is called for a fresh value."""


@dataclass(frozen=True)
class Record(Kind):
    """An object with known fields; the parsed value is a dict holding every field."""

    fields: Mapping[str, Field] = field(default_factory=dict)
    what: str = "an object"

    def __post_init__(self) -> None:  # each field's parse and default, looked up once (a book has 10,000 rows)
        steps = tuple((name, f.kind.parse, f.default, callable(f.default)) for name, f in self.fields.items())
        object.__setattr__(self, "_steps", steps)

    def parse(self, raw: Any, where: Place) -> dict[str, Any]:
        if not isinstance(raw, dict):
            raise self.fail(raw, where)
        out = {}
        get = raw.get
        for name, parse, default, fresh in self._steps:
            value = get(name, _ABSENT)
            if value is not _ABSENT:
                out[name] = parse(value, (where, name))
            elif default is REQUIRED:
                raise SchemaError((where, name), "is missing")
            else:
                out[name] = default() if fresh else default
        return out

    def dump(self, value: Mapping[str, Any]) -> dict[str, Any]:
        return {name: f.kind.dump(value[name]) for name, f in self.fields.items() if value.get(name) is not None}


@dataclass(frozen=True)
class Converted(Kind):
    """A kind whose Python value is built from the parsed one (a dataclass from its record)."""

    inner: Kind = field(default_factory=Kind)
    build: Callable[[Any], Any] = lambda v: v
    unbuild: Callable[[Any], Any] = lambda v: v

    @property
    def what(self) -> str:  # type: ignore[override]
        return self.inner.what

    def parse(self, raw: Any, where: Place) -> Any:
        return self.build(self.inner.parse(raw, where))

    def dump(self, value: Any) -> Any:
        return self.inner.dump(self.unbuild(value))


def dataclass_kind(cls: type, limits: Mapping[str, tuple[float | None, float | None]] | None = None) -> Converted:
    """The kind of a flat dataclass of settings, read from its annotations: a `Literal[...]` field is a
    `Choice`, an `int`/`float`/`str`/`bool` field the matching kind (within `limits[name]` if given);
    every field may be missing (its default is used). Builds the dataclass; dumps `asdict`."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    limits = limits or {}
    fields: dict[str, Field] = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        lo, hi = limits.get(f.name, (None, None))
        if typing.get_origin(hint) is typing.Literal:
            kind: Kind = Choice(typing.get_args(hint))
        elif hint is bool:
            kind = Boolean()
        elif hint is int:
            kind = Integer(None if lo is None else int(lo), None if hi is None else int(hi))
        elif hint is float:
            kind = Number(lo, hi)
        elif hint is str:
            kind = Text()
        else:
            raise TypeError(f"{cls.__name__}.{f.name}: no schema kind for {hint}")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory  # type: ignore[misc]
        fields[f.name] = Field(kind, default)
    return Converted(Record(fields), build=lambda d: cls(**d), unbuild=dataclasses.asdict)
