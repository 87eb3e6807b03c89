"""Which devices this computer has for the model, asked on the engine thread (where torch may be imported), so that
the settings grey out the ones it lacks with the reason instead of a load failing on them (issue 14).

An engine that knows (the fake engine of the tests: `devices()`) answers itself; otherwise the runtime's device
policy is asked (`engine.s2.device.device_options`, importing torch on this thread, as the first load would)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from s2studio.engine import api


def find_devices(engine: Any, request: api.DevicesRequest, cancel: threading.Event) -> Iterator[api.Event]:
    own = getattr(engine, "devices", None)
    if callable(own):
        options = tuple(own())
    else:
        from s2studio.engine.s2.device import device_options  # noqa: PLC0415 - torch, on the engine thread

        options = device_options()
    yield api.DevicesFound(request.job_id, options)
    yield api.JobFinished(request.job_id, cancelled=cancel.is_set())
