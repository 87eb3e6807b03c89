"""The script editor squeezed by the splitter keeps some text width: at a text width of zero, wrapping and the
scroll bars resized each other for ever and the window stopped answering (a window narrowed by a person, or a
test's 800-pixel offscreen window with a wide inspector)."""

from __future__ import annotations

from ui_helpers import close_studio, fake_engine, open_studio

from s2studio.ui.script.editor import MIN_TEXT_WIDTH


def test_the_editor_keeps_its_text_width_when_squeezed(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    w = open_studio(qtbot, lambda: fake_engine())
    w.resize(800, 700)
    w.editor.setPlainText("Alice: Good [whispering] morning.\nBob: [laughing] Supercalifragilisticexpialidocious!")
    w.top_splitter.setSizes([2000, 1, 2000])
    answered = []
    qtbot.waitUntil(lambda: answered.append(1) or len(answered) > 3, timeout=5000)  # the event loop runs
    assert w.editor.viewport().width() >= MIN_TEXT_WIDTH
    close_studio(w)
