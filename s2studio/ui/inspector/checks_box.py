"""Settings ▸ Checks: the thresholds of the take checks (`checks.settings.CheckSettings`), one row per check with
where it warns and where it fails, and Restore Defaults. Kept in the window's QSettings (`checks/thresholds`, as
JSON); `thresholds` is the one reader. A change is said once the person stops turning the spin boxes
(`changed`), and every take whose result was made with other thresholds is checked again.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, fields, replace

from PySide6.QtCore import QSettings, QTimer, Signal
from PySide6.QtWidgets import (QDoubleSpinBox, QGridLayout, QGroupBox, QLabel, QPushButton, QSizePolicy, QVBoxLayout,
                               QWidget)

from s2studio.checks.settings import LIMITS, SETTINGS, CheckSettings
from s2studio.errors import UserError

log = logging.getLogger(__name__)

KEY = "checks/thresholds"
SPIN_WIDTH = 84
"""The spin boxes' widest: the section fits the inspector's narrow column."""
SETTLE_MS = 700
"""How long after the last turn of a spin box the new thresholds are applied (each change re-checks takes)."""


@dataclass(frozen=True)
class Row:
    label: str
    warn: str
    """The field that warns (`CheckSettings`), or "" for a row with one threshold."""
    fail: str
    suffix: str
    scale: float = 1.0
    """Shown = stored × scale (a fraction shown in per cent)."""
    decimals: int = 2


ROWS = (
    Row("Words (errors)", "words_warn", "words_fail", " %", 100, 0),
    Row("Pace (× off)", "pace_warn", "pace_fail", " ×"),
    Row("Fade", "fade_warn_db", "fade_fail_db", " dB", decimals=1),
    Row("Pauses", "silence_warn_s", "silence_fail_s", " s", decimals=1),
    Row("Clipping", "clip_warn", "clip_fail", " %", 100, 3),
    Row("Voice (alike)", "voice_warn", "voice_fail", ""),
    Row("End: quiet after", "", "end_quiet_ms", " ms", decimals=0),
)


def thresholds(settings: QSettings | None) -> CheckSettings:
    """The thresholds chosen in Settings ▸ Checks (the defaults when none are stored or they cannot be read)."""
    raw = settings.value(KEY, "") if settings is not None else ""
    if not raw:
        return CheckSettings()
    try:
        return SETTINGS.parse(json.loads(str(raw)), "checks")
    except (ValueError, UserError) as exc:
        log.warning("the stored check thresholds cannot be read (%s); the defaults are used", exc)
        return CheckSettings()


class ChecksBox(QGroupBox):
    changed = Signal(object)
    """New thresholds (a `CheckSettings`), stored already."""

    def __init__(self, settings: QSettings, parent: QWidget | None = None) -> None:
        super().__init__("Checks", parent)
        self.setObjectName("checksBox")
        self._settings = settings
        column = QVBoxLayout(self)
        column.setContentsMargins(6, 6, 6, 6)
        grid = QGridLayout()
        column.addLayout(grid)
        grid.addWidget(QLabel("Warn"), 0, 1)
        grid.addWidget(QLabel("Fail"), 0, 2)
        self.spins: dict[str, QDoubleSpinBox] = {}
        for r, row in enumerate(ROWS, 1):
            label = QLabel(row.label)
            label.setWordWrap(True)  # a narrow inspector wraps the name, never cuts the spin boxes off
            grid.addWidget(label, r, 0)
            for c, name in ((1, row.warn), (2, row.fail)):
                if name:
                    self.spins[name] = spin = self._spin(row, name)
                    grid.addWidget(spin, r, c)
        self.note = QLabel("Each take is checked when it is made, and again when these change. Voice warns and "
                           "fails below its numbers, the others above them; the fade is the last third against the "
                           "first.")
        self.note.setWordWrap(True)
        self.note.setEnabled(False)
        column.addWidget(self.note)
        self.defaults = QPushButton("Restore Defaults")
        self.defaults.clicked.connect(lambda: self.show_settings(CheckSettings(), store=True))
        column.addWidget(self.defaults)
        self._settle = QTimer(self, singleShot=True, interval=SETTLE_MS)
        self._settle.timeout.connect(self._store)
        self.show_settings(thresholds(settings))
        for spin in self.spins.values():
            spin.valueChanged.connect(lambda _v: self._settle.start())

    @staticmethod
    def _spin(row: Row, name: str) -> QDoubleSpinBox:
        spin = QDoubleSpinBox()
        spin.setObjectName(name)
        lo, hi = LIMITS[name]
        spin.setRange(lo * row.scale, hi * row.scale)
        spin.setDecimals(row.decimals)
        spin.setSingleStep(10 ** -row.decimals if row.decimals else 1)
        spin.setSuffix(row.suffix)
        spin.setMaximumWidth(SPIN_WIDTH)
        spin.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)  # may shrink below its hint
        spin.setAccessibleName(f"{row.label}: {'warn' if name == row.warn else 'fail'} at")
        return spin

    def _scale(self, name: str) -> float:
        return next(r.scale for r in ROWS if name in (r.warn, r.fail))

    def value(self) -> CheckSettings:
        """What the spin boxes say."""
        return replace(CheckSettings(), **{n: spin.value() / self._scale(n) for n, spin in self.spins.items()})

    def show_settings(self, settings: CheckSettings, store: bool = False) -> None:
        for f in fields(CheckSettings):
            spin = self.spins[f.name]
            spin.blockSignals(True)
            spin.setValue(getattr(settings, f.name) * self._scale(f.name))
            spin.blockSignals(False)
        if store:
            self._store()

    def _store(self) -> None:
        settings = self.value()
        if settings == thresholds(self._settings):
            return
        self._settings.setValue(KEY, json.dumps(asdict(settings)))
        self.changed.emit(settings)
