"""Small numpy signal processing for export: resampling, peak and loudness measures.

Numpy only (no scipy, no torch: `audio/` must stay light). Resampling is a polyphase
Kaiser-windowed sinc; loudness is ITU-R BS.1770 integrated loudness (K-weighting, 400 ms blocks,
absolute and relative gates), with the K-weighting applied as a zero-phase magnitude response in
the frequency domain — equal in energy terms, which is all loudness measures.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

Audio = npt.NDArray[np.float32]


class Resampler:
    """Band-limited resampling of a mono stream, fed in pieces of any size: `push` returns the output samples
    that the input so far determines, `finish` the rest. The result does not depend on how the input was cut,
    so a 12-hour export resamples in blocks with the same samples as `resample` on the whole signal."""

    def __init__(self, sr_in: int, sr_out: int, zeros: int = 16, rolloff: float = 0.95, beta: float = 8.6) -> None:
        g = math.gcd(sr_in, sr_out)
        self.up, self.down = sr_out // g, sr_in // g
        fc = 0.5 * rolloff * min(1.0, self.up / self.down)  # cycles per input sample
        self.half = half = int(math.ceil(zeros / (2 * fc)))
        j = np.arange(-half + 1, half + 1)
        self._bases, kernels = [], []
        for r in range(self.up):  # output q*up + r reads inputs q*down + base + j
            base, frac = divmod(r * self.down, self.up)
            u = frac / self.up - j
            window = np.i0(beta * np.sqrt(np.clip(1 - (u / half) ** 2, 0, 1))) / np.i0(beta)
            kernels.append(2 * fc * np.sinc(2 * fc * u) * window)
            self._bases.append(base)
        self._kernels = np.stack(kernels)
        self._buf = np.zeros(half)
        self._buf_start = -half
        """Absolute input index of `_buf[0]`: the samples before 0 are the zeros the filter sees there."""
        self._q = 0
        """Outputs `q * up` and later are not made yet."""
        self.seen = 0
        self.made = 0

    def push(self, x: Audio) -> Audio:
        x = np.asarray(x, dtype=np.float64).reshape(-1)
        self.seen += len(x)
        self._buf = np.concatenate([self._buf, x])
        q1 = (self.seen - self.half - self.down) // self.down + 1  # whose every tap is in the input already
        return self._make(max(q1, self._q))

    def finish(self) -> Audio:
        """The outputs after the last input (zeros past the end), up to round(inputs * sr_out / sr_in) in all."""
        total = round(self.seen * self.up / self.down)
        self._buf = np.concatenate([self._buf, np.zeros(self.half + self.down + 1)])
        out = self._make(max(-(-total // self.up), self._q))
        return out[:max(0, total - self.made + len(out))]

    def _make(self, q1: int) -> Audio:
        count = q1 - self._q
        if count <= 0:
            return np.zeros(0, np.float32)
        windows = sliding_window_view(self._buf, 2 * self.half)
        out = np.empty(count * self.up, np.float64)
        first = self._q * self.down - self.half + 1 - self._buf_start
        for r, (base, kernel) in enumerate(zip(self._bases, self._kernels, strict=True)):
            out[r::self.up] = windows[first + base::self.down][:count] @ kernel
        self._q = q1
        keep = q1 * self.down - self.half + 1 - self._buf_start  # the first input a later output reads
        self._buf, self._buf_start = self._buf[keep:], self._buf_start + keep
        self.made += len(out)
        return out.astype(np.float32)


def resample(x: Audio, sr_in: int, sr_out: int, zeros: int = 16, rolloff: float = 0.95, beta: float = 8.6) -> Audio:
    """Band-limited resampling of mono `x`; output length is round(len(x) * sr_out / sr_in)."""
    if sr_in == sr_out:
        return np.asarray(x, dtype=np.float32).reshape(-1)
    r = Resampler(sr_in, sr_out, zeros, rolloff, beta)
    return np.concatenate([r.push(x), r.finish()])


def peak(x: Audio) -> float:
    return float(np.max(np.abs(x))) if len(x) else 0.0


def _biquad_response(b: tuple[float, float, float], a: tuple[float, float, float], w: np.ndarray) -> np.ndarray:
    z1 = np.exp(-1j * w)
    return (b[0] + b[1] * z1 + b[2] * z1**2) / (a[0] + a[1] * z1 + a[2] * z1**2)


def k_weighting(sr: int) -> tuple[tuple[tuple[float, ...], tuple[float, ...]], ...]:
    """BS.1770's two stages (high shelf, high pass) as biquads for sample rate `sr`."""
    f0, gain_db, q = 1681.974450955533, 3.999843853973347, 0.7071752369554196
    k = math.tan(math.pi * f0 / sr)
    vh = 10 ** (gain_db / 20)
    vb = vh ** 0.4996667741545416
    a0 = 1 + k / q + k * k
    shelf = ((vh + vb * k / q + k * k) / a0, 2 * (k * k - vh) / a0, (vh - vb * k / q + k * k) / a0), \
        (1.0, 2 * (k * k - 1) / a0, (1 - k / q + k * k) / a0)
    f0, q = 38.13547087602444, 0.5003270373238773
    k = math.tan(math.pi * f0 / sr)
    a0 = 1 + k / q + k * k
    highpass = (1.0, -2.0, 1.0), (1.0, 2 * (k * k - 1) / a0, (1 - k / q + k * k) / a0)
    return shelf, highpass


LOUDNESS_TAPS = 2048
"""Each side of the zero-phase K-weighting filter (46 ms at 44.1 kHz, where its response has decayed to 1e-5)."""
_LOUDNESS_FFT = 1 << 16


class LoudnessMeter:
    """ITU-R BS.1770 integrated loudness of a mono stream fed in pieces (`push`), read at the end (`result`).
    Memory: one FFT block and one number per 100 ms, so any length fits. The K-weighting is applied as its
    zero-phase magnitude response (an FIR, block by block through FFTs): equal in energy terms, which is all
    loudness measures."""

    def __init__(self, sr: int) -> None:
        self.hop = int(0.1 * sr)
        """400 ms blocks overlap by 75 %: each is four 100 ms hops."""
        w = 2 * np.pi * np.arange(_LOUDNESS_FFT // 2 + 1) / _LOUDNESS_FFT
        magnitude = np.ones(len(w))
        for b, a in k_weighting(sr):
            magnitude *= np.abs(_biquad_response(b, a, w))
        h = np.fft.irfft(magnitude, _LOUDNESS_FFT)
        taps = LOUDNESS_TAPS
        fir = np.concatenate([h[-taps:], h[:taps + 1]])  # centred: y[n] = sum fir[k] x[n + taps - k]
        self._segment = _LOUDNESS_FFT - 2 * taps
        self._response = np.fft.rfft(fir, _LOUDNESS_FFT)
        self._pending = np.zeros(taps)
        self._seen = 0
        self._filtered = 0
        self._carry = np.zeros(0)
        self._hops: list[np.ndarray] = []

    def push(self, x: Audio) -> None:
        x = np.asarray(x, dtype=np.float64).reshape(-1)
        self._seen += len(x)
        self._pending = np.concatenate([self._pending, x]) if len(self._pending) else x
        full = self._segment + 2 * LOUDNESS_TAPS
        while len(self._pending) >= full:
            self._filter(self._pending[:full], self._segment)
            self._pending = self._pending[self._segment:]

    def result(self) -> float:
        """Integrated loudness in LUFS of everything pushed; -inf for silence or under 400 ms."""
        pending = np.concatenate([self._pending, np.zeros(LOUDNESS_TAPS)])
        while self._filtered < self._seen:
            n = min(self._segment, self._seen - self._filtered)
            piece = pending[:n + 2 * LOUDNESS_TAPS]
            self._filter(np.pad(piece, (0, n + 2 * LOUDNESS_TAPS - len(piece))), n)
            pending = pending[n:]
        self._pending = pending[:0]
        energy = np.concatenate(self._hops) if self._hops else np.zeros(0)
        if len(energy) < 4:
            return float("-inf")
        z = (energy[:-3] + energy[1:-2] + energy[2:-1] + energy[3:]) / (4 * self.hop)
        with np.errstate(divide="ignore"):
            z = z[-0.691 + 10 * np.log10(z) > -70.0]
        if not len(z):
            return float("-inf")
        relative = -0.691 + 10 * np.log10(z.mean()) - 10.0
        with np.errstate(divide="ignore"):
            z = z[-0.691 + 10 * np.log10(z) > relative]
        return float(-0.691 + 10 * np.log10(z.mean()))

    def _filter(self, piece: np.ndarray, n: int) -> None:
        """K-weight the first `n` outputs that `piece` (n + 2 * taps inputs) determines; sum their squares per hop."""
        y = np.fft.irfft(np.fft.rfft(piece, _LOUDNESS_FFT) * self._response, _LOUDNESS_FFT)
        squares = np.concatenate([self._carry, y[2 * LOUDNESS_TAPS:2 * LOUDNESS_TAPS + n] ** 2])
        whole = len(squares) // self.hop * self.hop
        if whole:
            self._hops.append(squares[:whole].reshape(-1, self.hop).sum(axis=1))
        self._carry = squares[whole:]
        self._filtered += n


def integrated_loudness(x: Audio, sr: int) -> float:
    """Integrated loudness of mono `x` in LUFS; -inf for silence or audio under 400 ms."""
    meter = LoudnessMeter(sr)
    meter.push(x)
    return meter.result()
