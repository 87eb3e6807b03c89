"""The model page as a new user meets it: the demo model is used in one click, Enter never cancels, File ▸
Model… shows the model in use, and an offline download says so in words."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from s2studio.ui.dialogs import model_page
from s2studio.ui.dialogs.model_page import ModelPage, download_error
from ui_helpers import close_studio, fake_engine, on_modal, open_studio


def fake_model(folder: Path, demo: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer.json", "model.safetensors", "codec.pth"):
        (folder / name).write_text("{}")
    if demo:
        (folder / "README.md").write_text("A tiny model with random weights.")
    return folder


def test_the_demo_model_is_used_in_one_click(qtbot, tmp_path, monkeypatch):
    monkeypatch.setattr(model_page, "_write_demo", lambda task, dest: fake_model(dest))
    page = ModelPage(tmp_path / "models")
    qtbot.addWidget(page)
    page.show()
    qtbot.mouseClick(page.demo_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.result() == ModelPage.DialogCode.Accepted, timeout=5000)
    assert page.chosen == tmp_path / "models" / "demo-tiny" and not page.isVisible()


def test_enter_uses_the_folder_even_with_cancel_focused(qtbot, tmp_path):
    page = ModelPage(tmp_path / "models")
    qtbot.addWidget(page)
    page.show()
    page.folder.setText(str(fake_model(tmp_path / "m", demo=False)))
    cancel = page.buttons.button(page.buttons.StandardButton.Cancel)
    cancel.setFocus()
    qtbot.keyClick(cancel, Qt.Key.Key_Return)
    assert page.result() == ModelPage.DialogCode.Accepted and page.chosen == tmp_path / "m"


def test_enter_after_the_demo_model_leaves_the_studio_with_a_loaded_model(qtbot, tmp_path, monkeypatch):
    """The first run as a new user meets it: no model, the page opens, "Use demo model", then Enter (which
    once hit the focused Cancel and left the studio with no model)."""
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from s2studio import app

    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(model_page, "_write_demo", lambda task, dest: fake_model(dest))
    app.make_application()
    QSettings().clear()
    w = app.build_window("fake", factory=fake_engine)
    qtbot.addWidget(w)
    w.projects.ask = False
    w.show()
    assert w.model.info is None
    pages: list[ModelPage] = []

    def use_demo(page: ModelPage) -> None:
        pages.append(page)
        page.buttons.button(page.buttons.StandardButton.Cancel).setFocus()  # where Enter once landed
        qtbot.mouseClick(page.demo_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: not page.isVisible() or page.demo_button.isEnabled(), timeout=5000)
        if page.isVisible():  # the page stayed open after the demo: Enter goes to it
            qtbot.keyClick(QApplication.focusWidget() or page, Qt.Key.Key_Return)

    on_modal(qtbot, ModelPage, use_demo)
    w.actions_by_name["choose_model"].trigger()  # returns once the page has closed
    assert pages and pages[0].result() == ModelPage.DialogCode.Accepted
    qtbot.keyClick(QApplication.focusWidget() or w, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: w.model.info is not None and not w.model.busy, timeout=5000)
    assert QApplication.activeModalWidget() is None
    assert w.ctx.model_dir == tmp_path / "data" / "models" / "demo-tiny"
    assert w.ctx.settings.value("model/dir") == str(tmp_path / "data" / "models" / "demo-tiny")
    close_studio(w)


def test_file_model_shows_the_model_in_use_and_the_accepted_licence(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, fake_engine)
    w.ctx.model_dir = fake_model(tmp_path / "s2", demo=False)
    w.ctx.settings.setValue("model/licence_accepted", True)
    seen: dict = {}

    def look(page: ModelPage) -> None:
        seen.update(intro=page.findChildren(model_page.QLabel)[0].text(), folder=page.folder.text(),
                    licence=page.accept_license.isChecked(), verdict=page.verdict.text())
        page.reject()

    on_modal(qtbot, ModelPage, look)
    w.actions_by_name["choose_model"].trigger()
    assert seen["intro"].startswith("<h3>Model in use: fake</h3>") and str(tmp_path / "s2") in seen["intro"]
    assert seen["folder"] == str(tmp_path / "s2") and seen["licence"] and seen["verdict"].startswith("✓")
    assert w.model.info is not None  # cancelling keeps the model
    close_studio(w)


class LocalEntryNotFoundError(Exception):
    """huggingface_hub's offline error, by name (the page reads the name, not the type)."""


class GatedRepoError(Exception):
    pass


@pytest.mark.parametrize(("exc", "start"), [
    (LocalEntryNotFoundError("Got: ConnectError [Errno -3] Temporary failure in name resolution"),
     "Cannot reach huggingface.co: check the internet connection"),
    (GatedRepoError("403 Client Error"), "huggingface.co refused the download"),
    (OSError(28, "No space left on device"), "No space left on the disk for the model"),
])
def test_download_errors_say_what_to_do(exc, start):
    message = download_error(exc)
    assert message.startswith(start) and "Error:" not in message
