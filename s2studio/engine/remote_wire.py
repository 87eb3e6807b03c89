"""The studio's engine seam over HTTP: requests and events as MessagePack, one length-prefixed record each.

`s2studio serve` answers `POST /v1/s2studio/generate` (a `SynthesisRequest`) with the job's events, in
order, as records: a 4-byte big-endian length, then a MessagePack map with a `type`. Audio travels as the
engine's float32 samples (little-endian bytes), codes as int16 (S2's codes are below 4096), so a remote render
is the same take a local one would be: codes, seed and fingerprint included. A line's full audio is not sent
again at its end; the receiver joins the chunks it got. Torch-free: the studio imports it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import numpy as np
import ormsgpack

from s2studio.engine.api import (
    AudioChunk, ContextTurn, Event, JobFailed, JobFinished, JobStarted, LineFinished, LineSpec, LineStarted,
    ModelInfo, Progress, Reference, SynthesisRequest,
)
from s2studio.errors import UserError
from s2studio.settings import Sampling, seed_fields

CONTENT_TYPE = "application/vnd.s2studio.events+msgpack"
MAX_RECORD = 64 * 1024 * 1024


class WireError(ValueError):
    """A record that is not what the protocol says (a different server, or a broken stream)."""


def pack_codes(codes: np.ndarray) -> dict[str, Any]:
    codes = np.asarray(codes)
    if codes.ndim != 2:
        raise WireError(f"codes must be two-dimensional, got shape {codes.shape}")
    return {"shape": list(codes.shape), "data": np.ascontiguousarray(codes, dtype="<i2").tobytes()}


def unpack_codes(raw: Any) -> np.ndarray:
    try:
        rows, cols = (int(n) for n in raw["shape"])
        data = np.frombuffer(raw["data"], dtype="<i2")
        return data.reshape(rows, cols).astype(np.int64)
    except (KeyError, TypeError, ValueError) as exc:
        raise WireError(f"bad codes record ({exc})") from None


def request_to_wire(request: SynthesisRequest) -> bytes:
    s = request.sampling
    return ormsgpack.packb({
        "lines": [[ln.line_id, ln.speaker, ln.text] for ln in request.lines],
        "references": [{"speaker": r.speaker, "transcript": r.transcript, "codes": pack_codes(r.codes)}
                       for r in request.references],
        "sampling": {"temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k,
                     "max_new_tokens": s.max_frames, "seed": s.fixed_seed, "ignore_eos": request.ignore_eos},
        "batching": s.batching,
        "chunk_length": request.chunk_length,
        "context": [{"speaker": t.speaker, "text": t.text, "codes": pack_codes(t.codes)} for t in request.context],
    })


def request_from_record(raw: Any, job_id: str) -> SynthesisRequest:
    """The request a client sent, its MessagePack body already unpacked (the server measures its size first);
    raises WireError naming what is wrong (the settings' refusal included)."""
    try:
        lines = tuple(LineSpec(str(i), int(sp), str(t)) for i, sp, t in raw["lines"])
        refs = tuple(Reference(int(r["speaker"]), str(r["transcript"]), unpack_codes(r["codes"]))
                     for r in raw.get("references", ()))
        context = tuple(ContextTurn(int(t["speaker"]), str(t["text"]), unpack_codes(t["codes"]))
                        for t in raw.get("context", ()))
        s, d = raw.get("sampling", {}), Sampling()
        seed = s.get("seed")
        batching = raw.get("batching", "line")
        if batching not in ("line", "upstream"):
            raise WireError(f"unknown batching {batching!r}")
        sampling = Sampling(temperature=float(s.get("temperature", d.temperature)),
                            top_p=float(s.get("top_p", d.top_p)),
                            top_k=int(s.get("top_k", d.top_k)), max_frames=int(s.get("max_new_tokens", d.max_frames)),
                            batching=batching, **seed_fields(None if seed is None else int(seed)))
        return SynthesisRequest(job_id, lines, refs, sampling, int(raw.get("chunk_length", 200)), context,
                                ignore_eos=bool(s.get("ignore_eos", False)))
    except WireError:
        raise
    except (KeyError, TypeError, AttributeError) as exc:
        raise WireError(f"the request lacks or misspells a field ({type(exc).__name__}: {exc})") from None
    except (ValueError, OverflowError) as exc:
        raise WireError(f"a field of the request has a value of the wrong kind ({exc})") from None
    except UserError as exc:  # settings the engine refuses (`Sampling` validates them)
        raise WireError(str(exc)) from None


def event_to_record(event: Event) -> dict[str, Any] | None:
    """The wire form of a job's event (None for events a generate job never sends)."""
    if isinstance(event, JobStarted):
        return {"type": "job_started", "plan": list(event.plan)}
    if isinstance(event, LineStarted):
        return {"type": "line_started", "line_id": event.line_id}
    if isinstance(event, Progress):
        return {"type": "progress", "line_id": event.line_id, "frames": event.frames, "expected": event.expected,
                "rtf": event.rtf}
    if isinstance(event, AudioChunk):
        return {"type": "audio", "line_id": event.line_id, "start": event.start_sample,
                "samples": np.ascontiguousarray(event.samples, dtype="<f4").tobytes()}
    if isinstance(event, LineFinished):
        return {"type": "line_finished", "line_id": event.line_id, "take_id": event.take_id,
                "codes": pack_codes(event.codes), "seed": event.seed, "fingerprint": event.fingerprint,
                "samples": len(event.audio)}
    if isinstance(event, JobFinished):
        return {"type": "finished", "cancelled": event.cancelled}
    if isinstance(event, JobFailed):
        return {"type": "failed", "error": event.error}
    return None


def frame(record: dict[str, Any]) -> bytes:
    data = ormsgpack.packb(record)
    return struct.pack(">I", len(data)) + data


class RecordReader:
    """Splits a byte stream into records; feed it what arrives, in any pieces."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Iterator[dict[str, Any]]:
        self._buffer += data
        while len(self._buffer) >= 4:
            (length,) = struct.unpack(">I", self._buffer[:4])
            if length > MAX_RECORD:
                raise WireError(f"a record of {length} bytes is larger than any this protocol sends")
            if len(self._buffer) < 4 + length:
                return
            body = bytes(self._buffer[4:4 + length])
            del self._buffer[:4 + length]
            try:
                record = ormsgpack.unpackb(body)
            except ormsgpack.MsgpackDecodeError as exc:
                raise WireError(f"a record is not MessagePack ({exc})") from None
            if not isinstance(record, dict) or "type" not in record:
                raise WireError("a record has no type")
            yield record

    @property
    def pending(self) -> int:
        return len(self._buffer)


def info_to_json(info: ModelInfo) -> dict[str, Any]:
    return {"name": info.name, "device": info.device, "precision": info.precision, "sample_rate": info.sample_rate,
            "codec_fingerprint": info.codec_fingerprint, "max_context": info.max_context}


def info_from_json(raw: Any) -> ModelInfo:
    try:
        return ModelInfo(str(raw["name"]), str(raw["device"]), str(raw["precision"]), int(raw["sample_rate"]),
                         str(raw["codec_fingerprint"]), int(raw["max_context"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise WireError(f"the server's model description is incomplete ({exc})") from None
