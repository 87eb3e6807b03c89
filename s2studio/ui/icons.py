"""The application icon, from the packaged SVG (read with importlib.resources, never a cwd path)."""

from __future__ import annotations

from importlib import resources

from PySide6.QtCore import QByteArray, QSize, Qt
from PySide6.QtGui import QIcon, QImage, QPainter, QPixmap

try:
    from PySide6.QtSvg import QSvgRenderer
except ImportError:  # pragma: no cover - QtSvg ships with PySide6-Essentials
    QSvgRenderer = None  # type: ignore[assignment,misc]


def icon_svg() -> bytes:
    return resources.files("s2studio").joinpath("resources", "icons", "s2studio.svg").read_bytes()


def app_icon() -> QIcon:
    icon = QIcon()
    if QSvgRenderer is None:
        return icon
    renderer = QSvgRenderer(QByteArray(icon_svg()))
    for size in (16, 24, 32, 48, 64, 128, 256):
        image = QImage(QSize(size, size), QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        renderer.render(painter)
        painter.end()
        icon.addPixmap(QPixmap.fromImage(image))
    return icon
