"""Makes the suite headless and hermetic: offscreen Qt, a file-backed sound device, one torch thread,
and every user directory (data, config, cache) in a temporary folder. Runs before any test module
imports Qt, sounddevice or torch, which is why it only sets environment variables."""

from __future__ import annotations

import atexit
import os
import pathlib
import shutil
import tempfile

import numpy as np

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Golden files were recorded with one thread; kernels' reduction order depends on the thread count.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

_TMP = pathlib.Path(tempfile.mkdtemp(prefix="s2studio-tests-"))
atexit.register(shutil.rmtree, _TMP, ignore_errors=True)

# Nothing a test does may touch the real user's folders.
for var, sub in (("S2STUDIO_DATA_DIR", "data"), ("XDG_CONFIG_HOME", "config"),
                 ("XDG_CACHE_HOME", "cache"), ("XDG_DATA_HOME", "xdg-data")):
    os.environ[var] = str(_TMP / sub)

# Nor reach the network: huggingface_hub answers from its cache only (the download tests serve a local fake hub
# and turn this off for themselves).
os.environ["HF_HUB_OFFLINE"] = "1"

# A file-backed ALSA default device (research/env.md §5.2): the "microphone" plays CAPTURE_RAW (a 440 Hz
# tone, 16 kHz s16le mono), the "speaker" writes PLAYBACK_RAW. Must be set before sounddevice is imported,
# because PortAudio enumerates devices at import.
ALSA_RATE = 16000
CAPTURE_RAW = _TMP / "capture_s16le_16k_mono.raw"
PLAYBACK_RAW = _TMP / "playback_s16le_16k_mono.raw"
(0.3 * 32767 * np.sin(2 * np.pi * 440 * np.arange(ALSA_RATE * 20) / ALSA_RATE)).astype("<i2").tofile(CAPTURE_RAW)
_conf = _TMP / "asound.conf"
_conf.write_text(f"""
<confdir:alsa.conf>
pcm.!default {{
    type asym
    playback.pcm {{ type plug slave {{ pcm {{ type file slave.pcm "null" file "{PLAYBACK_RAW}" format "raw" }}
                                       format S16_LE rate {ALSA_RATE} channels 1 }} }}
    capture.pcm  {{ type plug slave {{ pcm {{ type file slave.pcm "null" file "/dev/null" infile "{CAPTURE_RAW}" format "raw" }}
                                       format S16_LE rate {ALSA_RATE} channels 1 }} }}
}}
""")
os.environ["ALSA_CONFIG_PATH"] = str(_conf)


def pytest_sessionstart(session) -> None:  # noqa: ANN001 - pytest's hook
    """The CPU kernels of this checkout built in place when their sources changed since the last build (what
    scripts/setup does): the tests run the modules an install would build, from these sources. A session the suite
    starts in a process of its own (`S2STUDIO_CHILD_SESSION`, e.g. to watch what that process imports) skips it:
    its parent checked them, and the check imports torch."""
    if os.environ.get("S2STUDIO_CHILD_SESSION"):
        return
    import subprocess
    import sys

    from s2studio.engine.weights import kernel_build

    if kernel_build.stale():  # a failed build fails the kernels' tests, which say why; the rest still runs
        subprocess.run([sys.executable, "-m", "s2studio.engine.weights.kernel_build"],
                       cwd=pathlib.Path(kernel_build.__file__).parents[3])
