"""The Fine-tune dialog's choices for a run: the LoRA preset, steps, device, how often to save a checkpoint,
batch size and sample length. A voice's first run is a short one; later runs start from its last run's choices
(`ui.control.finetune.remember_run`)."""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox, QFormLayout, QSpinBox, QWidget

FIRST_RUN = {"preset": "r_8_alpha_16", "steps": 100, "device": "auto", "save_every": 25, "batch_size": 2,
             "max_length": 2048, "attach": True}
"""A voice's first run: a short one to hear what a LoRA does (upstream's full run, 200 steps of 4 samples of up to
4096 tokens, is eight times the work: hours on a CPU); later runs start from the voice's last run's choices."""
PRESETS = (("r_8_alpha_16", "Full (r 8, α 16): every layer, upstream's default"),
           ("r_32_alpha_16_fast", "Fast transformer only (r 32, α 16): smaller, quicker"))
DEVICES = (("auto", "Automatic (the GPU if there is one)"), ("cpu", "CPU"), ("cuda", "GPU (CUDA)"))


class RunForm(QFormLayout):
    """The run's choices as a form the dialog lays out; `settings()` is what the trainer is given."""

    def __init__(self) -> None:
        super().__init__()
        self.preset = self._combo(PRESETS, "LoRA preset")
        self.addRow("Preset", self.preset)
        self.steps = self._spin(1, 100_000, FIRST_RUN["steps"], "Training steps")
        self.addRow("Steps", self.steps)
        self.device = self._combo(DEVICES, "Device")
        self.addRow("Device", self.device)
        self.save_every = self._spin(0, 100_000, FIRST_RUN["save_every"], "Save a checkpoint every N steps")
        self.save_every.setSpecialValueText("only at the end")
        self.addRow("Checkpoint every", self.save_every)
        self.batch_size = self._spin(1, 64, FIRST_RUN["batch_size"], "Batch size")
        self.addRow("Batch size", self.batch_size)
        self.max_length = self._spin(64, 8192, FIRST_RUN["max_length"], "Maximum tokens per sample")
        self.max_length.setSingleStep(256)
        self.addRow("Max length", self.max_length)

    @property
    def fields(self) -> tuple[QWidget, ...]:
        return self.preset, self.steps, self.device, self.save_every, self.batch_size, self.max_length

    def choose(self, remembered: dict) -> None:
        """Show `remembered` choices over the first run's (a value the controls cannot take is left as it is)."""
        chosen = {**FIRST_RUN, **remembered}
        for combo, key in ((self.preset, "preset"), (self.device, "device")):
            combo.setCurrentIndex(max(combo.findData(chosen[key]), 0))
        for spin, key in ((self.steps, "steps"), (self.save_every, "save_every"), (self.batch_size, "batch_size"),
                          (self.max_length, "max_length")):
            if isinstance(chosen[key], int) and spin.minimum() <= chosen[key] <= spin.maximum():
                spin.setValue(chosen[key])

    def settings(self) -> dict:
        """What the trainer and its estimate are given."""
        return {"preset": self.preset.currentData(), "steps": self.steps.value(),
                "batch_size": self.batch_size.value(), "max_length": self.max_length.value()}

    def choices(self) -> dict:
        """What is remembered of a run for the voice's next one (besides whether the result was attached)."""
        return {**self.settings(), "device": self.device.currentData(), "save_every": self.save_every.value()}

    @staticmethod
    def _combo(items: tuple[tuple[str, str], ...], name: str) -> QComboBox:
        c = QComboBox()
        for key, label in items:
            c.addItem(label, key)
        c.setAccessibleName(name)
        return c

    @staticmethod
    def _spin(lo: int, hi: int, value: int, name: str) -> QSpinBox:
        s = QSpinBox()
        s.setRange(lo, hi)
        s.setValue(value)
        s.setAccessibleName(name)
        return s
