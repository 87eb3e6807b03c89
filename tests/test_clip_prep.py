"""Preparing reference clips (audio/speech_regions.py, audio/clip_prep.py, the silence rule of state/clips.py):
trimming to the speech, splitting a long recording at its pauses, loudness, and refusing silence."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from s2studio.audio import speech_regions
from s2studio.audio.asr import AsrSettings, transcribe
from s2studio.audio.clip_prep import (Span, cut, loudness_gain_db, normalized, pieces_at_pauses, prepared, speech_span,
                                      split_spans)
from s2studio.audio.dsp import integrated_loudness, peak
from s2studio.audio.speech_regions import Region
from s2studio.errors import UserError
from s2studio.state.clips import ClipAudio, audio_warnings, read_audio
from s2studio.state.voices import VoiceLibrary
from speech import PARAGRAPHS, SENTENCE, espeak, padded, speech_edges, tiny_model, word_error_rate


@pytest.fixture(params=["silero", "energy"])
def detector(request, monkeypatch):
    """Both detectors: Silero (the asr extra's) and the energy gate that stands in without it."""
    if request.param == "silero":
        pytest.importorskip("faster_whisper")
    monkeypatch.setattr(speech_regions, "detector", lambda: request.param)
    return request.param


def test_trim_finds_the_speech_within_a_fifth_of_a_second(tmp_path, detector):
    samples, rate = espeak(SENTENCE, tmp_path / "s.wav")
    clip = padded(samples, rate, 1.5, 2.0)
    truth = speech_edges(clip, rate)
    span = speech_span(clip, rate, pad_s=0.0)
    assert span is not None
    assert abs(span.start - truth[0]) <= 0.2 and abs(span.end - truth[1]) <= 0.2, (span, truth)
    assert 1.4 < truth[0] < 1.7  # the test clip is what it claims: 1.5 s of silence first
    # with the default margin the trimmed clip keeps 0.1 s either side
    kept = cut(clip, rate, speech_span(clip, rate))
    assert abs(len(kept) / rate - (truth[1] - truth[0] + 0.2)) <= 0.4


def test_silence_has_no_speech(detector):
    assert speech_span(np.zeros(44100 * 3, np.float32), 44100) is None
    noise = np.random.default_rng(1).normal(0, 1e-4, 44100 * 3).astype(np.float32)
    assert speech_span(noise, 44100) is None


def test_a_70_s_recording_of_three_paragraphs_splits_into_three_clips_with_their_transcripts(tmp_path):
    model = tiny_model()
    parts = [espeak(p, tmp_path / f"p{i}.wav", words_per_minute=110)[0] for i, p in enumerate(PARAGRAPHS)]
    rate = 22050
    pause = np.zeros(rate, np.float32)
    recording = np.concatenate([np.zeros(rate // 2, np.float32), parts[0], pause, parts[1], pause, parts[2]])
    assert 68 < len(recording) / rate < 72
    spans = split_spans(recording, rate)
    assert len(spans) == 3
    starts = np.cumsum([0.5] + [len(p) / rate + 1.0 for p in parts[:2]])
    for span, start, part in zip(spans, starts, parts, strict=True):
        assert 5.0 <= span.length <= 30.0
        assert start - 0.3 < span.end and span.start < start + len(part) / rate  # the piece holds its paragraph
    texts = [transcribe(cut(recording, rate, s), rate, AsrSettings(str(model)), threading.Event()).text
             for s in spans]
    for text, paragraph in zip(texts, PARAGRAPHS, strict=True):
        assert word_error_rate(paragraph, text) <= 0.2, text


def test_pieces_cut_at_the_longest_pauses_within_5_to_30_s():
    # speech in 4 s runs; 0.3 s pauses inside "paragraphs", 1.2 s between them
    regions, t = [], 0.0
    for paragraph in range(3):
        for _ in range(5):
            regions.append(Region(t, t + 4.0))
            t += 4.3
        t += 0.9
    pieces = pieces_at_pauses(regions)
    assert [(round(p.start, 1), round(p.end, 1)) for p in pieces] == [(0.0, 21.2), (22.4, 43.6), (44.8, 66.0)]
    # one long run with no pause is kept whole (nothing dropped); a short recording is one piece
    assert pieces_at_pauses([Region(0.0, 40.0)]) == [Region(0.0, 40.0)]
    assert pieces_at_pauses([Region(0.0, 2.0), Region(2.5, 4.0)]) == [Region(0.0, 4.0)]
    assert pieces_at_pauses([]) == []
    # every piece stays within 30 s and none is under 5 s when that is possible
    many = [Region(i * 3.0, i * 3.0 + 2.6) for i in range(40)]
    got = pieces_at_pauses(many)
    assert all(5.0 <= p.end - p.start <= 30.0 for p in got) and got[0].start == 0.0 and got[-1].end == many[-1].end


def test_loudness_normalisation_reaches_minus_23_lufs_without_passing_minus_1_dbfs():
    rate = 44100
    t = np.arange(rate * 4) / rate
    quiet = (0.02 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)
    out = normalized(quiet, rate)
    assert abs(integrated_loudness(out, rate) - (-23.0)) < 0.05
    spiky = quiet.copy()
    spiky[1000] = 0.5  # one loud click: the peak ceiling wins
    gain = loudness_gain_db(spiky, rate)
    assert math.isclose(gain, -1.0 - 20 * math.log10(0.5), abs_tol=1e-6)
    assert math.isclose(peak(normalized(spiky, rate)), 10 ** (-1 / 20), rel_tol=1e-5)
    assert loudness_gain_db(np.zeros(rate, np.float32), rate) == 0.0
    stereo = np.stack([quiet, quiet], axis=1)
    assert prepared(stereo, rate, Span(1.0, 2.0)).shape == (rate, 2)
    assert np.array_equal(prepared(stereo, rate, Span(1.0, 2.0), normalize=False), stereo[rate:2 * rate])


def test_a_clip_that_is_all_silence_is_refused_by_the_one_rule(tmp_path):
    rate = 22050
    silent = tmp_path / "silent.wav"
    sf.write(str(silent), np.zeros(rate * 5, np.float32), rate)
    message = "silent.wav is silence (no sound above -60 dBFS); record or choose a clip in which someone speaks"
    with pytest.raises(UserError) as err:
        read_audio(silent)
    assert str(err.value) == message
    hiss = tmp_path / "hiss.wav"
    sf.write(str(hiss), np.random.default_rng(0).normal(0, 10 ** (-66 / 20), rate * 5).astype(np.float32), rate)
    with pytest.raises(UserError, match="is silence"):
        read_audio(hiss)
    lib = VoiceLibrary(tmp_path / "voices")
    with pytest.raises(UserError, match="^Take 1 is silence"):
        lib.create("Nobody", [(ClipAudio("Take 1", np.zeros((rate, 1), np.float32), rate), "words")])
    assert lib.list() == []
    # the codec reads silence like any audio (upstream encodes it): only a voice's clip must have sound
    from s2studio.audio.io import read_channels
    assert read_channels(silent)[0].shape == (1, rate * 5)
    # quiet speech is not silence: it is stored, with the warning that says it is mostly silence
    quiet = np.zeros(rate * 5, np.float32)
    quiet[:rate] = 0.01 * np.sin(np.arange(rate) * 0.2)
    voice = lib.create("Quiet", [(ClipAudio("Take 2", quiet[:, None], rate, "PCM_16"), "words")])
    assert voice.clips[0].duration_s == 5.0
    assert audio_warnings(quiet, rate) == ["clip is mostly silence (80%); trim the silence around the speech"]
    assert audio_warnings(quiet[:rate], 16000) == ["clip is 1.4 s long; use 3–30 s (10–30 s clones best)",
                                                   "sample rate is 16000 Hz; use 22.05 kHz or more (S2 works at "
                                                   "44.1 kHz)"]
