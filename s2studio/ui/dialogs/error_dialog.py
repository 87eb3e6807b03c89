"""The last line of defence: an exception that no slot caught is logged, shown once, and the window stays.

`install_excepthook` replaces `sys.excepthook`, which PySide calls for an exception escaping a slot or a
Qt virtual (`paintEvent`, `closeEvent` …), and `threading.excepthook` for plain threads. The traceback
goes to the log; the person sees one `ErrorDialog` with the message (a `UserError` as the message it is,
anything else as "something went wrong" with the exception's own words) and a "Copy details" button that
puts the traceback on the clipboard for a bug report. The dialog is window-modal but does not block (no
nested event loop inside the hook), and while it is open further errors are only logged and counted, so a
failing paint cannot flood the screen. Nothing here may raise: a hook that fails would lose the error.
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from collections.abc import Callable
from types import TracebackType

from PySide6.QtCore import QObject, Qt, QThread, Signal
from PySide6.QtWidgets import (QApplication, QDialog, QDialogButtonBox, QLabel, QPlainTextEdit, QPushButton,
                               QVBoxLayout, QWidget)

from s2studio.errors import UserError, printable

logger = logging.getLogger(__name__)


def describe(exc: BaseException) -> str:
    """The one line a person reads for `exc`."""
    if isinstance(exc, UserError):
        return str(exc)
    if isinstance(exc, MemoryError):
        return "S2 Studio ran out of memory. Close other programs, or pick a smaller precision or quantization."
    words = printable(exc, 300) or type(exc).__name__
    return f"Something went wrong ({type(exc).__name__}: {words}). The window is still usable; "\
           "if it happens again, copy the details into a bug report."


class ErrorDialog(QDialog):
    """The message, the details folded away, "Copy details" and "Close"."""

    def __init__(self, message: str, details: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("errorDialog")
        self.setWindowTitle("S2 Studio — error")
        self.setAccessibleName("Error")
        self.details = details
        layout = QVBoxLayout(self)
        self.message = QLabel(message)
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message.setAccessibleName("Error message")
        layout.addWidget(self.message)
        self.more = QLabel("")
        self.more.setVisible(False)
        layout.addWidget(self.more)
        self.text = QPlainTextEdit(details)
        self.text.setReadOnly(True)
        self.text.setVisible(False)
        self.text.setAccessibleName("Error details")
        self.text.setMinimumHeight(160)
        layout.addWidget(self.text)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.copy_button = QPushButton("Copy details")
        self.copy_button.setAccessibleName("Copy error details")
        self.copy_button.clicked.connect(self.copy_details)
        self.show_button = QPushButton("Show details")
        self.show_button.setCheckable(True)
        self.show_button.toggled.connect(self.text.setVisible)
        buttons.addButton(self.copy_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.addButton(self.show_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        self.close_button = buttons.button(QDialogButtonBox.StandardButton.Close)
        layout.addWidget(buttons)
        self.setMinimumWidth(460)

    def copy_details(self) -> None:
        QApplication.clipboard().setText(self.details)
        self.copy_button.setText("Copied")

    def count_another(self, n: int) -> None:
        self.more.setText(f"… and {n} more error{'s' * (n != 1)} since (in the log).")
        self.more.setVisible(True)


class _Relay(QObject):
    """Carries an error from another thread to the GUI thread (a queued signal)."""

    error = Signal(object, str)


class ExceptionHook:
    """`sys.excepthook` and `threading.excepthook` for the studio (module docstring)."""

    def __init__(self, parent: Callable[[], QWidget | None] = lambda: None) -> None:
        self.parent = parent
        self.dialog: ErrorDialog | None = None
        self.suppressed = 0
        self._relay = _Relay()
        self._relay.error.connect(self._show, Qt.ConnectionType.QueuedConnection)
        self._previous = (sys.excepthook, threading.excepthook)

    def install(self) -> ExceptionHook:
        sys.excepthook = self
        threading.excepthook = self._thread_hook
        return self

    def uninstall(self) -> None:
        sys.excepthook, threading.excepthook = self._previous

    def __call__(self, kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        try:
            if issubclass(kind, KeyboardInterrupt):
                QApplication.quit()
                return
            details = "".join(traceback.format_exception(kind, exc, tb))
            logger.error("unhandled %s", "error" if isinstance(exc, UserError) else "exception",
                         exc_info=(kind, exc, tb))
            app = QApplication.instance()
            if app is not None and QThread.currentThread() is app.thread():
                self._show(exc, details)
            else:
                self._relay.error.emit(exc, details)
        except BaseException:  # noqa: BLE001 - the hook must never fail; the stderr copy is the last resort
            traceback.print_exception(kind, exc, tb)

    def _thread_hook(self, args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            self(args.exc_type, args.exc_value, args.exc_traceback)

    def _show(self, exc: BaseException, details: str) -> None:
        try:
            if self.dialog is not None and self.dialog.isVisible():
                self.suppressed += 1
                self.dialog.count_another(self.suppressed)
                return
            self.suppressed = 0
            self.dialog = ErrorDialog(describe(exc), details, self.parent())
            self.dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            self.dialog.destroyed.connect(self._forget)
            self.dialog.open()
        except BaseException:  # noqa: BLE001
            logger.exception("cannot show the error dialog")

    def _forget(self) -> None:
        self.dialog = None


def install_excepthook(parent: Callable[[], QWidget | None] = lambda: None) -> ExceptionHook:
    """Install the studio's hook; `parent()` gives the window the dialog belongs to (it may be gone)."""
    return ExceptionHook(parent).install()
