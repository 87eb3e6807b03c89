"""Help ▸ About S2 Studio: the version, the licence of the code and the one of the model's weights."""

from __future__ import annotations

import html
import sys

from PySide6 import __version__ as pyside_version
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QWidget

from s2studio import __version__

WEIGHTS_LICENSE_URL = "https://huggingface.co/fishaudio/s2-pro/blob/main/LICENSE.md"


def about_text(model: str | None = None) -> str:
    """The About box's text (rich text)."""
    loaded = f"<p>Model loaded now: {html.escape(model)}</p>" if model else ""
    return (f"<h3>S2 Studio {__version__}</h3>"
            "<p>A studio for Fish Audio's S2 Pro text-to-speech, running on this computer.</p>"
            "<p><b>The studio's code</b> is licensed under the Apache License 2.0.</p>"
            "<p><b>The S2 Pro model weights</b> are Fish Audio's, under the "
            f"<a href='{WEIGHTS_LICENSE_URL}'>Fish Audio Research License</a>: research and non-commercial use; "
            "commercial use needs a licence from Fish Audio. Speech made with them is marked "
            "“AI-generated speech” in exported files.</p>"
            f"{loaded}"
            f"<p><small>Python {sys.version.split()[0]} · Qt for Python {pyside_version}</small></p>")


def show_about(parent: QWidget, model: str | None = None) -> QMessageBox:
    box = QMessageBox(QMessageBox.Icon.Information, "About S2 Studio", about_text(model),
                      QMessageBox.StandardButton.Close, parent)
    box.setObjectName("aboutBox")
    box.setTextFormat(Qt.TextFormat.RichText)
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
    box.open()
    return box
