"""Generation settings: seed, temperature, top-p/top-k, max frames, chunking, device, precision."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QDoubleSpinBox, QFormLayout, QHBoxLayout, QLabel, QSpinBox, QWidget

from s2studio.state.project import GenerationSettings


class SettingsPanel(QWidget):
    settings_changed = Signal(object)
    """`GenerationSettings` after any edit."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("settingsPanel")
        self.setAccessibleName("Generation settings")
        form = QFormLayout(self)
        form.setContentsMargins(4, 4, 4, 4)
        self.seed_mode = self._combo([("Random per take", "random"), ("Fixed", "fixed")], "Seed mode")
        self.seed = QSpinBox()
        self.seed.setRange(0, 2**31 - 1)
        self.seed.setAccessibleName("Seed")
        seed_row = QHBoxLayout()
        seed_row.addWidget(self.seed_mode, 1)
        seed_row.addWidget(self.seed, 1)
        form.addRow("Seed", seed_row)
        self.temperature = self._double(0.05, 1.95, 0.05, "Temperature")
        form.addRow("Temperature", self.temperature)
        self.top_p = self._double(0.05, 1.0, 0.05, "Top-p")
        form.addRow("Top-p", self.top_p)
        self.top_k = QSpinBox()
        self.top_k.setRange(1, 4096)
        self.top_k.setAccessibleName("Top-k")
        form.addRow("Top-k", self.top_k)
        self.max_frames = QSpinBox()
        self.max_frames.setRange(16, 8192)
        self.max_frames.setSingleStep(64)
        self.max_frames.setSuffix(" frames")
        self.max_frames.setAccessibleName("Maximum frames per line")
        form.addRow("Max length", self.max_frames)
        self.batching = self._combo([("One line at a time", "line"), ("Upstream batches", "upstream")], "Chunking")
        form.addRow("Chunking", self.batching)
        self.device = self._combo([("Automatic", "auto"), ("CPU", "cpu"), ("CUDA", "cuda"), ("Apple (MPS)", "mps")],
                                  "Device")
        form.addRow("Device", self.device)
        self.precision = self._combo([("Automatic", "auto"), ("fp32 (exact)", "fp32"), ("bf16 (fast)", "bf16")],
                                     "Precision")
        form.addRow("Precision", self.precision)
        self.speed = self._combo([("Exact (matches upstream)", "exact"), ("Fast", "fast")], "Speed")
        form.addRow("Speed", self.speed)
        self.quantize = self._combo([("Off", "none"), ("int8 weights (S2 Pro: 5.1 GB, faster)", "int8"),
                                     ("int4 weights (S2 Pro: 3.2 GB, fastest)", "int4")], "Quantization")
        self.quantize.setToolTip("S2 Pro's weights: 9.1 GB in bf16, 5.1 GB with int8, 3.2 GB with int4 "
                                 "(2.1 GB of int4 layers and 1.0 GB of embedding tables); the codes differ a little")
        form.addRow("Quantization", self.quantize)
        self.threads = QSpinBox()
        self.threads.setRange(0, 256)
        self.threads.setSpecialValueText("Automatic (free cores)")
        self.threads.setAccessibleName("CPU threads")
        self.threads.setToolTip("CPU threads for the model; automatic uses the cores that were free at start")
        form.addRow("CPU threads", self.threads)
        note = QLabel("Device, precision, speed, quantization and threads reload the model.")
        note.setWordWrap(True)
        note.setEnabled(False)
        form.addRow(note)
        self._loading = False
        self.set_settings(GenerationSettings())
        for w in (self.seed_mode, self.batching, self.device, self.precision, self.speed, self.quantize):
            w.currentIndexChanged.connect(self._changed)
        for w in (self.seed, self.top_k, self.max_frames, self.threads):
            w.valueChanged.connect(self._changed)
        for w in (self.temperature, self.top_p):
            w.valueChanged.connect(self._changed)

    @staticmethod
    def _combo(items: list[tuple[str, str]], name: str) -> QComboBox:
        box = QComboBox()
        box.setAccessibleName(name)
        for label, value in items:
            box.addItem(label, value)
        return box

    @staticmethod
    def _double(lo: float, hi: float, step: float, name: str) -> QDoubleSpinBox:
        box = QDoubleSpinBox()
        box.setRange(lo, hi)
        box.setSingleStep(step)
        box.setDecimals(2)
        box.setAccessibleName(name)
        return box

    def set_settings(self, s: GenerationSettings) -> None:
        self._loading = True
        try:
            for box, value in ((self.seed_mode, s.seed_mode), (self.batching, s.batching), (self.device, s.device),
                               (self.precision, s.precision), (self.speed, s.speed), (self.quantize, s.quantize)):
                box.setCurrentIndex(max(0, box.findData(value)))
            self.seed.setValue(s.seed)
            self.temperature.setValue(s.temperature)
            self.top_p.setValue(s.top_p)
            self.top_k.setValue(s.top_k)
            self.max_frames.setValue(s.max_frames)
            self.threads.setValue(s.threads)
            self.seed.setEnabled(s.seed_mode == "fixed")
        finally:
            self._loading = False

    def settings(self) -> GenerationSettings:
        return replace(GenerationSettings(), seed_mode=self.seed_mode.currentData(), seed=self.seed.value(),
                       temperature=round(self.temperature.value(), 2), top_p=round(self.top_p.value(), 2),
                       top_k=self.top_k.value(), max_frames=self.max_frames.value(),
                       batching=self.batching.currentData(), device=self.device.currentData(),
                       precision=self.precision.currentData(), speed=self.speed.currentData(),
                       quantize=self.quantize.currentData(), threads=self.threads.value())

    def _changed(self) -> None:
        self.seed.setEnabled(self.seed_mode.currentData() == "fixed")
        if not self._loading:
            self.settings_changed.emit(self.settings())
