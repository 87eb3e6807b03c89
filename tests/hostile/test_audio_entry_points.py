"""Small audio files that would decode to much, or resample through a huge kernel, at every place audio enters
outside the server (whose references `tests/serve/test_serve_hostile.py` covers): `voice add`, a `.s2voice`
import, the studio's new-voice dialog and in-memory clips, `transcribe`, training data, and the resamplers
themselves. Each is refused from the header (or at the limit of a bounded decode) with one line that says what
to do, and nothing is stored."""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from serve_process import flac_of_unknown_length, wav_bytes

from s2studio.cli import main
from s2studio.errors import UserError
from s2studio.state.clips import MAX_RECORDING_SECONDS, ClipAudio, read_audio
from s2studio.state.voices import VoiceLibrary

ODD_RATES = (8009, 44101, 22051, 11111, 47999)
CONVERT = "which does not convert to 44.1 kHz exactly; convert the clip to 44.1 or 48 kHz"
BOMBS = {  # file name: (bytes, what the message says)
    "655k.flac": (lambda: wav_bytes(0.05, rate=655350, channels=8, fmt="FLAC", hz=0),
                  "has a sample rate of 655.35 kHz, above the 192 kHz this program reads"),
    "8ch.flac": (lambda: wav_bytes(20.0, rate=48000, channels=8, fmt="FLAC", hz=0),
                 "holds 7.7 million samples (8 channels at 48 kHz), more than the 2.9 million a clip of 30 s may hold"),
    "192k.wav": (lambda: wav_bytes(4.0, rate=192000, channels=8, subtype="PCM_16", hz=0), "holds 6.1 million"),
    "12ch.wav": (lambda: wav_bytes(1.0, channels=12), "has 12 channels; at most 8 are read"),
    "nolength.flac": (lambda: flac_of_unknown_length(1200.0, rate=8000, channels=1), "is longer than 30 s"),
    "long.flac": (lambda: wav_bytes(1200.0, rate=8000, fmt="FLAC", hz=0), "is 1200 s long"),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bombs")
    out = {}
    for rate in ODD_RATES:
        out[f"odd{rate}.wav"] = folder / f"odd{rate}.wav"
        out[f"odd{rate}.wav"].write_bytes(wav_bytes(2.0, rate=rate))
    for name, (make, _) in BOMBS.items():
        out[name] = folder / name
        out[name].write_bytes(make())
    assert all(p.stat().st_size < 13_000_000 for p in out.values())
    return out


def expected(name: str) -> str:
    return f"has an unusual sample rate of {name[3:-4]} Hz, {CONVERT}" if name.startswith("odd") else BOMBS[name][1]


def one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_voice_add_refuses_them_and_stores_nothing(files, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    for name, path in files.items():
        err = one_line_error(["voice", "add", "--name", "A", "--clip", str(path), "--text", "Hi."], capsys)
        assert f"{name} {expected(name)}" in err, err
    assert VoiceLibrary(tmp_path / "data" / "voices").list() == []


def test_a_voice_file_holding_one_is_not_imported(files, tmp_path) -> None:
    lib = VoiceLibrary(tmp_path / "voices")
    good = tmp_path / "good.wav"
    good.write_bytes(wav_bytes(2.0))
    voice = lib.create("Alice", [(good, "Hello.")])
    archive = lib.export(voice.id, tmp_path / "alice.s2voice")
    lib.delete(voice.id)
    for name in ("odd8009.wav", "8ch.flac", "nolength.flac"):
        with zipfile.ZipFile(archive) as z:
            entries = {i.filename: z.read(i) for i in z.infolist()}
        data = sf.read(files[name])[0] if name.startswith("odd") else None
        buf = io.BytesIO()  # the clip in the archive is FLAC; FLAC can hold 8009 Hz, the others as they are
        if data is not None:
            sf.write(buf, data, 8009, format="FLAC")
        clip = buf.getvalue() if data is not None else files[name].read_bytes()
        meta = json.loads(entries["voice.json"])
        meta["clips"][0]["sha256"] = hashlib.sha256(clip).hexdigest()
        entries["voice.json"], entries["clip1.flac"] = json.dumps(meta).encode(), clip
        bad = tmp_path / f"bad-{name}.s2voice"
        with zipfile.ZipFile(bad, "w") as z:
            for entry, content in entries.items():
                z.writestr(entry, content)
        with pytest.raises(UserError) as exc:
            lib.import_voice(bad)
        assert f"clip1.flac {expected(name)}" in str(exc.value), str(exc.value)
        assert str(exc.value).endswith("; the voice file is unusable")
    assert lib.list() == []


def test_the_studio_refuses_them_when_dropped_and_when_prepared_in_memory(files, qtbot) -> None:
    """A dropped file is read as a recording (it may be split into clips later): what even that limit refuses is
    refused at once, the rest becomes a card marked ✗ by the clip rule, and no voice can be made of it."""
    from s2studio.ui.voices.new_voice.dialog import NewVoiceDialog

    dialog = NewVoiceDialog([])
    qtbot.addWidget(dialog)
    for name, path in files.items():
        try:
            read_audio(path, MAX_RECORDING_SECONDS, voice_clip=False)
        except UserError as exc:
            assert dialog.add_source(path) == f"✗ {exc}"
            continue
        assert dialog.add_source(path) == ""
        card = dialog.cards[-1]
        assert card.checks.text().startswith(f"✗ {name} {expected(name)}"), card.checks.text()
    assert sorted(c.draft.name for c in dialog.cards) == ["192k.wav", "8ch.flac"]
    for rate in ODD_RATES:  # a take prepared in memory (trimmed, split, recorded) meets the same rule
        with pytest.raises(UserError, match=f"Take has an unusual sample rate of {rate} Hz"):
            ClipAudio("Take", np.full((rate * 2, 1), 0.1, np.float32), rate).checked()


def test_transcribe_refuses_them_and_names_what_is_not_a_file(files, tmp_path, capsys) -> None:
    for name in ("odd8009.wav", "655k.flac", "nolength.flac"):
        err = one_line_error(["transcribe", str(files[name])], capsys)
        assert name in err and ("unusual sample rate" in err or "kHz" in err or "longer than 600 s" in err), err
    fifo = tmp_path / "pipe.wav"
    os.mkfifo(fifo)
    for special in (fifo, Path("/dev/zero")):
        err = one_line_error(["transcribe", str(special)], capsys)
        assert err.endswith(f"{special} is not a regular file (a device, pipe or socket); give an audio file"), err
    ok = tmp_path / "ok.wav"
    ok.write_bytes(wav_bytes(1.0))
    err = one_line_error(["transcribe", "--language", "xx", str(ok)], capsys)
    assert err.endswith("unknown language 'xx'; give a Whisper language code such as en, de, fr, ja or zh, or leave "
                        "--language out to detect it")


def test_training_data_refuses_them_naming_the_file(files, tmp_path) -> None:
    from s2studio.train.clips import clips_from_folder

    for name in ("odd44101.wav", "8ch.flac", "nolength.flac"):
        folder = tmp_path / name / "data"
        (folder / "alice").mkdir(parents=True)
        (folder / "alice" / name).write_bytes(files[name].read_bytes())
        (folder / "alice" / name).with_suffix(".lab").write_text("Hello there.", encoding="utf-8")
        with pytest.raises(UserError) as exc:
            clips_from_folder(folder)
        assert str(exc.value).startswith(f"alice/{name}: {name} ") and expected(name).split(" (")[0] in str(exc.value)


def test_the_resamplers_refuse_a_rate_no_reader_takes() -> None:
    from s2studio.audio.asr import transcribe
    from s2studio.codec.resample import to_codec_rate

    for rate in ODD_RATES:
        with pytest.raises(UserError, match=f"unusual sample rate of {rate} Hz"):
            to_codec_rate(np.zeros((1, rate), np.float32), rate)
        with pytest.raises(UserError, match=f"unusual sample rate of {rate} Hz"):
            transcribe(np.zeros(rate, np.float32), rate)
    for rate in (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000, 88200, 96000, 176400, 192000):
        assert len(to_codec_rate(np.zeros((2, rate), np.float32), rate)) == 44100  # every common rate, as before


def test_read_audio_cuts_the_decode_at_the_limit(files) -> None:
    with pytest.raises(UserError, match="nolength.flac is longer than 30 s"):
        read_audio(files["nolength.flac"], voice_clip=False)
    with pytest.raises(UserError, match="nolength.flac is longer than 600 s"):
        read_audio(files["nolength.flac"], MAX_RECORDING_SECONDS, voice_clip=False)
