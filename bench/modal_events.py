"""What a Python event filter on the whole application costs the window's thread: a modal progress dialog (as a
save's or an open's) shown and hidden over the studio's window with a 20-speaker book in it. Hiding it sends an
event to each of the window's widgets; with a Python filter on the application each of them runs Python, and waits
for the interpreter whenever other threads hold it. The studio filters only the fields it guards and the focused
widget (`ui/wheel_guard.py`, `ui/keys.py`); the other case adds one do-nothing Python filter on the application, as
the studio had before.

    .venv/bin/python bench/modal_events.py [--lines 2000] [--rounds 20]

Both cases run in one process, alternating, quiet and beside two busy Python threads (as a render's or an export's).
Prints the wall time of hiding the dialog and handling what it sent, median and worst, and the widgets in the window.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ["S2STUDIO_DATA_DIR"] = tempfile.mkdtemp(prefix="s2-modal-")
    from PySide6.QtCore import QObject, Qt
    from PySide6.QtWidgets import QApplication, QProgressDialog, QWidget

    from s2studio import app
    from s2studio.engine.fake import FakeEngine

    qapp = app.make_application()
    w = app.build_window("fake", factory=lambda: FakeEngine(frame_latency_s=0.0))
    w.ask_on_close = False
    w.projects.ask = False  # closing asks nothing about the unsaved book
    w.show()
    w.editor.setPlainText("".join(f"Speaker{i % 20:02d}: Line number {i}, a dozen words or so of a book.\n"
                                  for i in range(args.lines)))
    w.reparse()
    deadline = time.perf_counter() + 60
    while (w.cast_panel.building() or len(w.cast_panel.combos) < 20) and time.perf_counter() < deadline:
        qapp.processEvents()

    class Nothing(QObject):
        def eventFilter(self, _obj: QObject, _event: object) -> bool:  # noqa: N802 - Qt override
            return False

    on_app = Nothing(qapp)

    def hide_ms() -> float:
        dialog = QProgressDialog("Saving…", "Cancel", 0, 0, w)
        dialog.setWindowModality(Qt.WindowModality.ApplicationModal)
        dialog.setMinimumDuration(0)
        dialog.show()
        for _ in range(5):
            qapp.processEvents()
        started = time.perf_counter()
        dialog.cancel()
        qapp.processEvents()
        took = 1000 * (time.perf_counter() - started)
        dialog.deleteLater()
        qapp.processEvents()
        return took

    stop = threading.Event()

    def busy() -> None:  # Python that holds the interpreter, as a render's, a writer's or an export's threads
        while not stop.is_set():
            sum(range(2000))

    print(f"{len(w.findChildren(QWidget))} widgets in the window, {len(w.cast_panel.combos)} speakers")
    for load in ("quiet", "two busy threads"):
        threads = [threading.Thread(target=busy, daemon=True) for _ in range(2 if load != "quiet" else 0)]
        for t in threads:
            t.start()
        times: dict[str, list[float]] = {"the studio's filters": [], "+ a Python filter on the application": []}
        for _ in range(args.rounds):
            for case, runs in times.items():
                if case.startswith("+"):
                    qapp.installEventFilter(on_app)
                runs.append(hide_ms())
                qapp.removeEventFilter(on_app)
        stop.set()
        for t in threads:
            t.join()
        stop.clear()
        for case, runs in times.items():
            print(f"{load:>17}, {case:<38} hide: median {statistics.median(runs):6.1f} ms, worst {max(runs):6.1f} ms")
    w.player.close()
    w.close()
    w.ctx.host.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
