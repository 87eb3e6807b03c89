"""Rendering as a new user met it: a speaker without a voice no longer blocks everybody (the voiced lines render,
the rest is named once, and a narrated line without a voice is underlined like the cast's warning says), a
fine-tuned voice refused on a server is named in a sentence that starts as one, and "Render failed." does not
outstay its cause."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import save

from s2studio.engine.fake import FakeEngine
from ui_helpers import close_studio, fake_engine, open_studio, write_wav

SCRIPT = "Once upon a time, in a quiet town.\nAlice: Hello there.\nBob: Hi.\nCarol: And me?\nAlice: Bye."


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def voiced(w, tmp_path, script: str = SCRIPT) -> None:
    for name, hz in (("Alice", 220), ("Bob", 330)):
        w.library.create(name, [(write_wav(tmp_path / f"{name}.wav", hz=hz), f"I am {name}.")])
    w.voices.refresh()
    w.voice_commands.reread()  # Alice and Bob get the voices of their names; the Narrator and Carol have none
    w.editor.setPlainText(script)
    w.reparse()


def test_render_all_renders_the_voiced_lines_and_names_the_rest_once(qtbot, data_dir, tmp_path, monkeypatch):
    w = open_studio(qtbot, fake_engine)
    failures: list[str] = []
    monkeypatch.setattr(w.renders, "failed", failures.append)
    voiced(w, tmp_path)
    assert w.cast_panel.summary.text().startswith("⚠ 2 speakers have no voice: Narrator, Carol")
    narration = w.document.script.lines[0]
    assert narration.speaker == "Narrator"
    underlined = [x for x in w.editor.warnings if x.start <= narration.start < x.end or
                  narration.start <= x.start < narration.end]
    assert [x.message for x in underlined] == [
        "the Narrator reads lines without a speaker's name and has no voice: give it one in the cast, or start the "
        "line with a name"]
    messages: list[str] = []
    w.statusBar().messageChanged.connect(messages.append)
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: not w.flow.busy and len(w.document.project.lines) == 3, timeout=10000)
    assert failures == []
    assert {w.document.script.line(i).speaker for i in w.document.project.lines} == {"Alice", "Bob"}
    said = [m for m in messages if "left out" in m]
    assert said == ["Rendering the lines that have a voice; 2 lines of Narrator and Carol left out: they have no "
                    "voice yet (pick one in the cast)."]
    w.cast_panel.combos["Carol"].setCurrentIndex(w.cast_panel.combos["Carol"].findText("Bob"))
    w.actions_by_name["render_stale"].trigger()  # Carol now has a voice: only the Narrator is left out
    qtbot.waitUntil(lambda: not w.flow.busy and len(w.document.project.lines) == 4, timeout=10000)
    assert [m for m in messages if "left out" in m][-1] == (
        "Rendering the lines that have a voice; 1 line of Narrator left out: it has no voice yet (pick one in the "
        "cast).")
    w.editor.setPlainText("Once upon a time.")
    w.reparse()
    w.actions_by_name["render_all"].trigger()  # nothing with a voice: the one clear line, nothing started
    assert failures == ["No voice for Narrator: pick one in the cast above the script."] and not w.flow.busy
    close_studio(w)


def test_a_fine_tuned_voice_on_a_server_is_named_and_render_failed_does_not_stay(qtbot, data_dir, tmp_path,
                                                                               monkeypatch):
    w = open_studio(qtbot, lambda: FakeEngine(frame_latency_s=0.002, min_frames=8, frames_per_char=0.0))
    voiced(w, tmp_path, "Alice: Hello there.\nBob: Hi.")
    lora = tmp_path / "lora.safetensors"
    lora.write_bytes(save({"embeddings.lora_A": np.ones((2, 4), np.float32),
                           "embeddings.lora_B": np.ones((4, 2), np.float32)}))
    alice = next(v for v in w.library.list() if v.name == "Alice")
    w.library.set_lora(alice.id, lora, "test")
    w.voices.refresh()
    w.voice_commands.reread()
    boxes: list[tuple[str, str]] = []
    monkeypatch.setattr("s2studio.ui.window.render_commands.QMessageBox.warning",
                        lambda _parent, title, text: boxes.append((title, text)))
    w.flow.on_server = True  # as after Settings ▸ Render on ▸ Use this server
    w.actions_by_name["render_all"].trigger()
    assert boxes == [("Render failed", "The voice “Alice” (Alice) is fine-tuned with a LoRA, which a server cannot "
                                       "apply: render Alice's lines on this computer (Settings ▸ Render on), or cast a "
                                       "voice without fine-tuning.")]
    assert w.statusBar().currentMessage() == "Render failed." and w.status.speed.text() == ""
    w.session.failed.emit("a lower-case reason from an engine")
    assert boxes[-1] == ("Render failed", "A lower-case reason from an engine")
    w.flow.on_server = False  # back on this computer: the cause is gone
    w.actions_by_name["render_all"].trigger()
    qtbot.waitUntil(lambda: not w.flow.busy and len(w.document.project.lines) == 2, timeout=10000)
    assert w.status.speed.text() == "Render finished." and "failed" not in w.statusBar().currentMessage()
    close_studio(w)
