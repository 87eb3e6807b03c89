"""How long the studio's window stops answering while a model loads (issue 14: "froze up to 618 ms").

    .venv/bin/python bench/gui_stall.py [--model DIR] [--settings exact,fast,int8] [--without freeze]

Opens the real window on the real engine (offscreen), loads the model (the demo model is written to a temp
folder when --model is not given) once per entry of --settings, and meanwhile measures the GUI thread's event
loop: a 5 ms timer records the gap between its ticks, so a gap of N ms means the window could not repaint or
answer for N ms. Prints, per load, the load time, the longest gap and how many gaps exceeded 50 and 100 ms,
and which part of the load was running during the longest gap (the engine's last progress message).
`--without freeze` leaves the objects torch's import made in the garbage collector's reach (`app.real_engine_factory`
freezes them), `--without preload` lets torch's import map its shared libraries itself, holding the interpreter
(`s2studio/torch_libs.py`), to compare.
A script, not a test: figures vary by machine and by how busy it is.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path)
    parser.add_argument("--settings", default="exact,fast,exact",
                        help="comma-separated speed modes, one load each (the first imports torch)")
    parser.add_argument("--without", default="", choices=["", "freeze", "preload"],
                        help="freeze: no gc.freeze; preload: torch's libraries loaded by its import, holding the "
                             "interpreter (to compare)")
    args = parser.parse_args()
    without = {args.without} - {""}
    if "freeze" in without:
        import gc

        gc.freeze = lambda: None
    if "preload" in without:
        from s2studio import torch_libs

        torch_libs.preload = lambda: 0.0
    tmp = tempfile.TemporaryDirectory(prefix="gui-stall-")
    os.environ["S2STUDIO_DATA_DIR"] = str(Path(tmp.name) / "data")
    model = args.model
    if model is None:
        model = Path(tmp.name) / "demo"
        subprocess.run([sys.executable, "-m", "s2studio", "demo-model", str(model)], check=True,
                       stdout=subprocess.DEVNULL)

    from PySide6.QtCore import QElapsedTimer, QTimer
    from PySide6.QtWidgets import QApplication

    from s2studio import app
    from s2studio.state.project import GenerationSettings

    app.make_application()
    window = app.build_window("s2")
    window.ask_on_close = False
    window.show()
    clock = QElapsedTimer()
    clock.start()
    gaps: list[tuple[float, str]] = []
    last = [clock.elapsed()]
    stage = [""]
    window.ctx.host.model_loading.connect(lambda e: stage.__setitem__(0, e.message))

    def tick() -> None:
        now = clock.elapsed()
        gaps.append((now - last[0], stage[0]))
        last[0] = now

    timer = QTimer()
    timer.setInterval(5)
    timer.timeout.connect(tick)
    timer.start()
    print(f"model: {model}; without: {', '.join(sorted(without)) or 'nothing'}")
    print(f"{'load':>10} {'seconds':>8} {'longest gap':>12} {'>50 ms':>7} {'>100 ms':>8}  during")
    for mode in args.settings.split(","):
        base = GenerationSettings()
        fields = {"speed": mode} if mode in ("exact", "fast") else {"speed": "fast", "quantize": mode}
        settings = replace(base, device="cpu", **fields)
        window.document.set_settings(settings)
        gaps.clear()
        stage[0] = ""
        t0 = time.perf_counter()
        last[0] = clock.elapsed()
        window.load_model(model)
        while window.model.busy:
            QApplication.processEvents()
            time.sleep(0.001)
        seconds = time.perf_counter() - t0
        longest = max(gaps, default=(0.0, ""))
        print(f"{mode:>10} {seconds:8.2f} {longest[0]:10.0f} ms {sum(g > 50 for g, _ in gaps):7d} "
              f"{sum(g > 100 for g, _ in gaps):8d}  {longest[1] or '(before the first progress)'}")
    timer.stop()
    window.close()
    window.ctx.host.shutdown()
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
