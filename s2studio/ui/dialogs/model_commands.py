"""The model as the person handles it: File ▸ Model…, Settings ▸ Render on, the settings that load it again, and
what the window says when a load fails.

The rule of issue 14: choosing a device or a mode this computer cannot run never leaves the studio without its
model, and is never remembered. The model controller loads the configuration that worked again at once
(`ModelController.fell_back`); here the settings shown and the project's go back to it, and a dialog says what
failed and what the studio went back to. What is remembered for the next start (QSettings `generation`) holds
the loading settings of the configuration that last loaded, only ever those.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

from PySide6.QtCore import QObject, QSettings, Signal
from PySide6.QtWidgets import QMessageBox, QWidget

from s2studio.engine import api
from s2studio.state.project import GenerationSettings
from s2studio.ui.control.context import StudioContext
from s2studio.ui.control.document import Document
from s2studio.ui.control.model import LoadConfig, ModelController
from s2studio.ui.inspector.settings_panel import DEVICES, SettingsPanel, mode_of
from s2studio.ui.status import StatusPanel
from s2studio.worker.servers import engine_choice



STUDIO_DEFAULTS = replace(GenerationSettings(), max_frames=1077)
"""A new studio's settings: the longest line 50.0 s (1077 frames at 21.53 a second), a round figure in Settings
where the engine's default 1024 frames reads 47.6 s. Projects keep the settings they were saved with."""


def remembered_settings(settings: QSettings) -> GenerationSettings:
    """The settings saved at the last change (none yet, or a damaged entry: the studio's defaults)."""
    saved = settings.value("generation", "") or ""
    if not saved:
        return STUDIO_DEFAULTS
    try:
        return GenerationSettings.from_dict(json.loads(saved))
    except ValueError:
        return STUDIO_DEFAULTS


def describe(config: LoadConfig) -> str:
    """A configuration as the settings panel names it: "Fast (recommended) on NVIDIA GPU (CUDA)"."""
    s = config.loading
    mode = mode_of(s)
    device = dict(DEVICES).get(s.device, s.device)
    return f"{mode.label if mode else f'{s.precision}, {s.speed} loop, weights {s.quantize}'} on {device}"


class ModelCommands(QObject):
    message = Signal(str, int)
    """(status bar text, milliseconds)."""

    def __init__(self, window: QWidget, ctx: StudioContext, model: ModelController, document: Document,
                 panel: SettingsPanel, status: StatusPanel) -> None:
        super().__init__(window)
        self.window, self.ctx, self.model, self.document, self.panel, self.status = \
            window, ctx, model, document, panel, status
        self.reload_pending = False
        """Loading settings changed while a render ran: the model loads again when it ends."""
        self._loaded_before = remembered_settings(ctx.settings)
        """The loading settings to remember until a configuration of this session has loaded."""
        panel.bind(lambda: document.project.settings)  # the project owns the settings; the panel shows them
        document.settings_changed.connect(panel.refresh)
        document.replaced.connect(panel.refresh)
        model.fell_back.connect(self._fell_back)
        model.ready.connect(lambda _info: self.remember())

    # -- loading ---------------------------------------------------------------------------------

    def load(self, model_dir: Path) -> None:
        self.ctx.model_dir = model_dir
        self.status.model_loading(0.0)
        self.model.load(model_dir, self.document.project.settings)

    def render_on_target(self, target: object) -> None:
        """Settings ▸ Render on: load through the engine switch on a server (a `ServerTarget`) or on this
        computer (None: the remembered model folder, else the model page). The fake engine has no switch."""
        switch = self.ctx.engine_switch
        if switch is None:
            self.message.emit("Rendering on a server needs the real engine (not S2STUDIO_ENGINE=fake).", 10000)
            return
        switch.choose(engine_choice(target))  # type: ignore[arg-type]
        model_dir = self.ctx.model_dir
        if target is None and model_dir is None:
            self.open_model_page()
            return
        self.load(model_dir or Path("server"))
        self.ctx.model_dir = model_dir

    def settings_changed(self, settings: GenerationSettings, rendering: bool) -> None:
        """The settings panel changed: the project takes the settings; loading ones load the model again (after
        the render, when one runs)."""
        reload = settings.loading != self.document.project.settings.loading
        self.document.set_settings(settings)
        if reload and self.ctx.model_dir is not None:
            if rendering:
                self.reload_pending = True
                self.message.emit("The model loads with the new settings when this render ends.", 8000)
            else:
                self.load(self.ctx.model_dir)
        self.remember()

    def render_ended(self) -> None:
        if self.reload_pending and self.ctx.model_dir is not None:
            self.reload_pending = False
            self.load(self.ctx.model_dir)

    def remember(self) -> None:
        """Save the settings for the next start, with the loading settings of the configuration that last loaded."""
        working = self.model.working
        loaded = working.loading if working is not None else self._loaded_before.loading
        saved = replace(self.document.project.settings, **vars(loaded))
        self.ctx.settings.setValue("generation", json.dumps(asdict(saved)))

    def _fell_back(self, error: str, failed: LoadConfig, working: LoadConfig) -> None:
        """A load failed; the one that worked is loading again: the settings go back to it, and the person is told."""
        self.document.set_settings(replace(self.document.project.settings, **vars(working.loading)))
        self.remember()
        box = QMessageBox(QMessageBox.Icon.Warning, "The model could not be loaded",
                          f"S2 Studio could not load the model with “{describe(failed)}”:\n\n{error}\n\n"
                          f"It went back to “{describe(working)}”, which worked.",
                          QMessageBox.StandardButton.Ok, self.window)
        box.setObjectName("loadFailedBox")
        box.open()

    # -- the model page --------------------------------------------------------------------------

    def open_model_page(self) -> None:
        from s2studio.ui.dialogs.model_page import ModelPage  # noqa: PLC0415 - rarely opened

        settings = self.ctx.settings
        info = self.model.info
        current = self.ctx.model_dir if info is not None else None
        page = ModelPage(self.ctx.data_dir / "models", self.window, current, info.name if info else "",
                         licence_accepted=settings.value("model/licence_accepted", "false") in ("true", True))
        accepted = page.exec()
        chosen = page.chosen
        settings.setValue("model/licence_accepted", page.accept_license.isChecked())
        page.deleteLater()
        if accepted and chosen is not None:
            settings.setValue("model/dir", str(chosen))
            self.load(chosen)
        elif self.model.info is None and not self.model.busy:
            self.status.set_model(None, "No model: File ▸ Model… (Ctrl+Shift+M) to choose one")

    def failed_without_fallback(self, error: str) -> None:
        """A load failed and nothing loaded before it: say why, in a dialog (the status bar keeps "No model")."""
        if "cancelled" in error:
            return
        box = QMessageBox(QMessageBox.Icon.Warning, "The model could not be loaded",
                          f"{error}\n\nChoose another folder (File ▸ Model…) or other settings.",
                          QMessageBox.StandardButton.Ok, self.window)
        box.setObjectName("loadFailedBox")
        box.open()

    def ready(self, info: api.ModelInfo) -> None:
        from s2studio.ui.dialogs.model_page import is_demo  # noqa: PLC0415

        self.status.model_ready(info, self.ctx.model_dir is not None and is_demo(self.ctx.model_dir))
