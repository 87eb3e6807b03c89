"""Settings ▸ generation: how the model runs and how it samples, in words a new user understands.

One control chooses between speed and exactness (`MODES`: precision, decode loop and weight quantization together,
the three of `GenerationSettings` that change how the answer is computed, never what is asked); the device says
which ones this computer has (the engine thread reports them, `set_devices`) and which not, and why; the length
limit is in seconds (kept in frames, the engine's unit, exactly as the project file holds it); every control has a
line of help. The panel shows and edits the project's `GenerationSettings` without a copy of its own: it reads them
from their owner (`bind`: the project document) and says each edit (`settings_changed`). Ranges, steps and choices
are `s2studio.settings`' table's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from PySide6.QtCore import Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (QComboBox, QDoubleSpinBox, QHBoxLayout, QLabel, QSpinBox, QVBoxLayout,
                               QWidget)

from s2studio.settings import CHOICES, LIMITS, Loading
from s2studio.state.project import GenerationSettings
from s2studio.units import FRAMES_PER_SECOND


@dataclass(frozen=True)
class Mode:
    key: str
    label: str
    help: str
    precision: str
    speed: str
    quantize: str


MODES: tuple[Mode, ...] = (
    Mode("exact", "Exact (slowest)",
         "Computes every step as Fish Audio's own code (the reference implementation) does. On the CPU the result "
         "is identical to it, sample for sample; use it to compare, or when a line must be reproducible "
         "anywhere.", "fp32", "exact", "none"),
    Mode("fast", "Fast (recommended)",
         "The same model in a faster loop: reuses the work shared between lines and, on a GPU, runs in 16-bit. "
         "Sounds the same; the samples differ slightly from the exact mode's.", "auto", "fast", "none"),
    Mode("int8", "Faster, less memory (8-bit)",
         "Stores the model's weights in 8 bits: about half the memory (S2 Pro: 5.1 GB of weights against 9.1), "
         "and faster where memory is the limit. "
         "A very slight loss of quality.", "auto", "fast", "int8"),
    Mode("int4", "Fastest, least memory (4-bit)",
         "Stores the weights in 4 bits: S2 Pro's weights take 3.2 GB (2.1 GB of 4-bit layers, 1.0 GB of embedding "
         "tables), for small GPUs and laptops, and the fastest on a CPU. Some loss of "
         "quality; try a line before a long render.", "auto", "fast", "int4"),
)
DEVICE_LABELS = {"auto": "Automatic (the GPU when there is one)", "cpu": "This computer's processor (CPU)",
                 "cuda": "NVIDIA GPU (CUDA)", "mps": "Apple GPU (Metal)"}
DEVICES = tuple((key, DEVICE_LABELS[key]) for key in CHOICES["device"])
SEED_MODE_LABELS = {"random": "Random, every take", "fixed": "Fixed"}
BATCHING_LABELS = {"line": "One line at a time (recommended)",
                   "upstream": "Groups of lines, as the reference implementation"}
HELP = {
    "seed": "Random: every take differs. Fixed: the same seed and settings give the same take again.",
    "temperature": "How adventurous the delivery is: lower is steadier, higher more varied "
                   f"({LIMITS['temperature'].default:g} is the default).",
    "top_p": "Keeps only the likeliest choices that together make up this share "
             f"({LIMITS['top_p'].default:g} is the default).",
    "top_k": f"Keeps at most this many choices at each step ({LIMITS['top_k'].default:g} is the default).",
    "length": "A line stops here at the latest; a line that reaches it is cut off (raise it for long lines).",
    "chunking": "One line at a time gives each line its own take. Groups of lines follow the reference "
                "implementation's batching: fewer, longer takes.",
    "device": "Where the model runs. Choices this computer lacks are greyed out with the reason.",
    "threads": "Processor threads the model uses. Automatic takes the cores that were free when the studio "
               "started; fewer leave more to other programs.",
    "max_batch": "Lines the model renders side by side: scenes (a # heading starts one) and takes. Automatic is "
                 "what the memory holds (at most 8 on a processor); more streams cost each one a little speed.",
}


def mode_of(settings: Loading) -> Mode | None:
    """The mode whose precision, loop and quantization the settings hold (None: another combination, e.g. from
    an older project or the command line)."""
    return next((m for m in MODES if (m.precision, m.speed, m.quantize) ==
                 (settings.precision, settings.speed, settings.quantize)), None)


def fit_narrow(box: QComboBox) -> None:
    """Let a combo box shrink to the inspector's width (its long choices are read whole in the list and the
    tooltip) instead of widening the panel past the window, which would clip every row on the right."""
    box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    box.setMinimumContentsLength(12)
    box.setToolTip(box.currentText())
    box.currentTextChanged.connect(box.setToolTip)


class NameAbove(QVBoxLayout):
    """Rows of a name above its field. A box layout, not a QFormLayout that wraps its rows: the form's height for
    a width came out short once a help text had changed, squeezing the wrapped texts of every row."""

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self.setContentsMargins(0, 0, 0, 0)
        self.setSpacing(2)

    def addRow(self, name: str | QWidget, field: QWidget | None = None) -> None:  # noqa: N802 - QFormLayout's name
        if field is None:
            assert isinstance(name, QWidget)
            self.addWidget(name)
            return
        label = QLabel(str(name))
        label.setBuddy(field)
        self.addWidget(label)
        self.addWidget(field)


class SettingsPanel(QWidget):
    settings_changed = Signal(object)
    """`GenerationSettings` after any edit."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("settingsPanel")
        self.setAccessibleName("Generation settings")
        form = NameAbove(self)  # each name above its field: the inspector is narrow, and the fields and their
        # help get its whole width
        self._owner: Callable[[], GenerationSettings] = GenerationSettings
        """Where the settings are (`bind`); until bound, the defaults."""

        self.mode = QComboBox()
        self.mode.setAccessibleName("Speed or exactness")
        for m in MODES:
            self.mode.addItem(m.label, m.key)
        self.mode.addItem("", "custom")  # shown only for a combination no mode has
        self.mode_help = self._help("")
        form.addRow("Speed", self._stack(self.mode, self.mode_help))
        self.device = QComboBox()
        self.device.setAccessibleName("Device")
        for key, label in DEVICES:
            self.device.addItem(label, key)
        form.addRow("Device", self._stack(self.device, self._help(HELP["device"])))
        self.threads = self._spin("threads", "CPU threads")
        self.threads.setSpecialValueText("Automatic (the free cores)")
        form.addRow("CPU threads", self._stack(self.threads, self._help(HELP["threads"])))
        self.max_batch = self._spin("max_batch", "Lines at once")
        self.max_batch.setSpecialValueText("Automatic (what the memory holds)")
        form.addRow("Lines at once", self._stack(self.max_batch, self._help(HELP["max_batch"])))
        reload_note = self._help("Changing the speed, the device, the threads or the lines at once loads the model "
                                 "again (seconds to a minute).")
        reload_note.setContentsMargins(0, 0, 0, 6)
        form.addRow(reload_note)

        self.seed_mode = self._combo("seed_mode", SEED_MODE_LABELS, "Seed mode")
        self.seed = self._spin("seed", "Seed")
        seed_row = QHBoxLayout()
        seed_row.addWidget(self.seed_mode, 3)
        seed_row.addWidget(self.seed, 2)
        form.addRow("Seed", self._stack(seed_row, self._help(HELP["seed"])))
        self.temperature = self._double("temperature", "Temperature")
        form.addRow("Temperature", self._stack(self.temperature, self._help(HELP["temperature"])))
        self.top_p = self._double("top_p", "Top-p")
        form.addRow("Top-p", self._stack(self.top_p, self._help(HELP["top_p"])))
        self.top_k = self._spin("top_k", "Top-k")
        form.addRow("Top-k", self._stack(self.top_k, self._help(HELP["top_k"])))
        self.max_seconds = QDoubleSpinBox()
        self.max_seconds.setDecimals(1)
        frames = LIMITS["max_frames"]
        self.max_seconds.setRange(round(frames.lo / FRAMES_PER_SECOND, 1) + 0.1,
                                  round(frames.hi / FRAMES_PER_SECOND, 1))
        self.max_seconds.setSingleStep(5.0)
        self.max_seconds.setSuffix(" s")
        self.max_seconds.setAccessibleName("Longest line, in seconds")
        form.addRow("Longest line", self._stack(self.max_seconds, self._help(HELP["length"])))
        self.batching = self._combo("batching", BATCHING_LABELS, "Chunking")
        form.addRow("Lines", self._stack(self.batching, self._help(HELP["chunking"])))
        for box in (self.mode, self.device, self.seed_mode, self.batching):
            fit_narrow(box)
        self._loading = False
        self.refresh()
        for w in (self.mode, self.device, self.seed_mode, self.batching):
            w.currentIndexChanged.connect(self._changed)
        for w in (self.seed, self.top_k, self.temperature, self.top_p, self.max_seconds, self.threads,
                  self.max_batch):
            w.valueChanged.connect(self._changed)

    # -- building --------------------------------------------------------------------------------

    @staticmethod
    def _help(text: str) -> QLabel:
        label = QLabel(text)
        label.setWordWrap(True)
        label.setObjectName("settingsHelp")
        label.setStyleSheet("#settingsHelp { color: palette(placeholder-text); }")
        return label

    @staticmethod
    def _stack(field: QWidget | QHBoxLayout, help_label: QLabel) -> QWidget:
        box = QWidget()
        column = QVBoxLayout(box)
        column.setContentsMargins(0, 0, 0, 8)
        column.setSpacing(2)
        if isinstance(field, QHBoxLayout):
            column.addLayout(field)
        else:
            column.addWidget(field)
        column.addWidget(help_label)
        field_name = field.accessibleName() if isinstance(field, QWidget) else ""
        help_label.setAccessibleName(f"About {field_name}".strip())
        return box

    @staticmethod
    def _combo(setting: str, labels: dict[str, str], name: str) -> QComboBox:
        box = QComboBox()
        box.setAccessibleName(name)
        for value in CHOICES[setting]:
            box.addItem(labels[value], value)
        return box

    @staticmethod
    def _spin(setting: str, name: str) -> QSpinBox:
        limit = LIMITS[setting]
        box = QSpinBox()
        box.setRange(int(limit.lo), int(limit.hi))
        box.setSingleStep(int(limit.step))
        box.setAccessibleName(name)
        return box

    @staticmethod
    def _double(setting: str, name: str) -> QDoubleSpinBox:
        limit = LIMITS[setting]
        box = QDoubleSpinBox()
        box.setRange(limit.lo, limit.hi)
        box.setSingleStep(limit.step)
        box.setDecimals(2)
        box.setAccessibleName(name)
        return box

    # -- devices -----------------------------------------------------------------------------------

    def set_devices(self, options: Sequence[object]) -> None:
        """What the engine thread found (`api.DeviceOption`s): a device this computer lacks is greyed out, its
        reason beside it and in its tooltip."""
        model = self.device.model()
        assert isinstance(model, QStandardItemModel)
        found = {getattr(o, "name", ""): o for o in options}
        for row, (key, label) in enumerate(DEVICES):
            option = found.get(key)
            item = model.item(row)
            available = option is None or bool(getattr(option, "available", True))
            reason = str(getattr(option, "reason", "")) if option is not None else ""
            item.setEnabled(available)
            item.setText(label if available or not reason else f"{label} — {reason}")
            item.setToolTip(reason)

    def device_available(self, key: str) -> bool:
        model = self.device.model()
        row = self.device.findData(key)
        return row >= 0 and model.item(row).isEnabled()  # type: ignore[union-attr]

    # -- the settings ------------------------------------------------------------------------------

    def bind(self, owner: Callable[[], GenerationSettings]) -> None:
        """Show the settings `owner()` returns, now and on each `refresh` (the project document's, which the window
        sets from `settings_changed`)."""
        self._owner = owner
        self.refresh()

    def refresh(self) -> None:
        """Show the owner's settings again (after they changed elsewhere: another project, a failed load)."""
        self._show(self._owner())

    def _show(self, s: GenerationSettings) -> None:
        self._loading = True
        try:
            mode = mode_of(s)
            custom = self.mode.findData("custom")
            self.mode.setItemText(custom, f"As saved: {s.precision}, {s.speed} loop, weights {s.quantize}")
            self._show_custom(mode is None)
            self.mode.setCurrentIndex(self.mode.findData(mode.key) if mode else custom)
            self.mode_help.setText(mode.help if mode else "A combination set elsewhere (an older project or the "
                                   "command line). Choose a mode above to use one of the studio's.")
            for box, value in ((self.seed_mode, s.seed_mode), (self.batching, s.batching), (self.device, s.device)):
                box.setCurrentIndex(max(0, box.findData(value)))
            self.seed.setValue(s.seed)
            self.temperature.setValue(s.temperature)
            self.top_p.setValue(s.top_p)
            self.top_k.setValue(s.top_k)
            self.max_seconds.setValue(s.max_frames / FRAMES_PER_SECOND)
            self.threads.setValue(s.threads)
            self.max_batch.setValue(s.max_batch)
            self.seed.setEnabled(s.seed_mode == "fixed")
        finally:
            self._loading = False

    def _show_custom(self, show: bool) -> None:
        view = self.mode.view()
        view.setRowHidden(self.mode.findData("custom"), not show)

    def settings(self) -> GenerationSettings:
        """The owner's settings with the panel's edits."""
        s = self._owner()
        mode = next((m for m in MODES if m.key == self.mode.currentData()), None)
        loop = {"precision": mode.precision, "speed": mode.speed, "quantize": mode.quantize} if mode else {}
        seconds = self.max_seconds.value()
        frames = s.max_frames if abs(seconds - s.max_frames / FRAMES_PER_SECOND) < 0.06 else round(seconds * FRAMES_PER_SECOND)
        return replace(s, seed_mode=self.seed_mode.currentData(), seed=self.seed.value(),
                       temperature=round(self.temperature.value(), 2), top_p=round(self.top_p.value(), 2),
                       top_k=self.top_k.value(),
                       max_frames=min(max(frames, int(LIMITS["max_frames"].lo)), int(LIMITS["max_frames"].hi)),
                       batching=self.batching.currentData(), device=self.device.currentData(),
                       threads=self.threads.value(), max_batch=self.max_batch.value(), **loop)

    def _changed(self) -> None:
        self.seed.setEnabled(self.seed_mode.currentData() == "fixed")
        if self._loading:
            return
        settings = self.settings()
        self._show(settings)  # the help follows the mode; a custom combination left behind is hidden
        self.settings_changed.emit(settings)
