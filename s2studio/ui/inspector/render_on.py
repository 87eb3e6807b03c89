"""Settings ▸ Render on: this computer, or a server (issue 13).

A server is `s2studio serve` on another machine, upstream fish-speech's API server, Fish Audio's cloud (its
API key, and the model it should use: the `model` header) or an OpenAI-style speech server. "Test connection"
asks the server for its model on a helper thread (`worker.servers.probe_server`: the window never imports
the engine's modules) and reports it with the round-trip time; "Use" makes the studio render there (the window
reloads through the engine switch). Remembered in QSettings under `render/`.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings, Signal
from PySide6.QtWidgets import (
    QComboBox, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QPushButton, QVBoxLayout, QWidget,
)

from s2studio.ui.control.background import Background
from s2studio.worker.servers import ServerTarget, probe_server


class RenderOnBox(QGroupBox):
    target_chosen = Signal(object)
    """`ServerTarget` to render on a server, None for this computer (after "Use" or choosing the computer)."""

    def __init__(self, settings: QSettings, parent: QWidget | None = None) -> None:
        super().__init__("Render on", parent)
        self.setAccessibleName("Render on")
        self._settings = settings
        column = QVBoxLayout(self)  # the form, then the connection's result under it at its full height
        form = QFormLayout()
        column.addLayout(form)
        self.where = QComboBox()
        self.where.setAccessibleName("Render on")
        self.where.addItem("This computer", "local")
        self.where.addItem("A server", "server")
        form.addRow("Where", self.where)
        self.url = QLineEdit(str(settings.value("render/url", "")))
        self.url.setPlaceholderText("http://gpu-box:8000")
        self.url.setAccessibleName("Server address")
        form.addRow("Address", self.url)
        self.key = QLineEdit(str(settings.value("render/key", "")))
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setAccessibleName("API key")
        form.addRow("API key", self.key)
        self.model = QLineEdit(str(settings.value("render/model", "s2-pro")))
        self.model.setAccessibleName("Model header")
        self.model.setToolTip("The model a Fish server should use (Fish's cloud: s2-pro, s2.1-pro, …)")
        form.addRow("Model", self.model)
        buttons = QHBoxLayout()
        self.test_button = QPushButton("Test connection")
        self.use_button = QPushButton("Use this server")
        buttons.addWidget(self.test_button)
        buttons.addWidget(self.use_button)
        form.addRow(buttons)
        self.result = QLabel("")
        self.result.setWordWrap(True)
        self.result.setAccessibleName("Connection result")
        self.result.setVisible(False)
        column.addWidget(self.result)
        self.where.setCurrentIndex(max(0, self.where.findData(settings.value("render/on", "local"))))
        self._sync()
        self.where.currentIndexChanged.connect(self._where_changed)
        self.test_button.clicked.connect(self.test_connection)
        self.use_button.clicked.connect(self._use)
        self._probe = Background("test-connection", self)
        self._probe.done.connect(self._show_result)

    def target(self) -> ServerTarget | None:
        if self.where.currentData() != "server" or not self.url.text().strip():
            return None
        return ServerTarget(self.url.text().strip(), self.key.text().strip(), self.model.text().strip() or "s2-pro")

    def _sync(self) -> None:
        server = self.where.currentData() == "server"
        for w in (self.url, self.key, self.model, self.test_button, self.use_button):
            w.setEnabled(server)

    def _remember(self) -> None:
        s = self._settings
        s.setValue("render/on", self.where.currentData())
        s.setValue("render/url", self.url.text().strip())
        s.setValue("render/key", self.key.text().strip())
        s.setValue("render/model", self.model.text().strip())

    def _show(self, text: str) -> None:
        self.result.setText(text)
        self.result.setVisible(bool(text))

    def _where_changed(self) -> None:
        self._sync()
        self._remember()
        if self.where.currentData() == "local":
            self._probe.cancel.set()  # a test still running says nothing any more
            self._show("")
            self.target_chosen.emit(None)

    def _use(self) -> None:
        target = self.target()
        if target is None:
            self._show("Type the server's address first, e.g. http://gpu-box:8000")
            return
        self._remember()
        self.target_chosen.emit(target)

    def test_connection(self) -> None:
        target = self.target()
        if target is None:
            self._show("Type the server's address first, e.g. http://gpu-box:8000")
            return
        self._show(f"Connecting to {target.url} …")
        self.test_button.setEnabled(False)
        self._probe.start(lambda task: probe_server(target, task.cancel))

    def _show_result(self, message: object, error: str) -> None:
        server = self.where.currentData() == "server"
        if server:
            self._show(str(message) if not error else f"Not connected: {error}")
        self.test_button.setEnabled(server)
