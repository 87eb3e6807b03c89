"""The facts of S2's audio that every layer reads, defined once: this module imports nothing, so that `state`,
`audio`, the engine, the server and the window may all read them without pulling in anything else."""

SAMPLE_RATE = 44100
"""Every engine speaks 44.1 kHz mono float32 (S2's codec rate); takes, the timeline and exports use it too."""

FRAME_SAMPLES = 2048
"""Samples per codec frame (S2's codec hop)."""

FRAMES_PER_SECOND = SAMPLE_RATE / FRAME_SAMPLES
"""Codec frames per second of audio (21.53)."""

NUM_CODEBOOKS = 10
"""Codes per frame: one semantic codebook and nine residual ones (S2's quantizer)."""

LINE_GAP_S = 0.4
"""Silence between two lines where nothing else says otherwise: the timeline, exports, the server's speech."""
