"""One-shot playback through the default device: a voice's clip, a clip being prepared, a preview, a take being
recorded. sounddevice's `sd.play` plays a whole array and returns; the next call replaces what plays.

Each function reports a reason instead of raising, so a missing PortAudio or a vanished device becomes one line
for the status bar or the dialog (the timeline's player, with its own stream, is `ui.control.player`)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from s2studio.errors import UserError, printable
from s2studio.state.clips import MAX_RECORDING_SECONDS, read_audio
from s2studio.ui.control.player import load_sounddevice

logger = logging.getLogger(__name__)


def play_file(path: Path) -> str:
    """Play an audio file through the default device; returns a reason when it cannot (the reference
    reader's one line for a file that is not audio)."""
    try:
        data, sr, _ = read_audio(Path(path), MAX_RECORDING_SECONDS, voice_clip=False)
    except UserError as exc:
        return f"Cannot play it: {exc}"
    return play_samples(data.mean(axis=1), sr)


def play_samples(samples: np.ndarray, rate: int) -> str:
    """Play mono samples through the default device (replacing what plays); returns a reason when it cannot."""
    sd, reason = load_sounddevice()
    if sd is None or reason:
        return reason
    try:
        sd.play(np.asarray(samples, dtype=np.float32), rate)
    except Exception as exc:  # noqa: BLE001 - a vanished device
        return f"Cannot play: the sound device failed ({printable(exc, 120)})."
    return ""


def stop_playing() -> None:
    """Stop what `play_samples` started (nothing happens when nothing plays)."""
    sd, reason = load_sounddevice()
    if sd is not None and not reason:
        try:
            sd.stop()
        except Exception as exc:  # noqa: BLE001
            logger.warning("stopping playback: %s", exc)
