"""Playing while scenes render side by side: the playhead plays what is rendered in script order and waits, saying
so, at the earliest line not finished yet, although a later scene's lines are already on the timeline; it plays on
when that line lands, and what was heard is the finished timeline from its start, nothing skipped or repeated.
Through the real window on the fake engine, with its sound going to the test's file-backed output device."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
from PySide6.QtCore import Qt

from s2studio.engine.api import LineFinished, Step, SynthesisRequest
from s2studio.engine.fake import FakeEngine
from ui_helpers import cast_two_voices, close_studio, listen, open_studio

SLOW_LINE = "Bob: " + "The first scene's long second line goes on and on. " * 2
SCRIPT = ("# One\nAlice: The first scene opens with a line.\n" + SLOW_LINE
          + "\nAlice: And it ends.\n# Two\nAlice: Short.\nBob: Short too.")


@dataclass
class GatedEngine(FakeEngine):
    """The fake engine, holding back the slow line's take until the test opens `gate`: the second scene has
    landed by then (a batch step advances every stream, and its lines are shorter)."""

    gate: threading.Event = field(default_factory=threading.Event)

    def stream(self, request: SynthesisRequest, cancel: threading.Event) -> Iterator[Step]:
        held = {ln.line_id for ln in request.lines if "goes on and on" in ln.text}
        for step in super().stream(request, cancel):
            if isinstance(step, LineFinished) and step.line_id in held:
                self.gate.wait(30)
            yield step


def test_playback_follows_the_earliest_unfinished_line_while_scenes_render_side_by_side(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    engine = GatedEngine(frame_latency_s=0.005, max_batch=4)
    w = open_studio(qtbot, lambda: engine)
    try:
        cast_two_voices(w, tmp_path, SCRIPT)
        first, slow, last, *two = (ln.line_id for ln in w.document.script.lines)
        played = listen(w)
        w.actions_by_name["render_all"].trigger()
        qtbot.waitUntil(lambda: w.session.busy)
        qtbot.mouseClick(w.player_bar.play_button, Qt.MouseButton.LeftButton)  # play while it renders
        assert w.player.playing

        # the second scene is on the timeline, the slow line is not: the playhead waits after the first line
        layout = lambda: w.timeline.layout  # noqa: E731
        qtbot.waitUntil(lambda: w.player_bar.buffering.isVisible()  # the slow line's row in the editor
                        and w.player_bar.buffering.text() == "Waiting for line 3…", timeout=20000)
        assert all(layout().bounds(k) is not None for k in two)
        assert w.player.position == layout().bounds(first)[1] and layout().bounds(slow) is None
        blocks = len(played)
        qtbot.wait(300)  # it stays there (silent) however long the line takes
        assert w.player.position == layout().bounds(first)[1] and w.player.playing
        assert len(played) > blocks and not any(block.size for block in played[blocks:])
        assert layout().bounds(two[0])[0] > layout().bounds(first)[1]

        engine.gate.set()  # the slow line lands between the first line and the second scene, and plays on
        qtbot.waitUntil(lambda: not w.session.busy, timeout=20000)
        qtbot.waitUntil(lambda: not w.player.playing, timeout=20000)  # played to the end
        assert not w.player_bar.buffering.isVisible()
        order = [s.line_id for s in w.timeline.segments()]
        assert order == [first, slow, last, *two]
        heard_audio = np.concatenate(played)
        # every line once, in script order (the takes are read back from their files now: 16-bit samples)
        np.testing.assert_allclose(heard_audio, w.timeline.mix(), rtol=0, atol=1e-4)
    finally:
        close_studio(w)
