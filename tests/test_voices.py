"""Voice library: create, codes cache, export/import, refusals that leave the disk unchanged."""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from s2studio import paths
from s2studio.errors import UserError
from s2studio.state.voices import VoiceLibrary, check_clip


def tone(path: Path, seconds: float = 4.0, sr: int = 22050, freq: float = 220.0, amp: float = 0.3,
         subtype: str = "PCM_16") -> Path:
    t = np.arange(int(seconds * sr)) / sr
    sf.write(str(path), (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32), sr, subtype=subtype)
    return path


def snapshot(root: Path) -> dict[str, bytes]:
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


class CountingEncoder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, path: Path) -> np.ndarray:
        self.calls.append(path.name)
        data, _ = sf.read(str(path), dtype="float32")
        n = max(1, len(data) // 2048)
        seed = int(abs(data[:1000]).sum() * 1000) % 2**31
        return np.random.default_rng(seed).integers(0, 1024, size=(10, n))


@pytest.fixture
def lib(tmp_path: Path) -> VoiceLibrary:
    return VoiceLibrary(tmp_path / "data" / "voices")


def test_paths_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(paths.ENV_DATA_DIR, str(tmp_path))
    assert paths.data_dir() == tmp_path and paths.voices_dir() == tmp_path / "voices"
    monkeypatch.delenv(paths.ENV_DATA_DIR)
    assert paths.data_dir().name == "s2studio"


def test_create_stores_flac_and_metadata(lib: VoiceLibrary, tmp_path: Path) -> None:
    a = tone(tmp_path / "a.wav", 4.0)
    b = tone(tmp_path / "b.wav", 5.0, sr=44100, subtype="FLOAT")
    v = lib.create("Alice", [(a, " Hello there. "), (b, "Second clip.")], notes="warm", consent="my own voice")
    assert [c.transcript for c in v.clips] == ["Hello there.", "Second clip."]
    assert [(c.duration_s, c.sample_rate) for c in v.clips] == [(4.0, 22050), (5.0, 44100)]
    folder = lib.folder(v.id)
    info = sf.info(str(folder / "clip1.flac"))
    assert (info.format, info.subtype, info.frames) == ("FLAC", "PCM_16", 4 * 22050)
    assert sf.info(str(folder / "clip2.flac")).subtype == "PCM_24"
    stored, _ = sf.read(str(folder / "clip1.flac"), dtype="int16")
    original, _ = sf.read(str(a), dtype="int16")
    np.testing.assert_array_equal(stored, original)  # lossless
    meta = json.loads((folder / "voice.json").read_text())
    assert meta["version"] == 1 and meta["name"] == "Alice" and meta["consent"] == "my own voice"
    assert lib.get(v.id) == v and lib.find("alice") == v and lib.resolve("Alice") == v
    assert [x.id for x in lib.list()] == [v.id]
    assert not [p for p in lib.root.iterdir() if p.name.startswith(".")]  # no temp leftovers


def test_create_refusals_change_nothing(lib: VoiceLibrary, tmp_path: Path) -> None:
    good = tone(tmp_path / "a.wav")
    lib.create("Alice", [(good, "hi")])
    before = snapshot(lib.root)
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"this is not audio at all" * 10)
    cases = [
        (("Bob", [(junk, "hi")]), "not an audio file"),
        (("Bob", []), "1–4 clips"),
        (("Bob", [(good, "x")] * 5), "1–4 clips"),
        (("Bob", [(good, "  ")]), "no transcript"),
        (("alice", [(good, "hi")]), "exists"),
        (("  ", [(good, "hi")]), "needs a name"),
        (("Bob", [(tmp_path / "missing.wav", "hi")]), "audio file not found"),
    ]
    for (name, clips), message in cases:
        with pytest.raises(UserError, match=message):
            lib.create(name, clips)
    assert snapshot(lib.root) == before


def test_unwritable_library_is_a_user_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    lib = VoiceLibrary(blocker / "voices")
    with pytest.raises(UserError, match="cannot write to the voice library"):
        lib.create("Alice", [(tone(tmp_path / "a.wav"), "hi")])
    assert blocker.read_text() == "x"


def test_rename_notes_delete(lib: VoiceLibrary, tmp_path: Path) -> None:
    a = lib.create("Alice", [(tone(tmp_path / "a.wav"), "hi")])
    b = lib.create("Bob", [(tone(tmp_path / "b.wav"), "hi")])
    assert lib.rename(a.id, "Alicia").name == "Alicia"
    with pytest.raises(UserError, match="exists"):
        lib.rename(a.id, "bob")
    v = lib.set_notes(a.id, notes="n", consent="c")
    assert (v.notes, v.consent) == ("n", "c") and lib.get(a.id) == v
    assert lib.set_notes(a.id, notes="m").consent == "c"
    lib.delete(b.id)
    assert [x.name for x in lib.list()] == ["Alicia"]
    assert sorted(p.name for p in lib.root.iterdir()) == [a.id]
    with pytest.raises(UserError, match="no voice"):
        lib.get(b.id)
    with pytest.raises(UserError, match="no voice"):
        lib.get("../etc")


def test_codes_cached_and_reencoded_only_on_change(lib: VoiceLibrary, tmp_path: Path) -> None:
    v = lib.create("Alice", [(tone(tmp_path / "a.wav"), "one"), (tone(tmp_path / "b.wav", freq=330), "two")])
    enc = CountingEncoder()
    first = lib.codes(v, enc, "codec-A")
    assert enc.calls == ["clip1.flac", "clip2.flac"]
    assert [c.shape for c in first] == [(10, 43), (10, 43)] and first[0].dtype == np.int64
    again = lib.codes(lib.get(v.id), enc, "codec-A")
    assert enc.calls == ["clip1.flac", "clip2.flac"]  # cache hit
    for x, y in zip(first, again, strict=True):
        np.testing.assert_array_equal(x, y)
    lib.codes(v, enc, "codec-B")  # codec changed: both re-encoded
    assert enc.calls[2:] == ["clip1.flac", "clip2.flac"]
    tone(lib.folder(v.id) / "clip2.flac", freq=500)  # a clip changed on disk: only it is re-encoded
    lib.codes(v, enc, "codec-B")
    assert enc.calls[4:] == ["clip2.flac"]
    lib.codes(lib.get(v.id), enc, "codec-B")
    assert len(enc.calls) == 5
    (lib.folder(v.id) / "codes.safetensors").write_bytes(b"garbage")  # damaged cache: re-encode
    lib.codes(v, enc, "codec-B")
    assert len(enc.calls) == 7


def test_export_import_round_trip_keeps_codes(tmp_path: Path) -> None:
    src = VoiceLibrary(tmp_path / "one")
    dst = VoiceLibrary(tmp_path / "two")
    v = src.create("Alice", [(tone(tmp_path / "a.wav"), "one")], notes="n", consent="c")
    enc = CountingEncoder()
    codes = src.codes(v, enc, "fp")
    out = src.export(v.id, tmp_path / "alice")
    assert out.name == "alice.s2voice"
    with zipfile.ZipFile(out) as z:
        assert sorted(z.namelist()) == ["clip1.flac", "codes.safetensors", "voice.json"]
    w = dst.import_voice(out)
    assert (w.id, w.name, w.notes, w.consent, w.clips) == (v.id, v.name, "n", "c", v.clips)
    got = dst.codes(w, enc, "fp")
    assert len(enc.calls) == 1  # imported codes are used as they are
    np.testing.assert_array_equal(got[0], codes[0])
    again = dst.import_voice(out)  # same voice twice: new id, new name
    assert again.id != w.id and again.name == "Alice (2)"


def _zip(path: Path, entries: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return path


def test_import_refusals_change_nothing(lib: VoiceLibrary, tmp_path: Path) -> None:
    v = lib.create("Alice", [(tone(tmp_path / "a.wav"), "one")])
    good = lib.export(v.id, tmp_path / "good.s2voice")
    with zipfile.ZipFile(good) as z:
        files = {n: z.read(n) for n in z.namelist()}
    meta = json.loads(files["voice.json"])
    lib.delete(v.id)
    before = snapshot(lib.root)
    bad_sha = dict(meta, clips=[dict(meta["clips"][0], sha256="0" * 64)])
    newer = dict(meta, version=99)
    cases = {
        "slip": ({**files, "../evil.txt": b"x"}, "outside the voice folder"),
        "abs": ({**files, "/etc/evil": b"x"}, "outside the voice folder"),
        "sub": ({**files, "sub/clip1.flac": b"x"}, "outside the voice folder"),
        "extra": ({**files, "run.sh": b"x"}, "unexpected file"),
        "nojson": ({"clip1.flac": files["clip1.flac"]}, "no voice.json"),
        "badjson": ({**files, "voice.json": b"{not json"}, "damaged"),
        "notobj": ({**files, "voice.json": b"[1]"}, "damaged"),
        "sha": ({**files, "voice.json": json.dumps(bad_sha).encode()}, "checksum"),
        "newer": ({**files, "voice.json": json.dumps(newer).encode()}, "newer S2 Studio"),
        "noclip": ({"voice.json": files["voice.json"]}, "lacks clip1.flac"),
    }
    for name, (entries, message) in cases.items():
        with pytest.raises(UserError, match=message):
            lib.import_voice(_zip(tmp_path / f"{name}.s2voice", entries))
    bomb = tmp_path / "bomb.s2voice"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("voice.json", files["voice.json"])
        z.writestr("clip1.flac", b"\0" * 500_000_000)
    assert bomb.stat().st_size < 2_000_000
    with pytest.raises(UserError, match="refusing"):
        lib.import_voice(bomb)
    corrupt = tmp_path / "corrupt.s2voice"
    corrupt.write_bytes(good.read_bytes()[:200])
    with pytest.raises(UserError, match="not a .s2voice"):
        lib.import_voice(corrupt)
    assert snapshot(lib.root) == before
    assert lib.import_voice(good).name == "Alice"


def test_check_clip(tmp_path: Path) -> None:
    assert check_clip(tone(tmp_path / "ok.wav", 5.0)) == []
    short = check_clip(tone(tmp_path / "short.wav", 1.0))
    assert short == ["clip is 1.0 s long; use 3–30 s (10–30 s clones best)"]
    with pytest.raises(UserError, match="long.wav is 31 s long; use a clip of at most 30 s"):
        check_clip(tone(tmp_path / "long.wav", 31.0, sr=8000))
    loud = check_clip(tone(tmp_path / "loud.wav", 5.0, amp=1.5, subtype="PCM_16"))
    assert len(loud) == 1 and loud[0].startswith("clip is clipped")
    quiet = tmp_path / "quiet.wav"
    sr = 24000
    x = np.zeros(5 * sr, np.float32)
    x[:sr] = 0.3 * np.sin(np.arange(sr) * 0.1)
    sf.write(str(quiet), x, sr)
    assert check_clip(quiet) == ["clip is mostly silence (80%); trim the silence around the speech"]
    low = check_clip(tone(tmp_path / "low.wav", 5.0, sr=16000))
    assert low == ["sample rate is 16000 Hz; use 22.05 kHz or more (S2 works at 44.1 kHz)"]
    junk = tmp_path / "x.wav"
    junk.write_text("hello")
    with pytest.raises(UserError, match="not an audio file"):
        check_clip(junk)


def test_writes_are_atomic(lib: VoiceLibrary, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure while saving leaves the previous voice.json intact and no temp files."""
    v = lib.create("Alice", [(tone(tmp_path / "a.wav"), "one")])
    before = snapshot(lib.root)

    def fail(*_a: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(UserError, match="No space left"):
        lib.rename(v.id, "Alicia")
    assert snapshot(lib.root) == before
    assert not [p for p in lib.root.rglob(".*")]


def test_add_and_remove_clips_encode_only_the_new_clip(lib: VoiceLibrary, tmp_path: Path) -> None:
    v = lib.create("Alice", [(tone(tmp_path / "a.wav"), "one")])
    enc = CountingEncoder()
    first = lib.codes(v, enc, "codec-A")
    v = lib.add_clip(v.id, tone(tmp_path / "b.wav", 3.0, sr=44100, freq=330), "  two ")
    assert [(c.id, c.file, c.transcript) for c in v.clips] == [("c1", "clip1.flac", "one"), ("c2", "clip2.flac", "two")]
    assert lib.get(v.id) == v and v.clips[1].duration_s == 3.0
    assert v.clips[1].sha256 == hashlib.sha256((lib.folder(v.id) / "clip2.flac").read_bytes()).hexdigest()
    assert [c.id for c in lib.uncached_clips(v, "codec-A")] == ["c2"]
    assert [c.id for c in lib.uncached_clips(v, "codec-B")] == ["c1", "c2"]
    codes = lib.codes(v, enc, "codec-A")
    assert enc.calls == ["clip1.flac", "clip2.flac"]  # clip 1 came from the cache
    assert lib.uncached_clips(v, "codec-A") == []
    np.testing.assert_array_equal(codes[0], first[0])
    v = lib.add_clip(v.id, tone(tmp_path / "c.wav", freq=440), "three")
    v = lib.remove_clip(v.id, "c2")
    assert [c.id for c in v.clips] == ["c1", "c3"] and lib.get(v.id) == v
    assert sorted(p.name for p in lib.folder(v.id).glob("clip*")) == ["clip1.flac", "clip3.flac"]
    v = lib.add_clip(v.id, tone(tmp_path / "d.wav", freq=550), "four")  # the free number is reused
    assert [c.file for c in v.clips] == ["clip1.flac", "clip3.flac", "clip2.flac"]
    lib.codes(v, enc, "codec-A")
    assert enc.calls[2:] == ["clip3.flac", "clip2.flac"]  # the new bytes under the old id are re-encoded
    v = lib.add_clip(v.id, tone(tmp_path / "e.wav"), "five")
    assert len(v.clips) == 4
    before = snapshot(lib.root)
    with pytest.raises(UserError, match="has 4 clips already; remove one"):
        lib.add_clip(v.id, tone(tmp_path / "f.wav"), "six")
    with pytest.raises(UserError, match="has no transcript"):
        lib.add_clip(lib.create("Bob", [(tone(tmp_path / "g.wav"), "x")]).id, tone(tmp_path / "h.wav"), " ")
    with pytest.raises(UserError, match="has no clip 'c9'"):
        lib.remove_clip(v.id, "c9")
    bob = lib.find("Bob")
    with pytest.raises(UserError, match="only clip of voice 'Bob'"):
        lib.remove_clip(bob.id, "c1")
    assert {k: b for k, b in snapshot(lib.root).items() if bob.id not in k} == before


def test_add_clip_is_atomic(lib: VoiceLibrary, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk while adding a clip leaves the voice as it was, with no stray or temp files."""
    v = lib.create("Alice", [(tone(tmp_path / "a.wav"), "one")])
    clip = tone(tmp_path / "b.wav", freq=330)
    before = snapshot(lib.root)
    real_replace = os.replace

    def fail_on_json(src: object, dst: object) -> None:
        if str(dst).endswith("voice.json"):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", fail_on_json)
    with pytest.raises(UserError, match="No space left"):
        lib.add_clip(v.id, clip, "two")
    assert snapshot(lib.root) == before
    assert not [p for p in lib.root.rglob(".*")]


def test_a_create_that_fails_half_way_leaves_no_folder(lib: VoiceLibrary, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The clip is written, then voice.json fails: the half-built voice folder is removed, the error says why."""
    from s2studio.state import voices

    lib.create("Alice", [(tone(tmp_path / "a.wav"), "one")])
    before = snapshot(lib.root)

    real = voices.write_durable

    def full(path: Path, data: bytes) -> None:
        if path.name == "voice.json":
            raise OSError(28, "No space left on device")
        real(path, data)

    monkeypatch.setattr(voices, "write_durable", full)
    with pytest.raises(UserError, match=f"^cannot write to the voice library: No space left on device on {lib.root}"):
        lib.create("Bob", [(tone(tmp_path / "b.wav"), "two")])
    assert snapshot(lib.root) == before
    assert not [p for p in lib.root.iterdir() if p.name.startswith(".new-")]
