"""What the hostile CLI tests share: the tiny demo model (with its codec), a voice library, a script,
a clip and a codes file, made once, and the environment a `python -m s2studio` child runs in."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
from tones import tone

SCRIPT = "# Scene\nAlice: Hello there, how are you?\nBob: [laughing] Fine, thanks.\n"


@pytest.fixture(scope="session")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from s2studio.demo_model import write_demo_model
    from s2studio.state.voices import VoiceLibrary

    root = tmp_path_factory.mktemp("hostile-inputs")
    data = root / "data"
    lib = VoiceLibrary(data / "voices")
    alice = lib.create("Alice voice", [(tone(root / "a.wav"), "A short first clip.")])
    lib.create("Bob voice", [(tone(root / "b.wav", hz=150.0, rate=44100), "Second one.")])
    (root / "scene.txt").write_text(SCRIPT, encoding="utf-8")
    np.save(root / "codes.npy", np.arange(10 * 6, dtype=np.int64).reshape(10, 6) % 32)
    return {"model": write_demo_model(root / "model", seed=3), "data": data, "script": root / "scene.txt",
            "clip": tone(root / "clip.wav", seconds=4.0), "codes": root / "codes.npy", "alice": Path(alice.id), "root": root}


@pytest.fixture
def child_env(inputs: dict[str, Path]) -> dict[str, str]:
    """A child `python -m s2studio` on this checkout, on the shared data dir, one thread."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "S2STUDIO_DATA_DIR": str(inputs["data"]),
            "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
