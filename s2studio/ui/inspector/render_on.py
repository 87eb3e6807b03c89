"""Settings ▸ Render on: this computer, a server, or this computer and a list of servers sharing the scenes.

A server is `s2studio serve` on another machine, upstream fish-speech's API server, Fish Audio's cloud (its
API key, and the model it should use: the `model` header) or an OpenAI-style speech server. "Test connection"
asks the server for its model on a helper thread (`worker.servers.probe_server`: the window never imports
the engine's modules) and reports it with the round-trip time; "Use" makes the studio render there (the window
reloads through the engine switch). "This computer and servers" keeps a list of engines (each server with its
kind and requests in flight; "Add" puts the server of the form on it) and shows one live line per engine while it
renders (`show_engines`). Remembered in QSettings under `render/`; Fish's cloud key goes to the system keyring.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from PySide6.QtCore import QSettings, QTimer, Signal
from PySide6.QtWidgets import (
    QComboBox, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QListWidget, QPushButton, QSpinBox,
    QVBoxLayout, QWidget,
)

from s2studio.ui.control.background import Background
from s2studio.worker.servers import KINDS, FleetTarget, ServerTarget, probe_server, store_key


class RenderOnBox(QGroupBox):
    target_chosen = Signal(object)
    """`ServerTarget` to render on a server, `FleetTarget` on several engines, None for this computer (after "Use"
    or choosing the computer)."""

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
        self.where.addItem("This computer and servers", "fleet")
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
        self.kind = QComboBox()
        self.kind.setAccessibleName("Kind of server")
        for kind in KINDS:
            self.kind.addItem(kind, kind)
        self.kind.setCurrentIndex(max(0, self.kind.findData(settings.value("render/kind", "auto"))))
        form.addRow("Kind", self.kind)
        self.slots = QSpinBox()
        self.slots.setRange(1, 64)
        self.slots.setValue(int(settings.value("render/slots", 4)))
        self.slots.setAccessibleName("Requests in flight")
        form.addRow("In flight", self.slots)
        self.engines = QListWidget()
        self.engines.setAccessibleName("Engines")
        self.engines.setMaximumHeight(90)
        self._servers: list[ServerTarget] = []
        for raw in json.loads(str(settings.value("render/fleet", "[]")) or "[]"):
            self._servers.append(ServerTarget(**raw))
            self.engines.addItem(self._servers[-1].describe())
        form.addRow("Engines", self.engines)
        edit = QHBoxLayout()
        self.add_button = QPushButton("Add")
        self.remove_button = QPushButton("Remove")
        edit.addWidget(self.add_button)
        edit.addWidget(self.remove_button)
        form.addRow(edit)
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
        self.engines_status = QLabel("")
        self.engines_status.setWordWrap(True)
        self.engines_status.setAccessibleName("Engines status")
        column.addWidget(self.engines_status)
        self.where.setCurrentIndex(max(0, self.where.findData(settings.value("render/on", "local"))))
        self._sync()
        self.where.currentIndexChanged.connect(self._where_changed)
        self.test_button.clicked.connect(self.test_connection)
        self.use_button.clicked.connect(self._use)
        self.add_button.clicked.connect(self.add_server)
        self.remove_button.clicked.connect(self._remove_server)
        self._probe = Background("test-connection", self)
        self._probe.done.connect(self._show_result)

    def _form(self) -> ServerTarget | None:
        kind = str(self.kind.currentData())
        if not self.url.text().strip() and kind != "fishcloud":
            return None
        return ServerTarget(self.url.text().strip(), self.key.text().strip(), self.model.text().strip() or "s2-pro",
                            kind, self.slots.value())

    def target(self) -> ServerTarget | FleetTarget | None:
        where = self.where.currentData()
        if where == "fleet":
            return FleetTarget(tuple(self._servers))
        return self._form() if where == "server" else None

    def add_server(self) -> None:
        target = self._form()
        if target is None:
            self._show("Type the server's address first, e.g. http://gpu-box:8000")
            return
        if target.kind == "fishcloud" and target.api_key:  # the cloud's key lives in the keyring, not in settings
            store_key(target.api_key)
            target = ServerTarget(target.url, "", target.model, target.kind, target.slots)
        self._servers.append(target)
        self.engines.addItem(target.describe())
        self._remember()

    def _remove_server(self) -> None:
        row = self.engines.currentRow()
        if 0 <= row < len(self._servers):
            del self._servers[row]
            self.engines.takeItem(row)
            self._remember()

    def show_engines(self, lines: list[str]) -> None:
        """The live line of each engine of the fleet (lines done, failures, speed), while it renders."""
        self.engines_status.setText("\n".join(lines))

    def follow_engines(self, lines: Callable[[], list[str]]) -> None:
        """Show the fleet's live lines, read each second (plain strings)."""
        self._engines_timer = QTimer(self, interval=1000)
        self._engines_timer.timeout.connect(lambda: self.show_engines(lines()))
        self._engines_timer.start()

    def _sync(self) -> None:
        where = self.where.currentData()
        for w in (self.url, self.key, self.model, self.kind, self.test_button, self.use_button):
            w.setEnabled(where != "local")
        for w in (self.slots, self.engines, self.add_button, self.remove_button):
            w.setEnabled(where == "fleet")
        self.use_button.setText("Use these engines" if where == "fleet" else "Use this server")

    def _remember(self) -> None:
        s = self._settings
        s.setValue("render/on", self.where.currentData())
        s.setValue("render/url", self.url.text().strip())
        s.setValue("render/key", self.key.text().strip())
        s.setValue("render/model", self.model.text().strip())
        s.setValue("render/kind", self.kind.currentData())
        s.setValue("render/slots", self.slots.value())
        s.setValue("render/fleet", json.dumps([t.__dict__ for t in self._servers]))

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
        if isinstance(target, FleetTarget) and not target.servers:
            self._show("Add a server to the engines first (type its address, then Add)")
            return
        if target is None:
            self._show("Type the server's address first, e.g. http://gpu-box:8000")
            return
        self._remember()
        self.target_chosen.emit(target)

    def test_connection(self) -> None:
        target = self._form()
        if target is None:
            self._show("Type the server's address first, e.g. http://gpu-box:8000")
            return
        self._show(f"Connecting to {target.url} …")
        self.test_button.setEnabled(False)
        self._probe.start(lambda task: probe_server(target, task.cancel))

    def _show_result(self, message: object, error: str) -> None:
        server = self.where.currentData() != "local"
        if server:
            self._show(str(message) if not error else f"Not connected: {error}")
        self.test_button.setEnabled(server)
