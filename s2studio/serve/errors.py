"""Errors a request can meet, and how each API spells them.

Routes raise `ApiError(status, message, code)`; the app answers it in the shape of the API the path belongs
to: OpenAI's `{"error": {"message", "type", "param", "code"}}` for `/v1/audio/*`, `/v1/models` and
`/v1/voices`, fish-speech's `{"statusCode", "message", "error"}` for everything else (what Fish's SDK reads).
No message leaves with one of the server's own folders in it (`PrivatePaths`): a client learns which voice or
which clip is at fault, never where the server keeps it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from http import HTTPStatus
from pathlib import Path

from starlette.responses import JSONResponse

OPENAI_PREFIXES = ("/v1/audio/", "/v1/models", "/v1/voices")


class ApiError(Exception):
    def __init__(self, status: int, message: str, code: str = "", param: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.headers = headers or {}


def _openai_type(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 404:
        return "not_found_error"
    if status == 429 or status == 503:
        return "server_busy"
    return "invalid_request_error" if status < 500 else "server_error"


class PrivatePaths:
    """Replaces the server's own folders in a message with what they are to a client: a voice's folder with the
    voice's name, the library, the model folder, the temporary folder and the home folder with words."""

    def __init__(self, named: Callable[[], Iterable[tuple[Path, str]]]) -> None:
        self._named = named

    def __call__(self, text: str) -> str:
        fixed = [(Path(tempfile.gettempdir()), "a temporary folder"), (Path.home(), "~")]
        pairs = [(str(Path(p)), words) for p, words in [*self._named(), *fixed] if str(p) not in ("", "/", ".")]
        for folder, words in sorted(pairs, key=lambda pair: -len(pair[0])):
            text = text.replace(folder + os.sep, words + os.sep).replace(folder, words)
        return text


def error_response(path: str, error: ApiError, redact: Callable[[str], str] | None = None) -> JSONResponse:
    message = redact(error.message) if redact is not None else error.message
    if path.startswith(OPENAI_PREFIXES):
        body: dict = {"error": {"message": message, "type": _openai_type(error.status),
                                "param": error.param, "code": error.code or None}}
    else:
        phrase = "Server Error" if error.status == 500 else HTTPStatus(error.status).phrase
        body = {"statusCode": error.status, "message": message, "error": phrase}
        if error.code:
            body["code"] = error.code
    return JSONResponse(body, error.status, headers=error.headers)
