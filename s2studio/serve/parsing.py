"""Request bodies as typed models: one message naming the field that is wrong, never a traceback."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError

from s2studio.serve.errors import ApiError
from s2studio.state.voices import Voice, VoiceLibrary
from s2studio.errors import UserError

M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], raw: object) -> M:
    if not isinstance(raw, dict):
        raise ApiError(400, "the body must be an object (a JSON or MessagePack map)", "invalid_body")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise ApiError(400, f"{where}: {first['msg']}", "invalid_field", where.split(".")[0]) from None


def find_voice(library: VoiceLibrary, name: str, param: str) -> Voice:
    """A library voice by id or name, or a 404 that names it and says where to look."""
    try:
        return library.resolve(name)
    except UserError:
        known = ", ".join(repr(v.name) for v in library.list()[:8]) or "none yet"
        raise ApiError(404, f"no voice called {name!r} on this server (voices: {known}); add it with "
                       "`s2studio voice add` or in the studio", "voice_not_found", param) from None
