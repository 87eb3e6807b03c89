"""Export: every format read back at the right length, speaker stems sum to the mix, line clips are the takes,
subtitles without tags, bitrates, cue times, gain."""

from __future__ import annotations

import stat
from pathlib import Path

import numpy as np
import pytest
from umask import umask_set
import soundfile as sf

from s2studio.audio.dsp import integrated_loudness, resample
from s2studio.audio.export import (
    ExportSettings, Metadata, RenderedLine, encode_audio, export, format_for, output_paths, srt_text, vtt_text,
    write_audio,
)
from s2studio.engine.api import SAMPLE_RATE
from s2studio.errors import UserError

SR = SAMPLE_RATE


def tone(seconds: float, freq: float, amp: float = 0.25) -> np.ndarray:
    t = np.arange(round(seconds * SR)) / SR
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


LINES = [
    RenderedLine("l1", "Alice", "Hello [whispering] there.", tone(0.5, 220)),
    RenderedLine("l2", "Bob", "[laughing] Hi!", tone(0.25, 330)),
    RenderedLine("l3", "Carol", "Bye & <out>.", tone(1.0, 440)),
]
TOTAL = round(0.5 * SR) + round(0.25 * SR) + SR + 2 * round(0.2 * SR)


@pytest.mark.parametrize("fmt", ["wav", "flac", "ogg", "opus", "mp3"])
def test_every_format_reads_back_at_the_right_length(tmp_path: Path, fmt: str) -> None:
    settings = ExportSettings(format=fmt, gap_s=0.2, metadata=Metadata(title="Scene", voices=("A", "B")))
    suffix = {"ogg": ".ogg", "opus": ".opus", "mp3": ".mp3", "wav": ".wav", "flac": ".flac"}[fmt]
    out = tmp_path / f"mix{suffix}"
    assert format_for(out) == fmt
    result = export(LINES, settings, out=out)
    data, sr = sf.read(str(out), dtype="float32")
    expected_rate = 48000 if fmt == "opus" else SR
    assert sr == expected_rate
    assert len(data) == round(TOTAL * expected_rate / SR)
    assert result.samples == TOTAL
    with sf.SoundFile(str(out)) as f:
        meta = f.copy_metadata()
    assert meta["title"] == "Scene" and meta["artist"] == "A, B"
    assert meta["comment"] == "AI-generated speech; model: Fish Audio S2 Pro"
    mix = np.concatenate([LINES[0].audio, np.zeros(round(0.2 * SR)), LINES[1].audio, np.zeros(round(0.2 * SR)),
                          LINES[2].audio])
    if fmt in ("wav", "flac"):
        tol = 1e-4 if fmt == "flac" else 1 / 32768
        np.testing.assert_allclose(data, mix, atol=tol)
    if fmt == "opus":  # lossy: same level and shape, not the same samples
        ref = resample(mix, SR, 48000)
        assert abs(np.sqrt(np.mean(data**2)) - np.sqrt(np.mean(ref**2))) < 0.01


def test_speaker_stems_sum_to_the_mix_and_cues_match_audio(tmp_path: Path) -> None:
    settings = ExportSettings(format="wav", gap_s=0.2, normalize="peak", peak_dbfs=-3.0)
    lines = [*LINES, RenderedLine("l4", "Alice", "Again.", tone(0.3, 250))]
    result = export(lines, settings, out=tmp_path / "mix.wav", stems_dir=tmp_path / "stems",
                    srt=tmp_path / "a.srt", vtt=tmp_path / "a.vtt")
    stems = sorted((tmp_path / "stems").iterdir())
    assert [p.name for p in stems] == ["01_Alice.wav", "02_Bob.wav", "03_Carol.wav"]  # one per speaker, not per line
    mix, _ = sf.read(str(tmp_path / "mix.wav"), dtype="float32")
    tracks = [sf.read(str(p), dtype="float32")[0] for p in stems]
    assert [len(t) for t in tracks] == [len(mix)] * 3 == [TOTAL + round(0.2 * SR) + round(0.3 * SR)] * 3
    np.testing.assert_allclose(sum(t.astype(np.float64) for t in tracks), mix, atol=3 / 32768)
    gain = 10 ** (result.gain_db / 20)
    alice = tracks[0]
    for cue, line in zip(result.cues, lines, strict=True):  # Alice's track holds her lines and only those
        a = round(cue.start_s * SR)
        expected = line.audio * gain if line.speaker == "Alice" else np.zeros_like(line.audio)
        np.testing.assert_allclose(alice[a:a + len(line.audio)], expected, atol=1 / 32768)
    assert abs(20 * np.log10(np.abs(mix).max()) + 3.0) < 1e-4
    gap = round(0.2 * SR)
    starts = [0, round(0.5 * SR) + gap, round(0.5 * SR) + round(0.25 * SR) + 2 * gap]
    assert [(c.line_id, c.start_s, c.end_s) for c in result.cues[:3]] == [
        ("l1", 0.0, 0.5), ("l2", starts[1] / SR, starts[1] / SR + 0.25), ("l3", starts[2] / SR, starts[2] / SR + 1.0)]
    for cue, line in zip(result.cues, lines, strict=True):  # the audio is where the cue says
        a = round(cue.start_s * SR)
        np.testing.assert_allclose(mix[a:a + len(line.audio)], line.audio * gain, atol=1 / 32768)
    srt = (tmp_path / "a.srt").read_text()
    assert srt.startswith(  # what is heard: no delivery tags
        "1\n00:00:00,000 --> 00:00:00,500\nAlice: Hello there.\n\n"
        "2\n00:00:00,700 --> 00:00:00,950\nBob: Hi!\n\n"
        "3\n00:00:01,150 --> 00:00:02,150\nCarol: Bye & <out>.\n")
    assert "[" not in srt and srt.count(" --> ") == 4
    vtt = (tmp_path / "a.vtt").read_text()
    assert vtt.startswith("WEBVTT\n\nl1\n00:00:00.000 --> 00:00:00.500\n<v Alice>Hello there.\n")
    assert "<v Carol>Bye &amp; &lt;out&gt;.\n" in vtt and vtt.count(" --> ") == 4


def test_subtitles_keep_tags_when_asked_and_drop_cues_that_are_only_tags(tmp_path: Path) -> None:
    lines = [*LINES[:2], RenderedLine("l9", "Bob", "[laughing]", tone(0.2, 300))]
    kept = export(lines, ExportSettings(gap_s=0.2, subtitle_tags=True), srt=tmp_path / "k.srt")
    assert "Alice: Hello [whispering] there.\n" in (tmp_path / "k.srt").read_text()
    assert "Bob: [laughing]\n" in (tmp_path / "k.srt").read_text()
    plain = srt_text(kept.cues)
    assert plain.count(" --> ") == 2 and "[" not in plain and not plain.startswith("0")
    assert len(kept.cues) == 3  # the laugh is still on the timeline, only its subtitle is left out


def test_line_clips_are_the_takes_named_by_number_speaker_and_words(tmp_path: Path) -> None:
    lines = [RenderedLine("l1", "Alice", "Did you hear that? [whispering] Someone is at the door.", tone(0.5, 220),
                          voice="Warm", number=3),
             RenderedLine("l2", "Dr. Bob", "[laughing] It's only the cat.", tone(0.25, 330), voice="Gruff",
                          number=12),
             RenderedLine("l3", "Alice", "[sigh]", tone(0.1, 200), voice="Warm", number=13)]
    settings = ExportSettings(format="flac", gap_s=0.3, normalize="peak", metadata=Metadata(title="Scene",
                                                                                              voices=("Warm", "Gruff")))
    result = export(lines, settings, clips_dir=tmp_path / "clips")
    names = ["003_Alice_did-you-hear-that-someone.flac", "012_Dr-Bob_its-only-the-cat.flac", "013_Alice.flac"]
    assert sorted(p.name for p in (tmp_path / "clips").iterdir()) == names
    assert [p.name for p in result.files] == names
    assert output_paths(lines, "flac", clips_dir=tmp_path / "clips") == list(result.files)
    gain = 10 ** (result.gain_db / 20)
    for name, line in zip(names, lines, strict=True):
        data, rate = sf.read(str(tmp_path / "clips" / name), dtype="float32")
        assert rate == SR and len(data) == len(line.audio)  # trimmed to the take, not padded to the mix
        np.testing.assert_allclose(data, line.audio * gain, atol=1e-4)
    with sf.SoundFile(str(tmp_path / "clips" / names[1])) as f:
        meta = f.copy_metadata()
    assert meta["artist"] == "Gruff" and meta["title"] == "It's only the cat."


def test_stem_and_clip_artists_are_the_voices_names(tmp_path: Path) -> None:
    lines = [RenderedLine("a", "Alice", "One.", tone(0.2, 220), voice="Warm"),
             RenderedLine("b", "Bob", "Two.", tone(0.2, 330), voice="Gruff")]
    export(lines, ExportSettings(metadata=Metadata(voices=("Warm", "Gruff"))), out=tmp_path / "m.wav",
           stems_dir=tmp_path / "s")
    artists = {}
    for p in (tmp_path / "m.wav", *sorted((tmp_path / "s").iterdir())):
        with sf.SoundFile(str(p)) as f:
            artists[p.name] = f.copy_metadata()["artist"]
    assert artists == {"m.wav": "Warm, Gruff", "01_Alice.wav": "Warm", "02_Bob.wav": "Gruff"}


@pytest.mark.parametrize(("fmt", "rate"), [("mp3", SR), ("opus", 48000)])
def test_bitrate_is_what_was_chosen(fmt: str, rate: int) -> None:
    noise = (0.2 * np.random.default_rng(1).standard_normal(10 * SR)).astype(np.float32)
    measured = {}
    for kbps in (64, 128, 192):
        data = encode_audio(noise, fmt, bitrate_kbps=kbps)
        measured[kbps] = len(data) * 8 / 10 / 1000
    for kbps, got in measured.items():
        assert abs(got - kbps) / kbps < 0.12, measured
    with pytest.raises(UserError, match="bitrate 100 kbps is not offered"):
        ExportSettings(format=fmt, bitrate_kbps=100)


def test_silent_lines_get_no_cue(tmp_path: Path) -> None:
    lines = [RenderedLine("a", "A", "x", tone(0.1, 200)), RenderedLine("b", "B", "[pause]", np.zeros(0, np.float32))]
    result = export(lines, ExportSettings(gap_s=0.0), srt=tmp_path / "a.srt")
    assert [c.line_id for c in result.cues] == ["a"]
    assert "1\n" in srt_text(result.cues) and "a\n" in vtt_text(result.cues)


def test_loudness_normalisation(tmp_path: Path) -> None:
    lines = [RenderedLine("a", "A", "x", tone(3.0, 997, amp=0.05))]
    export(lines, ExportSettings(format="flac", normalize="loudness", loudness_lufs=-20.0, peak_dbfs=-1.0),
           out=tmp_path / "quiet.flac")
    assert abs(integrated_loudness(sf.read(tmp_path / "quiet.flac", dtype="float32")[0], SR) - (-20.0)) < 0.05
    export(lines, ExportSettings(format="flac", normalize="loudness", loudness_lufs=-3.0, peak_dbfs=-6.0),
           out=tmp_path / "loud.flac")
    loud = sf.read(tmp_path / "loud.flac", dtype="float32")[0]
    assert abs(20 * np.log10(np.abs(loud).max()) + 6.0) < 1e-3  # the peak ceiling wins


def test_integrated_loudness_of_a_full_scale_sine() -> None:
    t = np.arange(5 * 48000) / 48000
    assert abs(integrated_loudness(np.sin(2 * np.pi * 997 * t), 48000) + 3.01) < 0.02
    assert integrated_loudness(np.zeros(48000), 48000) == float("-inf")


def test_resample_is_band_limited_and_exact_length() -> None:
    x = tone(1.0, 1000, amp=1.0)
    y = resample(x, SR, 48000)
    assert len(y) == 48000
    ref = np.sin(2 * np.pi * 1000 * np.arange(48000) / 48000)
    assert np.abs(y - ref)[100:-100].max() < 1e-3


def test_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot tell the format"):
        format_for(tmp_path / "x.aac")
    with pytest.raises(UserError, match="nothing to export"):
        export([], ExportSettings())
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserError, match="cannot write"):
        write_audio(blocker / "out.wav", tone(0.1, 100), "wav")
    assert blocker.read_text() == "x"


@pytest.mark.parametrize(("mask", "file_mode", "dir_mode"), [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750)])
def test_every_output_gets_the_mode_the_umask_gives(tmp_path: Path, mask: int, file_mode: int,
                                                    dir_mode: int) -> None:
    with umask_set(mask):
        result = export(LINES, ExportSettings(format="wav"), out=tmp_path / "m.wav", stems_dir=tmp_path / "stems",
                        clips_dir=tmp_path / "clips", srt=tmp_path / "m.srt", vtt=tmp_path / "m.vtt")
    assert len(result.files) == 1 + 3 + 3 + 2
    assert {stat.S_IMODE(p.stat().st_mode) for p in result.files} == {file_mode}  # never 0600
    assert {stat.S_IMODE((tmp_path / d).stat().st_mode) for d in ("stems", "clips")} == {dir_mode}
