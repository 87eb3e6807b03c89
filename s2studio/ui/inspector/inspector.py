"""The window's right-hand column: the tag palette, the selected line's takes, and the settings.

The settings tab holds the generation settings with the Render-on, Transcripts and Checks sections under them, in a
scroll area: with their help text they are taller than a small window, and their rows wrap instead of scrolling
sideways. The three are stacked by a box layout (not rows of the settings' form), which gives each its height for
the width it gets, so a help text or a connection result that grows pushes what is below it down instead of
squashing it. The window reaches the parts by name (`tag_palette`, `takes`, `settings_panel`, `render_on`,
`transcripts_box`, `checks_box`) and switches tabs with `show_tags` / `show_takes` / `show_settings`.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QComboBox, QScrollArea, QTabWidget, QVBoxLayout, QWidget

from s2studio.ui.inspector.checks_box import ChecksBox
from s2studio.ui.inspector.render_on import RenderOnBox
from s2studio.ui.inspector.settings_panel import SettingsPanel, fit_narrow
from s2studio.ui.inspector.tag_palette import TagPalette
from s2studio.ui.inspector.takes_panel import TakesPanel
from s2studio.ui.inspector.transcripts_box import TranscriptsBox


class Inspector(QTabWidget):
    """Tags, Takes and Settings as tabs; `store`: the app's remembered choices (the settings panel is bound to the
    project by the window)."""

    def __init__(self, store: QSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("inspector")
        self.setAccessibleName("Inspector")
        self.tag_palette = TagPalette()
        self.takes = TakesPanel()
        self.settings_panel = SettingsPanel()
        self.render_on = RenderOnBox(store)
        self.transcripts_box = TranscriptsBox(store)
        self.checks_box = ChecksBox(store)
        self.settings_page = QWidget()
        self.settings_page.setObjectName("settingsPage")
        column = QVBoxLayout(self.settings_page)
        column.setContentsMargins(4, 4, 4, 4)
        column.addWidget(self.settings_panel)
        for section in (self.render_on, self.transcripts_box, self.checks_box):
            for box in section.findChildren(QComboBox):
                fit_narrow(box)
            column.addWidget(section)
        column.addStretch(1)
        self.settings_scroll = QScrollArea()
        self.settings_scroll.setObjectName("settingsScroll")
        self.settings_scroll.setWidgetResizable(True)
        self.settings_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.settings_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)  # rows wrap instead
        self.settings_scroll.setWidget(self.settings_page)
        self.addTab(self.tag_palette, "Tags")
        self.addTab(self.takes, "Takes")
        self.addTab(self.settings_scroll, "Settings")

    def show_tags(self) -> None:
        self.setCurrentWidget(self.tag_palette)
        self.tag_palette.filter.setFocus()

    def show_takes(self) -> None:
        self.setCurrentWidget(self.takes)

    def show_settings(self) -> None:
        self.setCurrentWidget(self.settings_scroll)
