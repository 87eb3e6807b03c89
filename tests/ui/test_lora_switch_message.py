"""A render that changes the model's LoRA between lines says, in the status bar, for whom and how long each switch
took: the engine reports it in `LineStarted.lora_switch_s` (the fake engine mirrors the real one's rule: a switch
whenever a line needs other weights than those in place)."""

from __future__ import annotations

import re

import numpy as np
from safetensors.numpy import save
from ui_helpers import close_studio, open_studio, write_wav

from s2studio.engine.fake import FakeEngine
from s2studio.ui.control.session import lora_switch_message


def test_each_lora_switch_is_timed_and_shown(qtbot, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, lambda: FakeEngine(frame_latency_s=0.002, lora_switch_latency_s=0.05))
    try:
        a = w.library.create("A", [(write_wav(tmp_path / "a.wav"), "hello there")])
        b = w.library.create("B", [(write_wav(tmp_path / "b.wav", hz=330), "hi again")])
        lora = tmp_path / "lora.safetensors"
        lora.write_bytes(save({"embeddings.lora_A": np.ones((2, 4), np.float32),
                               "embeddings.lora_B": np.ones((4, 2), np.float32)}))
        w.library.set_lora(a.id, lora, "test")
        w.voices.refresh()
        w.voice_commands.reread()
        w.editor.setPlainText("Alice: One.\nAlice: Two.\nBob: Three.\nAlice: Four.")
        w.reparse()
        w.cast_panel.combos["Alice"].setCurrentIndex(w.cast_panel.combos["Alice"].findData(a.id))
        w.cast_panel.combos["Bob"].setCurrentIndex(w.cast_panel.combos["Bob"].findData(b.id))
        said: list[str] = []
        w.session.lora_switched.connect(said.append)
        w.actions_by_name["render_all"].trigger()
        qtbot.waitUntil(lambda: len(w.document.project.lines) == 4 and not w.session.busy, timeout=15000)
        # Alice's first line merges her LoRA, her second needs no switch, Bob's goes back, Alice's last merges again
        whose = [re.match(r"Switched the model's LoRA for (\w+)'s line in (\d+\.\d\d) s\.$", m) for m in said]
        assert [m.group(1) for m in whose if m] == ["Alice", "Bob", "Alice"], said
        assert all(float(m.group(2)) >= 0.05 for m in whose if m)
        assert w.statusBar().currentMessage() == said[-1]
        assert w.session.last_lora_switch_s >= 0.05
    finally:
        close_studio(w)


def test_the_message() -> None:
    assert lora_switch_message("Alice", 0.4249) == "Switched the model's LoRA for Alice's line in 0.42 s."
    assert lora_switch_message("", 1.0) == "Switched the model's LoRA for this line in 1.00 s."
