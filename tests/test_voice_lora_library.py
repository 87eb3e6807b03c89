"""A voice carrying a LoRA in the library and in `.s2voice` files: stored beside the clips, carried by export and
import, and checked like everything else an archive holds (checksum, safetensors only, LoRA names, size)."""

from __future__ import annotations

import io
import json
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save

from s2studio.cli import main
from s2studio.errors import UserError
from s2studio.state import lora_file, voice_archive
from s2studio.state.staleness import voice_key
from s2studio.state.voices import VoiceLibrary
from test_voices import snapshot, tone


def lora_bytes(seed: int = 0, rank: int = 2) -> bytes:
    rng = np.random.default_rng(seed)
    return save({"layers.0.attention.wqkv.lora_A": rng.standard_normal((rank, 8)).astype(np.float32),
                 "layers.0.attention.wqkv.lora_B": rng.standard_normal((24, rank)).astype(np.float32),
                 "embeddings.lora_A": rng.standard_normal((rank, 16)).astype(np.float32),
                 "embeddings.lora_B": rng.standard_normal((8, rank)).astype(np.float32)})


@pytest.fixture
def lib(tmp_path: Path) -> VoiceLibrary:
    return VoiceLibrary(tmp_path / "data" / "voices")


@pytest.fixture
def voice(lib: VoiceLibrary, tmp_path: Path):
    return lib.create("Alice", [(tone(tmp_path / "a.wav", 3.0), "Hello there.")])


def test_a_voice_keeps_its_lora_and_gives_it_back(lib: VoiceLibrary, voice, tmp_path: Path) -> None:
    src = tmp_path / "run" / "lora.safetensors"
    src.parent.mkdir()
    src.write_bytes(lora_bytes())
    (src.parent / "lora.json").write_text(json.dumps({"lora": "r_8_alpha_16", "steps": 40}))
    before = voice_key(voice)
    with_lora = lib.set_lora(voice.id, src, "r_8_alpha_16, 40 steps")
    path = lib.lora_path(with_lora)
    assert path == lib.folder(voice.id) / "lora.safetensors" and path.read_bytes() == src.read_bytes()
    assert lib.get(voice.id).lora == with_lora.lora and with_lora.lora.size == len(src.read_bytes())
    assert json.loads((lib.folder(voice.id) / "voice.json").read_text())["lora"]["note"] == "r_8_alpha_16, 40 steps"
    assert voice_key(with_lora) != before  # its takes are stale: they were spoken without the LoRA
    assert lib.lora_paths([with_lora, lib.get(voice.id)]) == {voice.id: path}

    plain = lib.remove_lora(voice.id)
    assert plain.lora is None and not path.exists() and lib.lora_path(plain) is None
    assert "lora" not in json.loads((lib.folder(voice.id) / "voice.json").read_text())
    assert voice_key(plain) == before


def test_set_lora_refuses_what_is_no_lora_and_writes_nothing(lib: VoiceLibrary, voice, tmp_path: Path) -> None:
    before = snapshot(lib.root)
    pickled = tmp_path / "model.pt"
    pickled.write_bytes(pickle.dumps({"layers.0.attention.wqkv.lora_A": [1.0]}))
    with pytest.raises(UserError, match="is not a usable LoRA: it is not a safetensors file"):
        lib.set_lora(voice.id, pickled)
    other = tmp_path / "other.safetensors"
    other.write_bytes(save({"layers.0.attention.wqkv.weight": np.zeros((2, 2), np.float32)}))
    with pytest.raises(UserError, match="which is not a LoRA weight"):
        lib.set_lora(voice.id, other)
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(lora_bytes()[:-4])
    with pytest.raises(UserError, match="truncated or damaged"):
        lib.set_lora(voice.id, cut)
    lonely = tmp_path / "lonely.safetensors"
    lonely.write_bytes(save({"embeddings.lora_A": np.zeros((2, 16), np.float32)}))
    with pytest.raises(UserError, match="embeddings.lora_A has no partner"):
        lib.set_lora(voice.id, lonely)
    ints = tmp_path / "ints.safetensors"
    ints.write_bytes(save({"embeddings.lora_A": np.zeros((2, 16), np.int64),
                           "embeddings.lora_B": np.zeros((8, 2), np.int64)}))
    with pytest.raises(UserError, match="is I64, not float32"):
        lib.set_lora(voice.id, ints)
    assert snapshot(lib.root) == before


def test_the_archive_carries_the_lora(lib: VoiceLibrary, voice, tmp_path: Path) -> None:
    src = tmp_path / "lora.safetensors"
    src.write_bytes(lora_bytes())
    lib.set_lora(voice.id, src, "note")
    archive = lib.export(voice.id, tmp_path / "alice")
    with zipfile.ZipFile(archive) as z:
        assert "lora.safetensors" in z.namelist()
    other = VoiceLibrary(tmp_path / "elsewhere")
    imported = other.import_voice(archive)
    assert imported.lora == lib.get(voice.id).lora
    assert other.lora_path(imported).read_bytes() == src.read_bytes()


def _rewrite(archive: Path, dest: Path, change) -> Path:
    """`archive` with its entries passed through `change(name, data) -> {name: data}`."""
    with zipfile.ZipFile(archive) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    out: dict[str, bytes] = {}
    for name, data in entries.items():
        out.update(change(name, data))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in out.items():
            z.writestr(name, data)
    dest.write_bytes(buf.getvalue())
    return dest


def test_import_refuses_a_bad_lora_and_leaves_the_library_as_it_was(lib: VoiceLibrary, voice, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "lora.safetensors"
    src.write_bytes(lora_bytes())
    lib.set_lora(voice.id, src)
    good = lib.export(voice.id, tmp_path / "good")
    plain = VoiceLibrary(tmp_path / "plain-lib")
    plain.create("Bob", [(tone(tmp_path / "b.wav", 3.0), "Bob here.")])
    plain_archive = plain.export(plain.list()[0].id, tmp_path / "plain")
    target = VoiceLibrary(tmp_path / "target")
    target.create("Carol", [(tone(tmp_path / "c.wav", 3.0), "Carol.")])
    before = snapshot(target.root)

    swapped = _rewrite(good, tmp_path / "swapped.s2voice",
                       lambda n, d: {n: lora_bytes(seed=9) if n == "lora.safetensors" else d})
    with pytest.raises(UserError, match="lora.safetensors does not match its checksum"):
        target.import_voice(swapped)

    def pickled(name: str, data: bytes) -> dict[str, bytes]:
        if name != "lora.safetensors":
            return {name: data}
        return {name: pickle.dumps(["not", "tensors"])}

    def relisted(name: str, data: bytes) -> dict[str, bytes]:
        if name != "voice.json":
            return pickled(name, data)
        raw = json.loads(data)
        import hashlib

        raw["lora"]["sha256"] = hashlib.sha256(pickle.dumps(["not", "tensors"])).hexdigest()
        return {name: json.dumps(raw).encode()}

    with pytest.raises(UserError, match="its lora.safetensors is not a usable LoRA \\(it is not a safetensors file\\)"):
        target.import_voice(_rewrite(good, tmp_path / "pickled.s2voice", relisted))

    unlisted = _rewrite(plain_archive, tmp_path / "unlisted.s2voice",
                        lambda n, d: {n: d, **({"lora.safetensors": lora_bytes()} if n == "voice.json" else {})})
    with pytest.raises(UserError, match="holds a lora.safetensors that its voice.json does not list"):
        target.import_voice(unlisted)

    missing = _rewrite(good, tmp_path / "missing.s2voice", lambda n, d: {} if n == "lora.safetensors" else {n: d})
    with pytest.raises(UserError, match="lacks lora.safetensors, which its voice.json lists"):
        target.import_voice(missing)

    outside = _rewrite(good, tmp_path / "outside.s2voice",
                       lambda n, d: {("../lora.safetensors" if n == "lora.safetensors" else n): d})
    with pytest.raises(UserError, match="a path outside the voice folder"):
        target.import_voice(outside)

    monkeypatch.setattr(voice_archive, "MAX_LORA_BYTES", 100)
    with pytest.raises(UserError, match="its LoRA unpacks to 0 MB, over the 0 MB allowed"):
        target.import_voice(good)
    monkeypatch.setattr(lora_file, "MAX_LORA_BYTES", 100)
    with pytest.raises(UserError, match="over the 0 MB a voice's LoRA may have"):
        target.set_lora(target.list()[0].id, src)
    assert snapshot(target.root) == before


def test_train_attach_gives_and_takes_the_lora(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("S2STUDIO_DATA_DIR", str(tmp_path / "data"))
    lib = VoiceLibrary(tmp_path / "data" / "voices")
    voice = lib.create("Alice", [(tone(tmp_path / "a.wav", 3.0), "Hello there.")])
    src = tmp_path / "run" / "lora.safetensors"
    src.parent.mkdir()
    src.write_bytes(lora_bytes())
    (src.parent / "lora.json").write_text(json.dumps({"lora": "r_32_alpha_16_fast", "steps": 12}))
    assert main(["train", "attach", "--voice", "alice", "--lora", str(src)]) == 0
    assert capsys.readouterr().out.strip() == f"voice 'Alice' now renders with {src} (r_32_alpha_16_fast, 12 steps)"
    assert lib.get(voice.id).lora.note == "r_32_alpha_16_fast, 12 steps"
    assert main(["train", "attach", "--voice", "Alice", "--remove"]) == 0
    assert "speaks with the plain model again" in capsys.readouterr().out and lib.get(voice.id).lora is None
    assert main(["train", "attach", "--voice", "Alice", "--lora", str(tmp_path / "a.wav")]) == 2
    assert "is not a usable LoRA" in capsys.readouterr().err and lib.get(voice.id).lora is None
