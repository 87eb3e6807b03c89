"""Voices in one step, in the studio: clips dropped without transcripts are trimmed to their speech and
transcribed by the real speech-recognition model (the test package's tiny.en), the trim handles move and the
transcript follows, a long recording splits into clips with their own transcripts, a bad clip is removed, a
silent or unreadable one is refused in plain words, and transcription can be stopped, downloads its model with
progress, and says what to do offline."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import soundfile as sf
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QDialogButtonBox

from fake_hub import FakeHub
from s2studio.audio.asr import Recognizer
from s2studio.audio.dsp import integrated_loudness
from s2studio.ui.voices.new_voice.dialog import NewVoiceDialog
from s2studio.ui.control.asr_choice import LANGUAGE_KEY, MODEL_KEY, asr_settings
from s2studio.ui.inspector.transcripts_box import TranscriptsBox
from s2studio.audio.speech_regions import speech_regions
from speech import PARAGRAPHS, SENTENCE, espeak, padded, speech_edges, tiny_model, word_error_rate, words
from ui_helpers import close_studio, drop_files, on_modal, open_studio

SECOND = "A gentle wind moved through the tall grass while the farmer counted his sheep before dark."
THIRD = "The children ran between the market stalls, laughing in the warm afternoon sun."


@pytest.fixture
def studio(qtbot, tmp_path, monkeypatch):
    """The window on the fake engine, its speech-recognition model set to the test package's tiny.en in
    Settings ▸ Transcripts, the user cache in this test's folder."""
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model = tiny_model()
    from ui_helpers import fake_engine

    w = open_studio(qtbot, fake_engine, begin_session=False)
    w.ctx.settings.setValue(MODEL_KEY, str(model))
    yield w
    close_studio(w)


def spoken(tmp_path, name: str, text: str, before: float = 1.5, after: float = 2.0):
    samples, rate = espeak(text, tmp_path / f"{name}-raw.wav")
    clip = padded(samples, rate, before, after)
    path = tmp_path / f"{name}.wav"
    sf.write(str(path), 0.5 * clip, rate, subtype="PCM_16")
    return path, speech_edges(clip, rate)


def ok(d: NewVoiceDialog):
    return d.buttons.button(QDialogButtonBox.StandardButton.Ok)


def test_dropping_two_untranscribed_clips_fills_both_transcripts(qtbot, studio, tmp_path):
    w = studio
    (a, edges_a), (b, edges_b) = spoken(tmp_path, "first_take", SENTENCE), spoken(tmp_path, "second_take", SECOND)
    seen: dict = {}

    def check(d: NewVoiceDialog) -> None:
        seen["highlight_during_drag"] = w.voices.highlighted
        qtbot.waitUntil(lambda: len(d.cards) == 2 and all(c.auto for c in d.cards), timeout=60000)
        seen["texts"] = [c.transcript.toPlainText() for c in d.cards]
        seen["tags"] = [c.tag.text() for c in d.cards]
        seen["spans"] = [c.draft.span for c in d.cards]
        seen["titles"] = [c.title.text() for c in d.cards]
        seen["checks"] = [c.checks.text() for c in d.cards]
        d.name.setText("Narrator")
        qtbot.mouseClick(ok(d), Qt.MouseButton.LeftButton)

    on_modal(qtbot, NewVoiceDialog, check)
    drop_files(w.voices, [a, b])  # onto the voice list itself
    qtbot.waitUntil(lambda: len(w.library.list()) == 1, timeout=70000)
    assert not w.voices.highlighted  # the highlight ends with the drop
    for text, truth in zip(seen["texts"], (SENTENCE, SECOND), strict=True):
        assert word_error_rate(truth, text) <= 0.2, text
    assert seen["tags"] == ["auto · English", "auto · English"]
    for span, (start, end) in zip(seen["spans"], (edges_a, edges_b), strict=True):
        assert abs(span.start - (start - 0.1)) <= 0.2 and abs(span.end - (end + 0.1)) <= 0.2, (span, start, end)
    assert seen["titles"][0].startswith("Clip 1 · first_take.wav · ") and ", keeping " in seen["titles"][0]
    assert seen["checks"] == ["✓ Clip looks good.", "✓ Clip looks good."]
    (voice,) = w.library.list()
    assert voice.name == "Narrator" and [c.transcript for c in voice.clips] == seen["texts"]
    for clip, span in zip(voice.clips, seen["spans"], strict=True):
        assert abs(clip.duration_s - span.length) < 0.01  # the silence around the speech was not stored
        data, rate = sf.read(str(w.library.clip_path(voice, clip)))
        assert abs(integrated_loudness(data, rate) + 23.0) < 0.3  # and the loudness was evened out

    # the add-clip flow ("+" on the selected voice) transcribes the new clip the same way
    third, _ = spoken(tmp_path, "third_take", THIRD, before=0.3, after=0.3)

    def add(d: NewVoiceDialog) -> None:
        qtbot.waitUntil(lambda: d.cards[0].auto, timeout=60000)
        seen["added"] = (d.windowTitle(), d.cards[0].transcript.toPlainText(), d.add_button.isEnabled())
        qtbot.mouseClick(ok(d), Qt.MouseButton.LeftButton)

    on_modal(qtbot, NewVoiceDialog, add)
    w.voices.add_clip(third)
    assert seen["added"][0] == "Add a clip to “Narrator”" and not seen["added"][2]  # one clip at a time here
    assert word_error_rate(THIRD, seen["added"][1]) <= 0.2, seen["added"][1]
    assert w.library.get(voice.id).clips[2].transcript == seen["added"][1]


def test_the_drag_highlights_the_voice_list_and_the_add_button_has_its_own_icon(qtbot, studio, tmp_path):
    from PySide6.QtCore import QMimeData, QUrl
    from PySide6.QtGui import QDragEnterEvent, QDragLeaveEvent
    from PySide6.QtWidgets import QApplication, QStyle

    w = studio
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(tmp_path / "x.wav"))])
    enter = QDragEnterEvent(QPoint(40, 40), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(w.voices, enter)
    assert enter.isAccepted() and w.voices.highlighted and w.voices.drop_hint.isVisible()
    assert w.voices.drop_hint.text() == "Drop to make a voice of this clip"
    QApplication.sendEvent(w.voices, QDragLeaveEvent())
    assert not w.voices.highlighted and not w.voices.drop_hint.isVisible()
    project = QMimeData()
    project.setUrls([QUrl.fromLocalFile(str(tmp_path / "story.s2proj"))])
    other = QDragEnterEvent(QPoint(40, 40), Qt.DropAction.CopyAction, project, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(w.voices, other)
    assert not w.voices.highlighted  # a project is the window's to open
    blank = w.style().standardIcon(QStyle.StandardPixmap.SP_FileIcon).pixmap(24, 24).toImage()
    ours = w.voices.add_button.icon().pixmap(24, 24).toImage()
    assert not ours.isNull() and ours != blank


def test_trim_handles_move_the_kept_part_and_the_auto_transcript_follows(qtbot, studio, tmp_path):
    w = studio
    first_half = "The weather was calm this morning."
    clip, _ = spoken(tmp_path, "take", f"{first_half} {SECOND}", before=0.5, after=0.5)
    silent = tmp_path / "silent.wav"
    sf.write(str(silent), np.zeros(44100 * 4, np.float32), 44100)
    bad = tmp_path / "notes.wav"
    bad.write_bytes(b"these are not samples")
    d = NewVoiceDialog([clip, silent, bad], "", w.voices, asr=asr_settings(w.ctx.settings), jobs=w.clip_jobs)
    qtbot.addWidget(d)
    d.show()
    try:
        assert d.reason.text().startswith("✗ notes.wav is not an audio file that can be read (")
        assert "soundfile" not in d.reason.text() and "sndfile" not in d.reason.text()
        assert len(d.cards) == 2
        assert d.cards[1].checks.text() == ("✗ silent.wav is silence (no sound above -60 dBFS); record or choose a clip "
                                            "in which someone speaks")
        card = d.cards[0]
        qtbot.waitUntil(lambda: card.auto, timeout=60000)
        assert word_error_rate(f"{first_half} {SECOND}", card.transcript.toPlainText()) <= 0.2
        # the silent clip goes with its ✕
        qtbot.mouseClick(d.cards[1].remove_button, Qt.MouseButton.LeftButton)
        assert len(d.cards) == 1 and not d.cards[0].remove_button.isEnabled()  # the last clip stays
        # drag the end handle to just after the first sentence: the transcript is made again for that part
        wave = card.waveform
        regions = speech_regions(card.draft.mono, card.draft.rate, min_silence_s=0.25, pad_s=0.0)
        cut_at = (regions[0].end + regions[1].start) / 2  # in the pause after the first sentence
        end_x = int(wave.handle_x("end"))
        target = int(cut_at / wave.duration * (wave.width() - 1))
        qtbot.mousePress(wave, Qt.MouseButton.LeftButton, pos=QPoint(end_x, wave.height() // 2))
        qtbot.mouseMove(wave, QPoint((end_x + target) // 2, wave.height() // 2))
        qtbot.mouseMove(wave, QPoint(target, wave.height() // 2))
        qtbot.mouseRelease(wave, Qt.MouseButton.LeftButton, pos=QPoint(target, wave.height() // 2))
        assert abs(card.draft.span.end - cut_at) < 0.1 and abs(card.end.value() - card.draft.span.end) < 0.006
        assert card.checks.text().startswith("⚠ clip is ") and "use 3–30 s" in card.checks.text()
        old = card.transcript.toPlainText()
        qtbot.waitUntil(lambda: card.transcript.toPlainText() != old and card.auto, timeout=60000)
        now = words(card.transcript.toPlainText())
        assert "calm" in now and "morning" in now and not {"gentle", "wind", "grass", "sheep"} & set(now), now
        # the keyboard moves the start handle by 50 ms; typed text is never replaced by a new transcript
        before = card.draft.span.start
        wave.setFocus()
        qtbot.keyClick(wave, Qt.Key.Key_Right)
        assert abs(card.draft.span.start - (before + 0.05)) < 1e-6
        card.transcript.setPlainText("The weather was calm this morning.")
        assert not card.auto and card.tag.text() == "edited"
        qtbot.keyClick(wave, Qt.Key.Key_Left)
        qtbot.wait(1200)
        assert card.transcript.toPlainText() == "The weather was calm this morning."
        pairs = d.pairs()
        assert len(pairs) == 1 and abs(pairs[0][0].data.shape[0] / pairs[0][0].rate - card.draft.span.length) < 0.001
    finally:
        d.done(0)


def test_a_long_recording_splits_into_clips_with_their_own_transcripts(qtbot, studio, tmp_path):
    w = studio
    parts = [espeak(p, tmp_path / f"p{i}.wav", words_per_minute=110)[0] for i, p in enumerate(PARAGRAPHS)]
    rate = 22050
    pause = np.zeros(rate, np.float32)
    long = tmp_path / "interview.wav"
    sf.write(str(long), np.concatenate([np.zeros(rate // 2, np.float32), parts[0], pause, parts[1], pause,
                                        parts[2]]), rate, subtype="PCM_16")
    d = NewVoiceDialog([long], "", w.voices, asr=asr_settings(w.ctx.settings), jobs=w.clip_jobs)
    qtbot.addWidget(d)
    d.show()
    try:
        card = d.cards[0]
        assert card.split_button.isVisible() and "use a clip of at most 30 s" in card.checks.text()
        qtbot.mouseClick(card.split_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: len(d.cards) == 3, timeout=20000)
        assert d.reason.text() == "Split into 3 clips at the pauses."
        assert [c.draft.name for c in d.cards] == [f"interview.wav, part {n}" for n in (1, 2, 3)]
        qtbot.waitUntil(lambda: all(c.auto for c in d.cards), timeout=90000)
        for c, paragraph in zip(d.cards, PARAGRAPHS, strict=True):
            assert word_error_rate(paragraph, c.transcript.toPlainText()) <= 0.2, c.transcript.toPlainText()
            assert 5.0 <= c.draft.span.length <= 30.0 and not c.split_button.isVisible()
    finally:
        d.done(0)


def test_stopping_a_download_and_the_message_offline(qtbot, studio, tmp_path, monkeypatch):
    w = studio
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    Recognizer.release()
    clip, _ = spoken(tmp_path, "take", SENTENCE)
    files = {p.name: p.read_bytes() for p in tiny_model().iterdir()}
    with FakeHub({"Systran/faster-whisper-tiny": files}, chunk_delay_s=0.01) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)  # a mirror: the hub the studio asks
        w.ctx.settings.setValue(MODEL_KEY, "tiny")
        d = NewVoiceDialog([clip], "", w.voices, asr=asr_settings(w.ctx.settings), jobs=w.clip_jobs)
        qtbot.addWidget(d)
        d.show()
        try:
            qtbot.waitUntil(lambda: d.status.text().startswith("Downloading the tiny speech-recognition model: "),
                            timeout=20000)
            assert d.progress.isVisible() and d.stop_button.isVisible()
            qtbot.waitUntil(lambda: d.progress.value() > 50, timeout=20000)
            qtbot.mouseClick(d.stop_button, Qt.MouseButton.LeftButton)
            assert d.status.text() == "Transcription stopped."
            qtbot.waitUntil(lambda: not w.clip_jobs.busy, timeout=10000)
            assert d.cards[0].tag.text() == "stopped: type it" and d.cards[0].transcript.toPlainText() == ""
            assert not d.progress.isVisible()
            sent = hub.bytes_sent
            assert sent < sum(len(v) for v in files.values())  # it stopped mid-download
            # "Transcribe" starts again: the download resumes, then the transcript comes
            hub.chunk_delay_s = 0.0
            qtbot.mouseClick(d.cards[0].transcribe_button, Qt.MouseButton.LeftButton)
            qtbot.waitUntil(lambda: d.cards[0].auto, timeout=60000)
            assert word_error_rate(SENTENCE, d.cards[0].transcript.toPlainText()) <= 0.2
        finally:
            d.done(0)
    # offline, a size that was never downloaded: one line, the transcript left to type
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    w.ctx.settings.setValue(MODEL_KEY, "base")
    d = NewVoiceDialog([clip], "", w.voices, asr=asr_settings(w.ctx.settings), jobs=w.clip_jobs)
    qtbot.addWidget(d)
    try:
        qtbot.waitUntil(lambda: d.status.text().startswith("⚠"), timeout=20000)
        assert d.status.text() == ("⚠ the speech-recognition model “base” (145 MB) is not on this computer and "
                                   "Hugging Face cannot be reached; “Tiny: fastest, least exact” is on this "
                                   "computer: choose it in Settings ▸ Transcripts (or connect to the internet once "
                                   "to download “base”).")
        assert d.cards[0].tag.text() == "type it"
    finally:
        d.done(0)


def test_settings_choose_the_model_and_language(qtbot, studio):
    w = studio
    box = w.inspector.transcripts_box
    assert isinstance(box, TranscriptsBox) and box.parent() is w.inspector.settings_page
    box.model.setCurrentIndex(box.model.findData("small"))
    box.language.setCurrentIndex(box.language.findData("de"))
    assert w.ctx.settings.value(MODEL_KEY) == "small" and w.ctx.settings.value(LANGUAGE_KEY) == "de"
    assert asr_settings(w.ctx.settings).model == "small" and asr_settings(w.ctx.settings).language == "de"
    assert box.note.text().startswith("Downloaded from Hugging Face the first time a clip is transcribed (484 MB).")
    assert box.language.itemText(0) == "Detect automatically"


def test_closing_the_dialog_while_transcribing_stops_it(qtbot, studio, tmp_path):
    w = studio
    clip, _ = spoken(tmp_path, "take", " ".join(PARAGRAPHS))
    threads = threading.active_count()  # the whole suite's threads: earlier tests' may still be winding down
    d = NewVoiceDialog([clip], "", w.voices, asr=asr_settings(w.ctx.settings), jobs=w.clip_jobs)
    qtbot.addWidget(d)
    d.show()
    qtbot.waitUntil(lambda: d.status.text().startswith("Transcribing"), timeout=30000)
    d.done(0)
    qtbot.waitUntil(lambda: not w.clip_jobs.busy, timeout=30000)
    assert w.clip_jobs.pending() == []
    # the worker serves the next dialog
    short, _ = spoken(tmp_path, "short", SENTENCE)
    d2 = NewVoiceDialog([short], "", w.voices, asr=asr_settings(w.ctx.settings), jobs=w.clip_jobs)
    qtbot.addWidget(d2)
    try:
        qtbot.waitUntil(lambda: d2.cards[0].auto, timeout=60000)
    finally:
        d2.done(0)
    assert threading.active_count() <= threads + 2  # the jobs' worker, not a thread per dialog


def test_without_the_extra_the_dialog_says_how_to_get_it(qtbot, studio, tmp_path, monkeypatch):
    from s2studio.ui.voices.new_voice import dialog as new_voice_dialog

    monkeypatch.setattr(new_voice_dialog, "asr_missing", lambda: "Automatic transcripts need the optional package "
                                                                 "faster-whisper: pip install 's2studio[asr]' (or "
                                                                 "type the transcript)")
    clip, _ = spoken(tmp_path, "take", SENTENCE)
    d = NewVoiceDialog([clip], "", studio.voices, asr=asr_settings(studio.ctx.settings), jobs=studio.clip_jobs)
    qtbot.addWidget(d)
    try:
        assert d.status.text() == ("ⓘ Automatic transcripts need the optional package faster-whisper: pip install "
                                   "'s2studio[asr]' (or type the transcript).")
        assert d.cards[0].transcribe_button.isHidden()
        qtbot.waitUntil(lambda: d.cards[0].draft.analysed, timeout=20000)  # the trim still works
        assert d.cards[0].draft.speech is not None and d.cards[0].transcript.toPlainText() == ""
        assert studio.clip_jobs.pending("transcribe") == []
    finally:
        d.done(0)
