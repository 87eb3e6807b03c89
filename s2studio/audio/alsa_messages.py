"""ALSA's messages go to the studio's log, not the terminal.

libasound prints its errors straight to stderr: an underrun the player recovers from by itself ("ALSA lib
pcm.c:…:(snd_pcm_recover) underrun occurred"), and the PCMs of every card PortAudio probes when it starts. They
alarm a person watching the terminal and say nothing the studio does not handle. `route_to_log` sets libasound's
error handler once, before PortAudio loads, to one that writes them to the log at debug level instead.
Linux only; where libasound cannot be loaded nothing changes.
"""

from __future__ import annotations

import ctypes
import logging
import sys
from typing import Any

log = logging.getLogger(__name__)

HANDLER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p)
"""`snd_lib_error_handler_t` (file, line, function, error, format, …); the format's arguments are not read."""
_handler: Any = None
"""The installed handler, kept alive as long as libasound may call it."""


def _to_log(file: bytes | None, line: int, function: bytes | None, err: int, fmt: bytes | None) -> None:
    def text(b: bytes | None) -> str:
        return (b or b"").decode("utf-8", "replace")

    log.debug("ALSA %s:%d (%s) %s%s", text(file), line, text(function), text(fmt), f" [error {err}]" if err else "")


def route_to_log() -> bool:
    """Install the handler (once per process); True when ALSA's messages now go to the log."""
    global _handler
    if _handler is not None:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libasound = ctypes.CDLL("libasound.so.2")
        handler = HANDLER_TYPE(_to_log)
        libasound.snd_lib_error_set_handler(handler)
    except (OSError, AttributeError) as exc:
        log.debug("ALSA's messages stay on stderr: %s", exc)
        return False
    _handler = handler
    return True
