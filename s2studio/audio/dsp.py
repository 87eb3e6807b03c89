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


def resample(x: Audio, sr_in: int, sr_out: int, zeros: int = 16, rolloff: float = 0.95, beta: float = 8.6) -> Audio:
    """Band-limited resampling of mono `x`; output length is round(len(x) * sr_out / sr_in)."""
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    if sr_in == sr_out:
        return x.astype(np.float32)
    g = math.gcd(sr_in, sr_out)
    up, down = sr_out // g, sr_in // g
    n_out = round(len(x) * sr_out / sr_in)
    fc = 0.5 * rolloff * min(1.0, up / down)  # cycles per input sample
    half = int(math.ceil(zeros / (2 * fc)))
    pad = np.concatenate([np.zeros(half), x, np.zeros(half + down + 1)])
    windows = sliding_window_view(pad, 2 * half)  # windows[i] = x[i-half .. i+half-1]
    j = np.arange(-half + 1, half + 1)
    out = np.zeros(n_out, np.float64)
    for r in range(min(up, n_out)):
        base, frac = divmod(r * down, up)
        u = frac / up - j
        kernel = 2 * fc * np.sinc(2 * fc * u) * np.i0(beta * np.sqrt(np.clip(1 - (u / half) ** 2, 0, 1))) / np.i0(beta)
        count = len(range(r, n_out, up))
        # input index of tap j for output q*up + r is q*down + base + j -> window start q*down + base + 1
        rows = windows[base + 1::down][:count]
        out[r::up] = rows @ kernel
    return out.astype(np.float32)


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


def integrated_loudness(x: Audio, sr: int) -> float:
    """Integrated loudness of mono `x` in LUFS; -inf for silence or audio under 400 ms."""
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    block, hop = int(0.4 * sr), int(0.1 * sr)
    if len(x) < block:
        return float("-inf")
    n = 1 << (len(x) + 4096 - 1).bit_length()
    spectrum = np.fft.rfft(x, n)
    w = 2 * np.pi * np.arange(len(spectrum)) / n
    for b, a in k_weighting(sr):
        spectrum *= np.abs(_biquad_response(b, a, w))
    y = np.fft.irfft(spectrum, n)[:len(x)]
    power = np.cumsum(np.concatenate([[0.0], y * y]))
    starts = np.arange(0, len(x) - block + 1, hop)
    z = (power[starts + block] - power[starts]) / block
    with np.errstate(divide="ignore"):
        lk = -0.691 + 10 * np.log10(z)
    z = z[lk > -70.0]
    if not len(z):
        return float("-inf")
    relative = -0.691 + 10 * np.log10(z.mean()) - 10.0
    with np.errstate(divide="ignore"):
        z = z[-0.691 + 10 * np.log10(z) > relative]
    return float(-0.691 + 10 * np.log10(z.mean()))
