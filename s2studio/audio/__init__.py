"""Audio as S2 Studio handles it: numpy and soundfile, no torch (read, resample, timeline, export).

The two facts every layer shares are defined here, once; this file imports nothing, so that `state`, the
engine and the window may all read them without pulling in the rest of `audio`.
"""

SAMPLE_RATE = 44100
"""Every engine speaks 44.1 kHz mono float32 (S2's codec rate); takes, the timeline and exports use it too."""

FRAME_SAMPLES = 2048
"""Samples per codec frame (S2's codec hop): 21.53 frames per second of audio."""
