"""Torch's native libraries open with the GIL released: another thread keeps running meanwhile, and torch
imports after them as it does without (worker/preload.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from s2studio.worker.preload import LIBRARIES, torch_library_folder


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the preload is for Linux's libraries")
def test_preloading_lets_other_threads_run_and_torch_still_imports() -> None:
    folder = torch_library_folder()
    if folder is None:
        pytest.skip("torch is not installed")
    code = textwrap.dedent("""
        import sys, threading, time
        from s2studio.worker.preload import preload_torch
        gaps, stop = [], False
        def tick():
            last = time.perf_counter()
            while not stop:
                time.sleep(0.002)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now
        t = threading.Thread(target=tick)
        t.start()
        time.sleep(0.05)
        loaded = preload_torch()
        stop = True
        t.join()
        assert "torch" not in sys.modules
        import torch
        assert torch.ones(2).sum().item() == 2.0
        print(",".join(loaded), max(gaps))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    loaded, longest = out[0].split(","), float(out[1])
    assert "libtorch_cpu.so" in loaded and set(loaded) <= set(LIBRARIES)
    assert longest < 0.1  # opening hundreds of MB of libraries never held the GIL (it did for ~0.5 s in `import`)
