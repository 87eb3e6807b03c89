"""Audio as S2 Studio handles it: numpy and soundfile, no torch (read, resample, timeline, export).

The facts every layer shares (sample rate, frame samples, ...) are `s2studio.units`'; they are offered here too,
where most of the audio code reads them.
"""

from s2studio.units import FRAME_SAMPLES, SAMPLE_RATE

__all__ = ["FRAME_SAMPLES", "SAMPLE_RATE"]
