"""The real clients, unmodified, against a live `s2studio serve` on 127.0.0.1 with the tiny demo model:
OpenAI's `openai` package and Fish's `fishaudio` SDK. Audio decodes at 44.1 kHz with the length the engine
produced (the server's job record), and streams while the job still runs."""

from __future__ import annotations

import base64
import io
import json

import httpx
import openai
import pytest
import soundfile as sf
from serve_helpers import API_KEY
from tones import tone
from fishaudio import FishAudio
from fishaudio.types import ReferenceAudio

from s2studio.serve.compile import speech_lines
from s2studio.serve.synthesis import LINE_GAP_S

GAP = int(LINE_GAP_S * 44100)


def last_record(server, route: str):
    record = server.state.history[-1]
    assert record.route == route and record.outcome == "finished", record
    return record


@pytest.fixture
def client(real_server) -> openai.OpenAI:
    return openai.OpenAI(base_url=real_server.url + "/v1", api_key=API_KEY)


def test_openai_wav_is_exact_and_as_long_as_the_engines_audio(client, real_server) -> None:
    audio = client.audio.speech.create(model="s2-pro", input="Hello there.", voice="Alice", response_format="wav",
                                         extra_body={"seed": 1})
    samples, rate = sf.read(io.BytesIO(audio.read()), dtype="float32")
    record = last_record(real_server, "openai")
    assert rate == 44100 and len(samples) == record.samples
    assert 0 < record.samples <= 12 * 2048 and record.samples % 2048 == 0  # one line, whole frames


def test_openai_mp3_decodes_to_the_engines_length(client, real_server) -> None:
    audio = client.audio.speech.create(model="tts-1", input="Hi. Two sentences here.", voice={"id": "Bob"},
                                         extra_body={"seed": 2})
    data = audio.read()
    assert data[:2] == b"\xff\xfb"  # an MPEG audio frame, not a WAV
    samples, rate = sf.read(io.BytesIO(data), dtype="float32")
    record = last_record(real_server, "openai")
    assert rate == 44100
    assert 0 <= len(samples) - record.samples <= 3 * 1152, (len(samples), record.samples)  # MP3 framing


def test_openai_streaming_response_gives_the_first_chunk_before_the_job_ends(client, real_server) -> None:
    text = " ".join(f"Sentence number {i} is here, long enough to be a piece of its own." * 2 for i in range(4))
    runner = real_server.state.runner
    with client.audio.speech.with_streaming_response.create(model="s2-pro", input=text, voice="Alice",
                                                            response_format="pcm", extra_body={"seed": 4}) as response:
        assert response.headers["x-audio-sample-rate"] == "44100"
        job = response.headers["x-s2-job"]
        pieces = response.iter_bytes()
        first = next(pieces)
        assert job not in dict(runner.stats().outcomes), "the first chunk came only after the job ended"
        assert job in runner.stats().running
        rest = b"".join(pieces)
    record = last_record(real_server, "openai")
    assert record.job_id == job
    assert (len(first) + len(rest)) // 2 == record.samples
    pieces = len(speech_lines(text))
    assert pieces >= 2  # each piece its own line, with the studio's gap between lines
    assert (record.samples - (pieces - 1) * GAP) % 2048 == 0 and record.samples > (pieces - 1) * GAP


def test_openai_sse_sends_base64_pcm_deltas_then_done(client, real_server) -> None:
    with client.audio.speech.with_streaming_response.create(model="s2-pro", input="Short.", voice="Alice",
                                                            response_format="pcm", stream_format="sse",
                                                            extra_body={"seed": 3}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert [e["type"] for e in events[:-1]] == ["speech.audio.delta"] * (len(events) - 1) and len(events) >= 3
    assert events[-1]["type"] == "speech.audio.done" and events[-1]["usage"]["input_tokens"] == 6
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert len(pcm) // 2 == last_record(real_server, "openai").samples


def test_openai_lists_the_model_and_refuses_what_s2_cannot_do(client) -> None:
    assert [m.id for m in client.models.list()] == ["s2-pro"]
    with pytest.raises(openai.BadRequestError, match="speed 1.5 is not supported"):
        client.audio.speech.create(model="s2-pro", input="Hi.", voice="Alice", speed=1.5)
    with pytest.raises(openai.BadRequestError, match="aac is not available"):
        client.audio.speech.create(model="s2-pro", input="Hi.", voice="Alice", response_format="aac")
    with pytest.raises(openai.BadRequestError, match="input is 4097 characters; this server takes at most 4096"):
        client.audio.speech.create(model="s2-pro", input="a" * 4097, voice="Alice")
    with pytest.raises(openai.NotFoundError, match="no voice called 'alloy'"):
        client.audio.speech.create(model="s2-pro", input="Hi.", voice="alloy")


def test_fishaudio_convert_with_inline_references_encodes_each_clip_once(real_server, tmp_path) -> None:
    fish = FishAudio(api_key=API_KEY, base_url=real_server.url)
    first, second = tone(tmp_path / "one.wav", 1.1, 240.0), tone(tmp_path / "two.flac", 0.8, 310.0)  # new bytes
    refs = [ReferenceAudio(audio=first.read_bytes(), text="Hello, I am Alice."),
            ReferenceAudio(audio=second.read_bytes(), text="And I am Bob.")]
    encoded = real_server.state.cache.encoded
    wav = fish.tts.convert(text="<|speaker:0|>Hello there. <|speaker:1|>And hello to you.", references=refs,
                           format="wav")
    samples, rate = sf.read(io.BytesIO(wav), dtype="float32")
    record = last_record(real_server, "fish")
    assert rate == 44100 and len(samples) == record.samples and record.samples % 2048 == 0
    assert real_server.state.cache.encoded == encoded + 2
    fish.tts.convert(text="<|speaker:0|>Again.", references=refs[:1], format="wav")
    assert real_server.state.cache.encoded == encoded + 2  # the same bytes again: from the cache


class StreamingSend(httpx.Client):
    """An httpx client that hands back responses before their body is read. Fish's SDK 1.3.0 sends
    `tts.stream` through `httpx.Client.request`, which reads the whole body first, so with its own client the
    stream yields the finished audio as one chunk; given this client (its `httpx_client` argument) the same
    SDK code yields the chunks as the server sends them."""

    def send(self, request: httpx.Request, **kwargs: object) -> httpx.Response:
        kwargs["stream"] = True
        return super().send(request, **kwargs)  # type: ignore[arg-type]


def test_fishaudio_stream_yields_chunks_while_the_server_generates(real_server) -> None:
    runner = real_server.state.runner
    buffered = b"".join(FishAudio(api_key=API_KEY, base_url=real_server.url).tts.stream(
        text="Buffered by the SDK.", reference_id="Alice"))
    assert len(sf.read(io.BytesIO(buffered))[0]) > 0  # mp3, the SDK's default format
    fish = FishAudio(api_key=API_KEY, base_url=real_server.url, httpx_client=StreamingSend(base_url=real_server.url))
    turns = " ".join(f"<|speaker:0|>Turn number {i} of a text long enough for several batches." for i in range(8))
    stream = fish.tts.stream(text=turns, reference_id="Alice", format="pcm")  # 200-byte batches: three of them
    chunks, running_at_first = [], ()
    for chunk in stream:
        if not chunks:
            running_at_first = runner.stats().running
        chunks.append(chunk)
    record = last_record(real_server, "fish")
    assert len(chunks) > 1 and record.job_id in running_at_first
    assert sum(map(len, chunks)) // 2 == record.samples


def test_fishaudio_errors_come_in_fish_shape(real_server) -> None:
    from fishaudio.exceptions import AuthenticationError, NotFoundError

    with pytest.raises(AuthenticationError, match="the API key is wrong"):
        FishAudio(api_key="wrong-key-123", base_url=real_server.url).tts.convert(text="Hi.")
    with pytest.raises(NotFoundError, match="no voice called 'Nobody'"):
        FishAudio(api_key=API_KEY, base_url=real_server.url).tts.convert(text="Hi.", reference_id="Nobody")
    response = httpx.post(real_server.url + "/v1/tts", json={"text": "Hi.", "top_p": 3},
                          headers={"Authorization": f"Bearer {API_KEY}"})
    assert response.status_code == 400
    assert response.json() == {"statusCode": 400, "message": "top_p: Input should be less than or equal to 1",
                               "error": "Bad Request", "code": "invalid_field"}
