"""With the exact path and a fixed seed, `/v1/tts` answers with the samples `s2studio synth` writes for the
same text, reference clips and seed: the same codes, and the same PCM16 samples in design.md §4's sense (a
streamed decode rounds like a full one but for at most 1 LSB on a tiny fraction of samples; synth decodes each
batch whole, the server as it streams)."""

from __future__ import annotations

import io
from pathlib import Path

import httpx
import numpy as np
import ormsgpack
import soundfile as sf
from serve_helpers import API_KEY

from s2studio.cli import main
from s2studio.engine import remote_wire
from s2studio.engine.api import LineSpec, Reference, SynthesisRequest
from s2studio.settings import Sampling

TEXT = "<|speaker:0|>Hello there, how are you? <|speaker:1|>[laughing] Fine, and you?"
AUTH = {"Authorization": f"Bearer {API_KEY}"}


def test_tts_returns_the_samples_synth_writes(real_server, tiny_model: Path, clips, tmp_path: Path) -> None:
    assert real_server.state.info.precision == "float32"  # the exact path: CPU, float32, not the fast path
    out, codes_out = tmp_path / "synth.wav", tmp_path / "synth.npy"
    assert main(["synth", "--model", str(tiny_model), "--text", TEXT, "--reference", str(clips["alice"]),
                 "--reference-text", "Hello, I am Alice.", "--reference", str(clips["bob"]), "--reference-text",
                 "And I am Bob.", "--seed", "9", "--threads", "1", "--max-new-tokens", "10", "--chunk-length", "100",
                 "--temperature", "0.8", "--top-p", "0.8", "--device", "cpu", "--precision", "fp32", "-q",
                 "--out", str(out), "--codes-out", str(codes_out)]) == 0
    written, _ = sf.read(str(out), dtype="int16")
    body = {"text": TEXT, "seed": 9, "max_new_tokens": 10, "chunk_length": 100, "temperature": 0.8, "top_p": 0.8,
            "format": "wav", "references": [{"audio": clips["alice"].read_bytes(), "text": "Hello, I am Alice."},
                                            {"audio": clips["bob"].read_bytes(), "text": "And I am Bob."}]}
    served = []
    for streaming in (False, True):
        r = httpx.post(real_server.url + "/v1/tts", content=ormsgpack.packb({**body, "streaming": streaming}),
                       headers={**AUTH, "Content-Type": "application/msgpack", "model": "s2-pro"}, timeout=120)
        assert r.status_code == 200, r.text
        samples, rate = sf.read(io.BytesIO(r.content), dtype="int16")
        assert rate == 44100
        served.append(samples)
    np.testing.assert_array_equal(served[0], served[1])  # a streamed WAV holds the samples of the whole one
    assert len(served[0]) == len(written) > 0
    apart = np.abs(served[0].astype(np.int32) - written.astype(np.int32))
    assert apart.max() <= 1 and (apart > 0).mean() < 0.002, (apart.max(), (apart > 0).sum())

    # the codes behind those samples are synth's, exactly (the server's own route reports them)
    encoded = ormsgpack.unpackb(httpx.post(real_server.url + "/v1/vqgan/encode", headers={
        **AUTH, "Content-Type": "application/msgpack"}, content=ormsgpack.packb(
            {"audios": [clips["alice"].read_bytes(), clips["bob"].read_bytes()]})).content)["tokens"]
    request = SynthesisRequest("p", (LineSpec("a", 0, "Hello there, how are you?"),
                                     LineSpec("b", 1, "[laughing] Fine, and you?")),
                               (Reference(0, "Hello, I am Alice.", np.asarray(encoded[0])),
                                Reference(1, "And I am Bob.", np.asarray(encoded[1]))),
                               Sampling(temperature=0.8, top_p=0.8, top_k=30, max_frames=10, seed_mode="fixed", seed=9,
                                        batching="upstream"), 100)
    r = httpx.post(real_server.url + "/v1/s2studio/generate", content=remote_wire.request_to_wire(request),
                   headers={**AUTH, "Content-Type": "application/msgpack"}, timeout=120)
    records = list(remote_wire.RecordReader().feed(r.content))
    codes = [remote_wire.unpack_codes(rec["codes"]) for rec in records if rec["type"] == "line_finished"]
    np.testing.assert_array_equal(np.concatenate(codes, axis=1), np.load(codes_out))
