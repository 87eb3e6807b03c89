"""Export: every format read back at the right length, stems sum to the mix, cue times, gain."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from s2studio.audio.dsp import integrated_loudness, resample
from s2studio.audio.export import (
    ExportSettings, Metadata, RenderedLine, export, format_for, srt_text, vtt_text, write_audio,
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
    assert len(result.mix) == TOTAL
    with sf.SoundFile(str(out)) as f:
        meta = f.copy_metadata()
    assert meta["title"] == "Scene" and meta["artist"] == "A, B"
    assert meta["comment"] == "AI-generated speech; model: Fish Audio S2 Pro"
    if fmt in ("wav", "flac"):
        tol = 1e-4 if fmt == "flac" else 1 / 32768
        np.testing.assert_allclose(data, result.mix, atol=tol)
    if fmt == "opus":  # lossy: same level and shape, not the same samples
        ref = resample(result.mix, SR, 48000)
        assert abs(np.sqrt(np.mean(data**2)) - np.sqrt(np.mean(ref**2))) < 0.01


def test_stems_sum_to_the_mix_and_cues_match_audio(tmp_path: Path) -> None:
    settings = ExportSettings(format="wav", gap_s=0.2, normalize="peak", peak_dbfs=-3.0)
    result = export(LINES, settings, out=tmp_path / "mix.wav", stems_dir=tmp_path / "stems",
                    srt=tmp_path / "a.srt", vtt=tmp_path / "a.vtt")
    stems = sorted((tmp_path / "stems").iterdir())
    assert [p.name for p in stems] == ["0001_Alice.wav", "0002_Bob.wav", "0003_Carol.wav"]
    total = sum(sf.read(str(p), dtype="float32")[0].astype(np.float64) for p in stems)
    mix, _ = sf.read(str(tmp_path / "mix.wav"), dtype="float32")
    assert len(total) == len(mix) == TOTAL
    np.testing.assert_allclose(total, mix, atol=3 / 32768)
    assert abs(20 * np.log10(np.abs(result.mix).max()) + 3.0) < 1e-4
    gap = round(0.2 * SR)
    starts = [0, round(0.5 * SR) + gap, round(0.5 * SR) + round(0.25 * SR) + 2 * gap]
    assert [(c.line_id, c.start_s, c.end_s) for c in result.cues] == [
        ("l1", 0.0, 0.5), ("l2", starts[1] / SR, starts[1] / SR + 0.25), ("l3", starts[2] / SR, starts[2] / SR + 1.0)]
    for cue, line in zip(result.cues, LINES, strict=True):  # the audio is where the cue says
        a = round(cue.start_s * SR)
        np.testing.assert_allclose(result.mix[a:a + len(line.audio)], line.audio * 10 ** (result.gain_db / 20),
                                   atol=1e-6)
    srt = (tmp_path / "a.srt").read_text()
    assert srt == (
        "1\n00:00:00,000 --> 00:00:00,500\nAlice: Hello [whispering] there.\n\n"
        "2\n00:00:00,700 --> 00:00:00,950\nBob: [laughing] Hi!\n\n"
        "3\n00:00:01,150 --> 00:00:02,150\nCarol: Bye & <out>.\n")
    vtt = (tmp_path / "a.vtt").read_text()
    assert vtt.startswith("WEBVTT\n\nl1\n00:00:00.000 --> 00:00:00.500\n<v Alice>Hello [whispering] there.\n")
    assert "<v Carol>Bye &amp; &lt;out&gt;.\n" in vtt and vtt.count(" --> ") == 3


def test_silent_lines_get_no_cue() -> None:
    lines = [RenderedLine("a", "A", "x", tone(0.1, 200)), RenderedLine("b", "B", "[pause]", np.zeros(0, np.float32))]
    result = export(lines, ExportSettings(gap_s=0.0))
    assert [c.line_id for c in result.cues] == ["a"]
    assert "1\n" in srt_text(result.cues) and "a\n" in vtt_text(result.cues)


def test_loudness_normalisation(tmp_path: Path) -> None:
    lines = [RenderedLine("a", "A", "x", tone(3.0, 997, amp=0.05))]
    result = export(lines, ExportSettings(normalize="loudness", loudness_lufs=-20.0, peak_dbfs=-1.0))
    assert abs(integrated_loudness(result.mix, SR) - (-20.0)) < 0.05
    loud = export(lines, ExportSettings(normalize="loudness", loudness_lufs=-3.0, peak_dbfs=-6.0))
    assert abs(20 * np.log10(np.abs(loud.mix).max()) + 6.0) < 1e-3  # the peak ceiling wins


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
