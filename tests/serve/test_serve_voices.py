"""vllm-omni's voice upload and `voice` naming on our `/v1/audio/speech`, live on 127.0.0.1 with the tiny model:
a clip uploaded once is encoded once and then named; `ref_audio` as a data URL clones inline; what vllm-omni's
clients may send that we refuse gets one clear OpenAI-shaped message."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import os
import time
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
from serve_helpers import API_KEY, live_server
from tones import tone

from s2studio.engine.api import LoadRequest
from s2studio.serve.errors import ApiError
from s2studio.serve.references import InlineReference
from s2studio.serve.uploads import UploadedVoice, UploadedVoices


@pytest.fixture
def http(real_server) -> httpx.Client:
    with httpx.Client(base_url=real_server.url, headers={"Authorization": f"Bearer {API_KEY}"},
                      timeout=120) as client:
        yield client


def _speech(http: httpx.Client, **body: object) -> np.ndarray:
    response = http.post("/v1/audio/speech", json={"input": "Hi there.", "response_format": "wav", "seed": 3,
                                                   **body})
    assert response.status_code == 200, response.text
    samples, rate = sf.read(io.BytesIO(response.content), dtype="float32")
    assert rate == 44100 and len(samples) > 0
    return samples


def test_an_uploaded_voice_is_encoded_once_then_named_like_the_same_clip_inline(http, real_server, clips) -> None:
    clip = clips["alice"].read_bytes()
    files = {"audio_sample": ("alice.wav", clip, "audio/wav")}
    form = {"name": "Narrator-1", "consent": "recorded by the tests", "ref_text": "Hello, I am Alice."}
    up = http.post("/v1/audio/voices", files=files, data=form)
    assert up.status_code == 200 and up.json()["voice"]["name"] == "Narrator-1"
    listed = http.get("/v1/audio/voices").json()
    assert "Narrator-1" in listed["voices"] and "Alice" in listed["voices"]
    # (the session's server may hold other tests' uploads)
    assert [v["ref_text"] for v in listed["uploaded_voices"] if v["name"] == "Narrator-1"] == ["Hello, I am Alice."]
    before = real_server.state.cache.encoded
    named = _speech(http, voice="narrator-1")  # names are case-insensitive, as on vllm-omni
    again = _speech(http, voice="Narrator-1")
    inline = _speech(http, ref_audio="data:audio/wav;base64," + base64.b64encode(clip).decode(),
                     ref_text="Hello, I am Alice.")
    assert real_server.state.cache.encoded - before <= 1  # the same clip: encoded once for all three
    np.testing.assert_array_equal(named, again)
    np.testing.assert_array_equal(named, inline)
    assert http.delete("/v1/audio/voices/narrator-1").json()["success"] is True
    gone = http.post("/v1/audio/speech", json={"input": "Hi.", "voice": "Narrator-1"})
    assert gone.status_code == 404 and "no voice called 'Narrator-1'" in gone.json()["error"]["message"]


def test_what_we_refuse_is_said_in_one_line(http, clips) -> None:
    clip = clips["bob"].read_bytes()
    no_consent = http.post("/v1/audio/voices", files={"audio_sample": ("b.flac", clip)},
                           data={"name": "b", "ref_text": "And I am Bob."})
    assert no_consent.status_code == 400 and no_consent.json()["error"]["param"] == "consent"
    no_text = http.post("/v1/audio/voices", files={"audio_sample": ("b.flac", clip)},
                        data={"name": "b", "consent": "yes"})
    assert "exact transcript" in no_text.json()["error"]["message"]
    bad_name = http.post("/v1/audio/voices", files={"audio_sample": ("b.flac", clip)},
                         data={"name": "../x", "consent": "yes", "ref_text": "And I am Bob."})
    assert bad_name.status_code == 400 and bad_name.json()["error"]["param"] == "name"
    control = http.post("/v1/audio/voices", files={"audio_sample": ("b.flac", clip)},
                        data={"name": "b\x1b[2J", "consent": "yes", "ref_text": "And I am Bob."})
    assert control.json()["error"]["message"] == "`name` must be a voice name without slashes or control characters"
    url = http.post("/v1/audio/speech", json={"input": "Hi.", "ref_audio": "file:///etc/passwd", "ref_text": "x"})
    assert url.status_code == 400 and "does not fetch URLs or read paths" in url.json()["error"]["message"]
    assert http.delete("/v1/audio/voices/nobody").status_code == 404


def test_uploads_are_bounded_in_bytes_as_well_as_in_number() -> None:
    mb = 2**20

    def voice(name: str, size: float) -> UploadedVoice:
        return UploadedVoice(name, InlineReference(0, b"x" * int(size * mb), "Hi.", name, ".wav"), "mine", 0)

    uploads = UploadedVoices(capacity=4, max_bytes=2 * mb)
    uploads.put(voice("a", 1.2))
    uploads.put(voice("A", 1.9))  # replacing a voice counts only the new clip
    uploads.put(voice("b", 0.2))  # past 2 MB: A makes room
    assert [v.name for v in uploads.list()] == ["b"]
    with pytest.raises(ApiError) as exc:
        uploads.put(voice("c", 2.1))
    assert exc.value.status == 400 and exc.value.message == (
        "this server holds at most 2 MB of uploaded voices; upload a shorter clip")
    assert [v.name for v in uploads.list()] == ["b"]  # a refused upload evicts nothing


def test_past_the_cap_the_least_recently_used_voice_not_in_use_is_evicted(tmp_path, caplog) -> None:
    folder = tmp_path / "uploaded-voices"
    uploads = UploadedVoices(capacity=2, folder=folder)
    uploads.put(_clip_voice("Ann", b"a" * 100, 1))
    uploads.put(_clip_voice("Bo", b"b" * 100, 2))
    busy = uploads.take("ann")  # a request speaks with Ann: the least recent now is Bo
    with caplog.at_level(logging.WARNING, logger="s2studio.serve"):  # what `serve` prints without -v
        uploads.put(_clip_voice("Cy", b"c" * 100, 3))
    assert "evicted the uploaded voice 'Bo' (used least recently) to make room for 'Cy'" in caplog.text
    assert sorted(v.name for v in uploads.list()) == ["Ann", "Cy"] and uploads.get("bo") is None
    assert sorted(p.read_bytes()[:1] for p in folder.glob("*.wav")) == [b"a", b"c"]  # Bo's clip went with him
    assert uploads.take("cy") is not None  # Cy is the most recent, Ann the least recent but still speaking
    uploads.release(uploads.get("cy"))()
    uploads.put(_clip_voice("Dee", b"d" * 100, 4))
    assert sorted(v.name for v in uploads.list()) == ["Ann", "Dee"]  # not Ann: a running request holds her
    both = uploads.take("dee")
    with pytest.raises(ApiError) as exc:
        uploads.put(_clip_voice("Eve", b"e" * 100, 5))
    assert exc.value.status == 503 and exc.value.message == (
        "this server's uploaded voices are all in use by running requests; try again when they end")
    let_go = uploads.release(busy)
    let_go()
    let_go()  # once only: Ann's other requests (none here) would still hold her
    uploads.release(both)()
    uploads.put(_clip_voice("Eve", b"e" * 100, 5))
    assert sorted(v.name for v in uploads.list()) == ["Dee", "Eve"]
    assert sorted(v.name for v in UploadedVoices(capacity=2, folder=folder).list()) == ["Dee", "Eve"]
    assert [v.name for v in UploadedVoices(capacity=1, folder=folder).list()] == ["Eve"]  # at start: the newest
    with pytest.raises(ApiError, match="keeps no uploaded voices; send the clip with each request"):
        UploadedVoices(capacity=0).put(_clip_voice("Ann", b"a"))


def _clip_voice(name: str, audio: bytes, created: int = 0) -> UploadedVoice:
    return UploadedVoice(name, InlineReference(0, audio, "Hi.", hashlib.sha256(audio).hexdigest(), ".wav"), "mine",
                         created)


def test_kept_uploads_come_back_whole_and_what_was_altered_on_disk_is_left_out(tmp_path) -> None:
    folder = tmp_path / "uploaded-voices"
    kept = UploadedVoices(folder=folder)
    kept.put(_clip_voice("Ann", b"a" * 100, 1))
    kept.put(_clip_voice("Bo*?:<>|", b"b" * 100, 2))  # a name never becomes a path
    kept.put(_clip_voice("Cy", b"c" * 100, 3))
    kept.put(_clip_voice("cy", b"d" * 100, 4))  # replaces Cy: its clip goes
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file() and p.parent != folder) == []
    again = UploadedVoices(folder=folder)
    assert [(v.name, v.reference.audio[:1]) for v in again.list()] == [("Ann", b"a"), ("Bo*?:<>|", b"b"),
                                                                       ("cy", b"d")]
    assert len(list(folder.glob("*.wav"))) == 3
    assert again.remove("ANN") and not UploadedVoices(folder=folder).get("ann")
    # altered on disk: a clip changed, an entry naming a path, a foreign file, a clip nobody names
    bo = again.get("Bo*?:<>|")
    (folder / bo.clip_name).write_bytes(b"B" * 100)
    (tmp_path / bo.clip_name).write_bytes(b"b" * 100)  # a clip that would pass its hash check, outside the folder
    entry = json.loads(next(folder.glob("*.json")).read_text())
    dee = hashlib.sha256(b"dee").hexdigest()[:32] + ".json"  # where an entry for "Dee" would be
    (folder / dee).write_text(json.dumps({**entry, "name": "Dee", "clip": "../" + bo.clip_name}))
    (folder / "notes.txt").write_text("mine")
    orphan = folder / ("e" * 64 + ".wav")
    orphan.write_bytes(b"e")
    os.utime(orphan, (1, 1))  # from before this process: not a clip another server is writing now
    last = UploadedVoices(capacity=8, folder=folder)
    assert [v.name for v in last.list()] == ["cy"]
    assert not orphan.exists() and (folder / "notes.txt").exists()
    assert [v.name for v in UploadedVoices(capacity=0, folder=folder).list()] == []  # limits hold at start too


def test_an_upload_the_disk_cannot_keep_is_refused_and_not_named(tmp_path) -> None:
    (tmp_path / "file").write_text("not a folder")
    uploads = UploadedVoices(folder=tmp_path / "file" / "uploaded-voices")
    with pytest.raises(ApiError) as exc:
        uploads.put(_clip_voice("Ann", b"a"))
    assert exc.value.status == 507 and "could not store the voice" in exc.value.message
    assert uploads.list() == []


def _upload(http: httpx.Client, name: str, clip: bytes) -> httpx.Response:
    return http.post("/v1/audio/voices", files={"audio_sample": ("clip.wav", clip, "audio/wav")},
                     data={"name": name, "consent": "recorded by the tests", "ref_text": "Hello, I am Alice."})


def test_past_the_cap_an_upload_evicts_the_least_recently_used_and_naming_it_says_upload_again(
        http, real_server, clips, monkeypatch, tmp_path, caplog) -> None:
    monkeypatch.setattr(real_server.state, "uploads", UploadedVoices(capacity=2, folder=tmp_path / "uploaded"))
    alice, bob = clips["alice"].read_bytes(), clips["bob"].read_bytes()
    assert _upload(http, "One", alice).status_code == 200 and _upload(http, "Two", bob).status_code == 200
    _speech(http, voice="One")  # One is used: Two is now the least recently used
    with caplog.at_level(logging.WARNING, logger="s2studio.serve"):
        assert _upload(http, "Three", alice).status_code == 200
    assert "evicted the uploaded voice 'Two' (used least recently) to make room for 'Three'" in caplog.text
    listed = http.get("/v1/audio/voices").json()["uploaded_voices"]
    assert sorted(v["name"] for v in listed) == ["One", "Three"]
    assert len(list((tmp_path / "uploaded").glob("*.wav"))) == 1  # Bob's clip went with Two; One and Three share one
    gone = http.post("/v1/audio/speech", json={"input": "Hi.", "voice": "Two"})
    unknown = http.post("/v1/audio/speech", json={"input": "Hi.", "voice": "Zed"})
    assert gone.status_code == unknown.status_code == 404
    said = gone.json()["error"]["message"]
    assert said == unknown.json()["error"]["message"].replace("'Zed'", "'Two'")  # as if never uploaded
    assert said.startswith("no voice called 'Two' on this server (voices: 'Alice', ") and said.endswith(
        "; upload it (again: unused uploads make room for new ones) with POST /v1/audio/voices, or add it with "
        "`s2studio voice add`")
    assert _upload(http, "Two", bob).status_code == 200 and len(_speech(http, voice="Two")) > 0


def test_a_voice_a_running_request_speaks_with_is_never_evicted(library, clips) -> None:
    from s2studio.engine.fake import FakeEngine

    slow = " ".join(["A long sentence that keeps the fake engine busy for a while, frame after frame."] * 8)
    with live_server(LoadRequest("load", Path("fake")), library,
                     lambda: FakeEngine(frame_latency_s=0.05, max_batch=1)) as server, \
            httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60) as http:
        server.state.uploads = UploadedVoices(capacity=1)
        alice = clips["alice"].read_bytes()
        assert _upload(http, "Busy", alice).status_code == 200
        with http.stream("POST", "/v1/audio/speech",
                         json={"input": slow, "voice": "Busy", "response_format": "pcm"}) as running:
            chunks = running.iter_bytes()  # held: a dropped iterator closes the connection
            assert running.status_code == 200 and next(chunks)  # it speaks with Busy now
            with pytest.raises(openai.InternalServerError) as refused:  # openai's own voice upload
                _openai_upload(server.url, "New", alice, max_retries=0)
            assert refused.value.status_code == 503 and refused.value.body["message"] == (
                "this server's uploaded voices are all in use by running requests; try again when they end")
            # no job has ended yet: the scheduler's first guess, a job's 5 s over the one stream it runs
            assert refused.value.response.headers["Retry-After"] == "5"
            assert [v.name for v in server.state.uploads.list()] == ["Busy"]
        # the client hung up: the server lets Busy go as the request ends, and openai's client, told to wait
        # Retry-After seconds (it honours up to 60), retries once and gets the upload in
        started = time.monotonic()
        made = _openai_upload(server.url, "New", alice, max_retries=1)
        assert made.name == "New" and [v.name for v in server.state.uploads.list()] == ["New"]
        waited = time.monotonic() - started
        assert waited < 20, waited


def _openai_upload(url: str, name: str, clip: bytes, max_retries: int) -> openai.types.audio.Voice:
    client = openai.OpenAI(base_url=url + "/v1", api_key=API_KEY, max_retries=max_retries, timeout=60)
    made = client.audio.voices.create(audio_sample=("clip.wav", clip, "audio/wav"), consent="recorded by the tests",
                                      name=name, extra_body={"ref_text": "Hello, I am Alice."})
    return made


def test_fish_reference_id_names_a_voice_uploaded_by_openais_client_and_lets_it_go(
        real_server, clips, monkeypatch, tmp_path) -> None:
    from fishaudio import FishAudio
    from fishaudio.types import ReferenceAudio

    monkeypatch.setattr(real_server.state, "uploads", UploadedVoices(capacity=1))
    fresh = tone(tmp_path / "fresh.wav", 1.0, 275.0).read_bytes()  # bytes no other test encoded
    made = _openai_upload(real_server.url, "Fish-Voice", fresh, max_retries=0)
    assert (made.id, made.name, made.object, made.type) == ("Fish-Voice", "Fish-Voice", "audio.voice", "audio_sample")
    listed = httpx.get(real_server.url + "/v1/references/list", headers={"Authorization": f"Bearer {API_KEY}"})
    assert "Fish-Voice" in listed.json()["reference_ids"] and listed.json()["names"]["Fish-Voice"] == "Fish-Voice"
    fish = FishAudio(api_key=API_KEY, base_url=real_server.url)
    encoded = real_server.state.cache.encoded
    wav = fish.tts.convert(text="Hello there.", reference_id=made.id, format="wav")
    samples, rate = sf.read(io.BytesIO(wav), dtype="float32")
    record = real_server.state.history[-1]
    assert (record.route, record.outcome) == ("fish", "finished") and rate == 44100 and len(samples) == record.samples
    assert real_server.state.cache.encoded == encoded + 1  # the uploaded clip, encoded for this request
    fish.tts.convert(text="Again.", references=[ReferenceAudio(audio=fresh, text="Hello, I am Alice.")], format="wav")
    assert real_server.state.cache.encoded == encoded + 1  # the same clip inline: the same codes, from the cache
    # the request let the voice go: with room for one, the next upload evicts it instead of answering 503
    assert _openai_upload(real_server.url, "Next", fresh, max_retries=0).id == "Next"
    from fishaudio.exceptions import NotFoundError

    with pytest.raises(NotFoundError, match="no voice called 'fish-voice' on this server .*; upload it"):
        fish.tts.convert(text="Hi.", reference_id="fish-voice")  # evicted (names are case-insensitive)
