"""Errors a request can meet, and how each API spells them.

Routes raise `ApiError(status, message, code)`; the app answers it in the shape of the API the path belongs
to: OpenAI's `{"error": {"message", "type", "param", "code"}}` for `/v1/audio/*`, `/v1/models` and
`/v1/voices`, fish-speech's `{"statusCode", "message", "error"}` for everything else (what Fish's SDK reads).
"""

from __future__ import annotations

from http import HTTPStatus

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


def error_response(path: str, error: ApiError) -> JSONResponse:
    if path.startswith(OPENAI_PREFIXES):
        body: dict = {"error": {"message": error.message, "type": _openai_type(error.status),
                                "param": error.param, "code": error.code or None}}
    else:
        body = {"statusCode": error.status, "message": error.message, "error": HTTPStatus(error.status).phrase}
        if error.code:
            body["code"] = error.code
    return JSONResponse(body, error.status, headers=error.headers)
