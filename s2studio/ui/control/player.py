"""Live playback of the timeline through a sounddevice output stream (design.md §2). QtCore only.

The audio callback reads the timeline's current `Layout` once per block and copies from it: no lock, no
buffer allocation, no Qt. Everything the GUI thread asks of it (seek, play one line, loop it) is one
tuple assigned in one step, which the callback picks up at its next block:

- playing the whole timeline, the playhead waits at the rendered end while a render runs
  (`set_wait_at_end`: it never skips), and stops at the end otherwise. Where a render runs scenes side by
  side, a later scene's lines can be there before an earlier line is: the playhead then waits at that
  earliest unfinished line (`set_hold`), and plays on once it lands. Having run dry it is *buffering*:
  it stays silent until `lead` seconds are rendered ahead of it (`set_buffer_lead`, from the render's
  pace), so that a render slower than real time plays in long stretches, not chunk by chunk;
- playing one line stops at the line's end; looping it wraps to its start. The line is named by id and
  its bounds are read from each block's layout, so when A/B swaps the line's take the loop follows the
  new take at once and never plays a neighbour.

A take whose audio is in its file is decoded in blocks (`state/take_audio.py`), never on the callback's
thread: the `Prefetcher` decodes the next `PREFETCH_S` seconds after the playhead on a thread of its own and
pins those blocks in the cache; the callback asks the layout whether its block is `ready` and, in the rare
case it is not (the first moments after a seek), plays silence without moving the playhead.

The GUI polls the position with a timer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
from PySide6.QtCore import QObject, QTimer, Signal

from s2studio.audio.alsa_messages import route_to_log
from s2studio.audio.timeline import Layout, Timeline
from s2studio.engine.api import SAMPLE_RATE
from s2studio.state import take_audio

logger = logging.getLogger(__name__)

Samples = npt.NDArray[np.float32]

PREFETCH_S = 8.0
"""Audio decoded ahead of the playhead (a take's file is decoded about 500 times faster than it plays)."""
START_S = 0.25
"""Decoded on the GUI thread when a play starts, so it starts with sound (the prefetcher does the rest)."""
PREFETCH_POLL_S = 0.02
"""While playing, how often the prefetcher looks at the playhead."""

NO_OUTPUT = "No sound output on this computer: playback is off (rendering and export still work)."
OUTPUT_FAILED = "The sound output could not be opened (details in the log): check the device and press Play again."


def load_sounddevice() -> tuple[Any | None, str]:
    """Import sounddevice; without PortAudio return (None, reason) so the studio still starts."""
    route_to_log()  # ALSA's own messages (underruns, probed cards) to the log, before PortAudio loads it
    try:
        import sounddevice as sd  # noqa: PLC0415 - PortAudio is optional at run time
    except (OSError, ImportError) as exc:
        return None, f"Audio is off: PortAudio is not installed ({exc}). Install libportaudio2 to play and record."
    try:
        sd.query_devices(kind="output")
    except Exception as exc:  # noqa: BLE001 - any PortAudio error means "no device"
        logger.warning("no audio output device: %s", exc)
        return sd, NO_OUTPUT
    return sd, ""


def close_stream(stream: Any) -> None:
    """Stop and close a PortAudio stream; a device that vanished is logged, never raised."""
    if stream is None:
        return
    try:
        stream.abort()
        stream.close()
    except Exception as exc:  # noqa: BLE001
        logger.warning("closing the audio stream: %s", exc)


def playable_end(layout: Layout, pos: int, hold: int | None) -> int:
    """Where playing the whole timeline from `pos` must stop for now: the hold (the earliest line a render has not
    finished) when the playhead is not past it, else the end."""
    return layout.end if hold is None or pos > hold else min(layout.end, hold)


def fill(layout: Layout, out: Samples, pos: int, line_id: str | None, loop: bool,
         hold: int | None = None) -> tuple[int, bool, bool]:
    """Fill `out` from `pos` on; returns (new position, whether any audio was copied, whether the play
    reached its end). With `line_id` only that line plays (from its start when `pos` is outside it); at
    its end it stays there, or wraps to its start when `loop`. Without, it ends at `playable_end`."""
    frames = len(out)
    if line_id is None:
        start, end = 0, playable_end(layout, pos, hold)
    else:
        bounds = layout.bounds(line_id)
        if bounds is None:
            out[:] = 0.0
            return pos, False, True
        start, end = bounds
        if not start <= pos <= end:  # the line moved (a take swap before it), or the play begins
            pos = start
    written, audible = 0, False
    while written < frames:
        n = min(frames - written, end - pos)
        if n <= 0:
            if loop and end > start:
                pos = start
                continue
            out[written:] = 0.0
            return pos, audible, True
        if not layout.ready(pos, n):  # not decoded yet (just after a seek): silence, the playhead waits
            out[written:] = 0.0
            return pos, audible, False
        audible |= layout.read_into(out[written:written + n], pos, wait=False) > 0
        pos += n
        written += n
    return pos, audible, False


class Prefetcher:
    """Decodes the audio after the playhead before the callback needs it, on a thread of its own: every
    `PREFETCH_POLL_S` while playing, and at once after a seek."""

    def __init__(self, player: Player) -> None:
        self.player = player
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def wake(self) -> None:
        self._wake.set()
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="prefetch", daemon=True)
            self._thread.start()

    def step(self) -> None:
        """Decode (and pin) what the next `PREFETCH_S` seconds of the play need, and the start of the line
        being looped."""
        player = self.player
        layout = player.timeline.layout
        pos = player.position
        keys = layout.prefetch(pos, round(PREFETCH_S * SAMPLE_RATE))
        line_id, loop = player._scope
        bounds = layout.bounds(line_id) if line_id is not None and loop else None
        if bounds is not None:
            keys += layout.prefetch(bounds[0], round(PREFETCH_S * SAMPLE_RATE))
        take_audio.CACHE.pin(keys)

    def _run(self) -> None:
        while True:
            try:
                self.step()
            except Exception:  # noqa: BLE001 - a take that cannot be read plays as silence (its problem is logged)
                logger.exception("prefetching the timeline's audio failed")
            self._wake.wait(PREFETCH_POLL_S if self.player.playing else None)
            self._wake.clear()


class Player(QObject):
    """Plays a `Timeline` through the default output device."""

    position_changed = Signal(int)
    """Playhead in samples (polled about 30 times a second while playing, and on seek)."""
    state_changed = Signal(bool)
    """True when playing."""
    started_audio = Signal()
    """The first non-silent block of a play reached the device (the test hook for live playback)."""
    buffering_changed = Signal(bool)
    """The playhead ran dry at the rendered end (True) or has enough ahead again (False)."""

    def __init__(self, timeline: Timeline, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.timeline = timeline
        self.before_play: Callable[[], object] = lambda: None
        """Called as a play starts, before the timeline is read: the window lays out a project just opened."""
        self._sd, self.unavailable_reason = load_sounddevice()
        self._stream: Any = None
        self._pos = 0
        self._seek: tuple[int, int] = (0, 0)
        """(request number, sample): the GUI's last seek; the callback applies each number once."""
        self._applied_seek = 0
        self._scope: tuple[str | None, bool] = (None, False)
        """(line id or None for the whole timeline, loop)."""
        self._ended = False
        self._wait_at_end = False
        self._hold: int | None = None
        self._audio_flag = False
        self._announced = False
        self._playing = False
        self._buffering = False
        """Set by the callback when the play ran dry while a render runs; cleared by the GUI's poll."""
        self._told_buffering = False
        self._lead = round(0.5 * SAMPLE_RATE)
        self._timer = QTimer(self)
        self._timer.setInterval(33)
        self._timer.timeout.connect(self._poll)
        self.prefetcher = Prefetcher(self)

    @property
    def available(self) -> bool:
        return self._sd is not None and not self.unavailable_reason

    @property
    def playing(self) -> bool:
        return self._playing

    @property
    def position(self) -> int:
        return self._pos

    @property
    def line(self) -> str | None:
        """The line being played alone (Play line, a loop), None while the whole timeline plays."""
        return self._scope[0]

    @property
    def looping(self) -> bool:
        return self._scope[1]

    @property
    def buffering(self) -> bool:
        return self._told_buffering

    def set_wait_at_end(self, wait: bool) -> None:
        """While a render runs, more audio may come: the playhead then waits at the end instead of stopping."""
        self._wait_at_end = wait

    def set_hold(self, sample: int | None) -> None:
        """While a render runs: the timeline sample of its earliest unfinished line (`Timeline.wait_point`), where
        playing the whole timeline waits until that line lands; None: the end is the only limit."""
        self._hold = sample

    @property
    def hold(self) -> int | None:
        return self._hold

    def ahead(self) -> int:
        """Samples the whole timeline can play from the playhead before it must wait."""
        return playable_end(self.timeline.layout, self._pos, self._hold) - self._pos

    def _need(self) -> int:
        """Audio that must be ahead to play on: the lead while the render streams in at the end; any while the
        playhead waits at a hold (what is before it grows no more until that line lands whole)."""
        return self._lead if self._hold is None or self._pos > self._hold else 1

    def set_buffer_lead(self, seconds: float) -> None:
        """Audio that must be ahead of the playhead before a play that ran dry goes on."""
        self._lead = max(round(seconds * SAMPLE_RATE), 1)

    def seek(self, sample: int) -> None:
        sample = int(min(max(sample, 0), self.timeline.layout.end))
        self._pos = sample
        self._seek = (self._seek[0] + 1, sample)
        self.prefetcher.wake()
        self.position_changed.emit(sample)

    def play(self) -> bool:
        """Play the whole timeline from the playhead. False (and nothing happens) without audio."""
        self.before_play()
        self._scope = (None, False)
        if self._pos >= self.timeline.layout.end and not self._wait_at_end:
            self.seek(0)
        return self._start()

    def play_line(self, line_id: str, loop: bool = False) -> bool:
        """Play one line from its start, to its end or (`loop`) round and round."""
        self.before_play()
        bounds = self.timeline.layout.bounds(line_id)
        if bounds is None:
            return False
        self._scope = (line_id, loop)
        self.seek(bounds[0])
        return self._start()

    def set_loop(self, line_id: str | None) -> None:
        """Loop this line from now on (None: stop looping and play on to the end)."""
        self._scope = (line_id, line_id is not None)

    def pause(self) -> None:
        if not self._playing:
            return
        self._playing = False
        self._buffering = False
        if self._told_buffering:
            self._told_buffering = False
            self.buffering_changed.emit(False)
        self._timer.stop()
        stream, self._stream = self._stream, None
        close_stream(stream)
        self.position_changed.emit(self._pos)
        self.state_changed.emit(False)

    def close(self) -> None:
        self.pause()

    def _start(self) -> bool:
        if self._playing:
            return True
        if not self.available:
            return False
        self._ended = self._announced = self._audio_flag = self._buffering = False
        self._applied_seek = self._seek[0]
        self.timeline.layout.prefetch(self._pos, round(START_S * SAMPLE_RATE))  # the first moment, here (a block)
        try:  # "high" latency: larger device buffers, no underruns on a CPU busy rendering
            self._stream = self._sd.OutputStream(samplerate=SAMPLE_RATE, channels=1, dtype="float32",
                                                 latency="high", callback=self._callback)
            self._stream.start()
        except Exception as exc:  # noqa: BLE001 - a device can vanish between runs
            logger.warning("cannot open the output stream: %s", exc)
            self.unavailable_reason = OUTPUT_FAILED
            self._stream = None
            return False
        self._playing = True
        self.prefetcher.wake()
        self._timer.start()
        self.state_changed.emit(True)
        return True

    # -- audio thread ---------------------------------------------------------------------------

    def _callback(self, outdata: Any, frames: int, time: Any, status: Any) -> None:
        number, sample = self._seek
        pos = self._pos
        if number != self._applied_seek:
            self._applied_seek = number
            pos = sample
            self._buffering = False
        if self._buffering:
            outdata[:] = 0.0
            return
        line_id, loop = self._scope
        pos, audible, ended = fill(self.timeline.layout, outdata[:, 0], pos, line_id, loop, self._hold)
        if audible:
            self._audio_flag = True
        self._ended = ended
        self._pos = pos
        if ended and line_id is None and self._wait_at_end:
            self._buffering = True

    # -- GUI thread -------------------------------------------------------------------------------

    def _poll(self) -> None:
        if self._audio_flag and not self._announced:
            self._announced = True
            self.started_audio.emit()
        self.position_changed.emit(self._pos)
        if self._buffering and (not self._wait_at_end or self.ahead() >= self._need()):
            self._buffering = False
        if self._buffering != self._told_buffering:
            self._told_buffering = self._buffering
            self.buffering_changed.emit(self._buffering)
        whole = self._scope[0] is None
        if self._ended and not (whole and (self._wait_at_end or self._pos < self.timeline.layout.end)):
            self.pause()  # (a whole play that ended at a hold the render has lifted since plays on)
