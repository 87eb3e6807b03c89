"""Composition root: QApplication, folders, logging, the engine thread and the main window.

`S2STUDIO_ENGINE=fake` runs the studio on the torch-free `FakeEngine` (tones, no model needed).
Start-up hooks drive the real app from outside (the kill-during-render test, demo scripts, the hostile
start-up tests): `S2STUDIO_OPEN=<project.s2proj>` opens a project once the window is up,
`S2STUDIO_AUTORENDER=1` triggers Render All as soon as the model is ready, `S2STUDIO_RESTORE=1` restores
an autosave left by a crash without asking, and `S2STUDIO_QUIT_AFTER_MS=N` closes every window after N ms.

Nothing at start-up may abort the process or make every later start fail: the start-up steps run inside
the event loop, each on its own (a failing one is reported by the error dialog and the next still runs),
one `sys.excepthook` (`ui/dialogs/error_dialog.py`) catches whatever a slot lets escape, a damaged autosave is
moved aside by the project store, and leftovers of killed runs are cleaned.
Otherwise the real engine is imported by name *inside the engine thread* the first time a job runs,
so the GUI thread never imports torch.
"""

from __future__ import annotations

import gc
import logging
import logging.handlers
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, QMessageLogContext, QObject, QSettings, QtMsgType, QTimer, qInstallMessageHandler
from PySide6.QtWidgets import QApplication, QWidget

from s2studio import paths
from s2studio.errors import UserError
from s2studio.worker import EngineHost

logger = logging.getLogger(__name__)

APP_ID = "io.github.s2studio.S2Studio"
ENV_ENGINE = "S2STUDIO_ENGINE"
ENV_OPEN = "S2STUDIO_OPEN"
ENV_AUTORENDER = "S2STUDIO_AUTORENDER"
ENV_RESTORE = "S2STUDIO_RESTORE"
ENV_QUIT_AFTER = "S2STUDIO_QUIT_AFTER_MS"
GIL_SWITCH_S = 0.0005
"""How long a thread that wants the interpreter waits before the thread running Python is asked to let go of it
(`sys.setswitchinterval`; Python's default is 5 ms). PySide lets go of the interpreter around every signal the
window's thread emits, and the window's thread then waits to get it back whenever the engine, the project writer or
the file encoders run Python: a book's render emits several signals a line, so at the default the window spent more
of a render waiting for the interpreter than working, and a key pressed meanwhile waited with it."""


def fake_engine_factory() -> Any:
    from s2studio.engine.fake import FakeEngine  # noqa: PLC0415 - engine thread

    return FakeEngine(frame_latency_s=float(os.environ.get("S2STUDIO_FAKE_LATENCY", "0.01")))


def real_engine_factory() -> Any:
    """Runs on the engine thread: importing the real engine imports torch there, not in the GUI. Every pause of
    the engine thread that holds the GIL is one of the window's too: the objects the import made are frozen out
    of the garbage collector, whose full passes (each model unload runs one) would otherwise walk all of
    torch's modules every time (a reload's longest gap 170-380 ms without, 20-85 ms with, `bench/gui_stall.py`).
    torch's shared libraries are mapped first with the GIL released (`torch_libs`); the rest of the import still
    holds it in pieces (`bench/gui_stall.py --without preload` compares)."""
    from s2studio import torch_libs  # noqa: PLC0415

    seconds = torch_libs.preload()  # the libraries mapped with the interpreter released: the window keeps drawing
    if seconds:
        logger.info("torch's libraries loaded beside the window in %.1f s", seconds)
    try:
        from s2studio.engine.s2 import S2Engine  # noqa: PLC0415
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("s2studio"):
            raise UserError("The S2 engine is not part of this build yet; start with S2STUDIO_ENGINE=fake "
                            "to try the studio with test tones.") from None
        raise
    gc.freeze()  # what exists now lives as long as the process: later collections skip it
    return S2Engine()


def engine_factory(kind: str) -> Callable[[], Any]:
    return fake_engine_factory if kind == "fake" else real_engine_factory


def setup_logging(log_dir: Path) -> None:
    """A rotating log file beside the data (the user's script text is never logged at INFO)."""
    root = logging.getLogger()
    if any(getattr(h, "_s2studio", False) for h in root.handlers):
        return
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = logging.handlers.RotatingFileHandler(log_dir / "studio.log", maxBytes=2_000_000,
                                                                        backupCount=2, encoding="utf-8")
    except OSError:
        handler = logging.StreamHandler()
    handler._s2studio = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(min(root.level or logging.INFO, logging.INFO))
    qInstallMessageHandler(qt_message_to_log)


QT_LEVELS = {QtMsgType.QtDebugMsg: logging.DEBUG, QtMsgType.QtInfoMsg: logging.DEBUG,
             QtMsgType.QtWarningMsg: logging.INFO, QtMsgType.QtCriticalMsg: logging.ERROR,
             QtMsgType.QtFatalMsg: logging.CRITICAL}
"""Qt's own messages (a missing file manager, a font it substitutes) are for the log, not the terminal: a person
is told what matters in the window."""


def qt_message_to_log(kind: QtMsgType, context: QMessageLogContext, message: str) -> None:
    logging.getLogger("qt." + (context.category or "default")).log(QT_LEVELS.get(kind, logging.INFO), "%s", message)


def log_start(data: Path) -> None:
    """The log's first line of a session: what runs where (the devices follow once the engine thread knows)."""
    import platform  # noqa: PLC0415

    import PySide6  # noqa: PLC0415
    from PySide6.QtCore import qVersion  # noqa: PLC0415

    from s2studio import __version__  # noqa: PLC0415

    logger.info("S2 Studio %s starting: %s, Python %s, Qt %s (PySide6 %s), %s threads for the model; data in %s",
                __version__, platform.platform(), platform.python_version(), qVersion(), PySide6.__version__,
                os.environ.get("OMP_NUM_THREADS", "automatic"), data)


QT_NO_GUI_THREADPOOL = "QT_NO_GUI_THREADPOOL"
"""Set (before the first painting): Qt paints on the window's thread alone. Otherwise Qt splits every translucent
fill taller than about a hundred rows (the waveform's marks over its lines) into parts painted by a pool of helper
threads, while the window's thread sleeps until they are done: each such fill of a pass then waits for those threads
to get a core, and for the interpreter back, behind the render's, the writer's and the export's threads. Painted
alone, a pass costs the window's thread its own work only, however busy the computer is (`bench/paint_threads.py`
compares the two)."""


def make_application(argv: list[str] | None = None) -> QApplication:
    os.environ.setdefault(QT_NO_GUI_THREADPOOL, "1")  # read by Qt when it first paints
    app = QApplication.instance() or QApplication(argv if argv is not None else sys.argv)
    app.setApplicationName("S2 Studio")
    app.setOrganizationName("s2studio")
    app.setApplicationDisplayName("S2 Studio")
    app.setDesktopFileName(APP_ID)
    from s2studio.ui import wheel_guard  # noqa: PLC0415
    from s2studio.ui.control import heap  # noqa: PLC0415
    from s2studio.ui.icons import app_icon  # noqa: PLC0415

    app.setWindowIcon(app_icon())
    wheel_guard.install(app)  # the wheel scrolls; it changes a field only when that field has the focus
    heap.install()  # full garbage collections walk only what is new since the last one
    sys.setswitchinterval(GIL_SWITCH_S)  # the window's thread gets the interpreter back soon after each signal
    return app  # type: ignore[return-value]


def build_window(engine_kind: str | None = None, factory: Callable[[], Any] | None = None):  # noqa: ANN201
    """The window and its engine host, not shown; `app.main` and the tests both start here."""
    from s2studio.ui.control.context import StudioContext  # noqa: PLC0415
    from s2studio.ui.window.main_window import MainWindow  # noqa: PLC0415

    kind = engine_kind or os.environ.get(ENV_ENGINE, "s2")
    data = paths.data_dir()
    setup_logging(data / "logs")
    log_start(data)
    settings = QSettings()
    switch = None
    if factory is None and kind != "fake":  # the engine switch: this computer, or a server (Settings ▸ Render on)
        from s2studio.engine.switch import EngineSwitch  # noqa: PLC0415 - torch-free

        switch = EngineSwitch(real_engine_factory)
        factory = lambda: switch  # noqa: E731
    host = EngineHost(factory or engine_factory(kind))
    ctx = StudioContext(host=host, engine_kind=kind, data_dir=data, settings=settings, engine_switch=switch)
    try:
        window = MainWindow(ctx)
    except BaseException:
        host.shutdown()  # a running engine thread left behind would abort the process at exit
        raise
    return window


def start_engine(window) -> None:  # noqa: ANN001
    """Ask for the devices, then load the fake engine at once, the remembered model when it is valid, else show
    the model page. The first engine job imports torch on the engine thread: `main` runs this once the window
    has painted."""
    from s2studio.ui.dialogs.model_page import validate_model_dir  # noqa: PLC0415

    window.ctx.host.find_devices()  # the settings grey out the devices this computer lacks
    if window.ctx.engine_kind == "fake":
        window.models.load(Path("fake-model"))
        return
    target = window.inspector.render_on.target()
    if target is not None and window.ctx.engine_switch is not None:  # remembered: render on a server
        folder = window.ctx.settings.value("model/dir", "")
        window.ctx.model_dir = Path(folder) if folder else None
        window.models.render_on_target(target)
        return
    remembered = window.ctx.settings.value("model/dir", "")
    if remembered:
        try:
            validate_model_dir(Path(remembered))
        except UserError as exc:
            window.statusBar().showMessage(str(exc), 10000)
        else:
            window.models.load(Path(remembered))
            return
    QTimer.singleShot(0, window.models.open_model_page)


def apply_start_hooks(window, restored: bool) -> None:  # noqa: ANN001
    """`S2STUDIO_OPEN` and `S2STUDIO_AUTORENDER` (module docstring); a restored autosave wins over OPEN, and
    without either the project open at the last clean exit opens again."""
    path = os.environ.get(ENV_OPEN)
    if path and not restored:
        window.projects.open(Path(path))
    elif not restored and (last := window.store.last()) is not None:
        window.projects.open(last)
    if os.environ.get(ENV_AUTORENDER) == "1":
        pending = [True]

        def render_once(busy: bool) -> None:  # once the load has ended with a model (rendering waits for that)
            if pending and not busy and window.model.info is not None:
                pending.clear()
                window.actions_by_name["render_all"].trigger()

        window.model.busy_changed.connect(render_once)


def restore_at_start(window) -> bool:  # noqa: ANN001
    """Offer the autosave of a session that did not end cleanly (`S2STUDIO_RESTORE=1`: restore it at once)."""
    if os.environ.get(ENV_RESTORE) == "1":
        return window.store.crashed_before() and window.projects.restore_autosave()
    return window.projects.offer_restore()


def start_up(window) -> None:  # noqa: ANN001
    """The start-up steps, in the event loop; one that fails is reported (excepthook) and the rest still run,
    so a damaged project or autosave never stops the studio from starting."""
    state = {"restored": False}

    def restore() -> None:
        state["restored"] = bool(restore_at_start(window))

    def leftovers() -> None:
        window.library.clean_leftovers()

    steps = (restore, window.store.begin_session, leftovers, lambda: apply_start_hooks(window, state["restored"]),
             lambda: start_engine(window))
    for step in steps:
        if not window.isVisible():  # closed meanwhile (a modal box of an earlier step was open)
            return
        try:
            step()
        except Exception:  # noqa: BLE001 - shown by the hook, then the next step
            sys.excepthook(*sys.exc_info())


FIRST_PAINT_WAIT_MS = 1000
"""The longest start-up waits for the window's first paint (a platform that paints nothing still starts)."""


class FirstPaint(QObject):
    """Runs `then` once, just after the window's first paint: torch's import holds the interpreter for seconds
    at a time, so it starts only once the window is on screen, drawn."""

    def __init__(self, window: QWidget, then: Callable[[], None]) -> None:
        super().__init__(window)
        self._then: Callable[[], None] | None = then
        window.installEventFilter(self)
        QTimer.singleShot(FIRST_PAINT_WAIT_MS, self._run)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() in (QEvent.Type.Paint, QEvent.Type.UpdateRequest) and self._then is not None:
            QTimer.singleShot(0, self._run)  # after this paint is done
        return False

    def _run(self) -> None:
        then, self._then = self._then, None
        if then is not None:
            self.parent().removeEventFilter(self)
            then()


def close_all(window) -> None:  # noqa: ANN001
    """Leave cleanly, modal boxes of the start-up included (the smoke-test hook)."""
    window.projects.ask = False
    QApplication.closeAllWindows()
    QApplication.quit()


def close_when_idle(window) -> None:  # noqa: ANN001
    """`close_all`, once no project is being opened or saved: on a busy machine a damaged project's open may
    outlast the smoke test's delay, and what it reports must reach the log first."""
    if window.projects.waiting:
        QTimer.singleShot(100, lambda: close_when_idle(window))
    else:
        close_all(window)


def main(argv: list[str] | None = None) -> int:
    app = make_application(argv)
    from s2studio.ui.control import heap  # noqa: PLC0415

    heap.collect_on_window_thread()  # garbage that holds the window's Qt objects is freed on this thread only
    holder: dict[str, Any] = {}
    from s2studio.ui.dialogs.error_dialog import install_excepthook  # noqa: PLC0415

    hook = install_excepthook(lambda: holder.get("window"))
    try:
        window = build_window()
    except Exception as exc:  # noqa: BLE001 - e.g. a data folder that is a file: nothing can start
        from PySide6.QtWidgets import QMessageBox  # noqa: PLC0415

        from s2studio.ui.dialogs.error_dialog import describe  # noqa: PLC0415

        logger.error("cannot start: %s", describe(exc), exc_info=not isinstance(exc, UserError))
        box = QMessageBox(QMessageBox.Icon.Critical, "S2 Studio", f"S2 Studio cannot start: {describe(exc)}")
        quit_after = os.environ.get(ENV_QUIT_AFTER)
        if quit_after:
            QTimer.singleShot(int(quit_after), box.reject)
        box.exec()
        return 2
    holder["window"] = window
    window.show()
    heap.keep()  # the modules imported and the window built live to the end: no collection walks them
    FirstPaint(window, lambda: start_up(window))
    quit_after = os.environ.get(ENV_QUIT_AFTER)
    if quit_after:  # smoke tests of a build: start, then leave cleanly
        window.projects.ask = False
        QTimer.singleShot(int(quit_after), lambda: close_when_idle(window))
    try:
        return app.exec()
    finally:
        window.ctx.host.shutdown()
        hook.uninstall()
