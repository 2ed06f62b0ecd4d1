"""The local server's routes in process (Starlette's test client) on the real handler."""

from __future__ import annotations

import base64
import copy
import json
import logging
import re
import threading
import time

import anyio
import pytest
from conftest import ready
from starlette.testclient import TestClient

from config import ModelSettings, ServerSettings
from service.server import HandlerSlot, WorkQueue, create_app
from speech.errors import ServiceUnavailableError


def transcribe(client: TestClient, audio: bytes, **form) -> object:
    return client.post("/v1/audio/transcriptions", files={"file": ("clip.wav", audio, "audio/wav")}, data=form)


def test_json_with_base64_returns_speakers(client, clip_wav):
    response = client.post("/", json={"inputs": base64.b64encode(clip_wav).decode()})
    assert response.status_code == 200
    body = response.json()
    assert len({turn["speaker"] for turn in body["speakers"]}) == 2
    assert "Diane" in body["text"]


def test_raw_audio_takes_parameters_from_the_query(client, clip_wav):
    response = client.post("/predict?num_speakers=1", content=clip_wav, headers={"Content-Type": "audio/wav"})
    assert response.status_code == 200
    body = response.json()
    assert body["parameters"]["num_speakers"] == 1
    assert {turn["speaker"] for turn in body["speakers"]} == {"SPEAKER_00"}


@pytest.mark.parametrize(
    ("request_kwargs", "status", "message"),
    [
        ({"content": b"hello", "headers": {"Content-Type": "text/plain"}}, 415, "content type 'text/plain'"),
        (
            {"content": b"not audio at all", "headers": {"Content-Type": "audio/wav"}},
            415,
            "text is not an accepted audio file",
        ),
        ({"content": b"{", "headers": {"Content-Type": "application/json"}}, 400, "not valid JSON"),
        ({"json": {"audio": "x"}}, 400, '"inputs"'),
        ({"json": {"inputs": "AAAA", "parameters": {"speakers": 2}}}, 422, "unknown parameter 'speakers'"),
    ],
)
def test_bad_requests_get_their_status_and_message(client, request_kwargs, status, message):
    response = client.post("/", **request_kwargs)
    assert response.status_code == status
    assert message in response.json()["error"]


def test_bad_query_parameters_are_named(client, clip_wav):
    response = client.post("/?batch_size=0", content=clip_wav, headers={"Content-Type": "audio/wav"})
    assert response.status_code == 422
    assert "batch_size" in response.json()["error"]


def test_a_body_over_the_limit_is_refused_with_413(handler, clip_wav, tmp_path):
    small = copy.copy(handler)
    small.settings = handler.settings.model_copy(update={"max_request_bytes": 1000})
    with TestClient(create_app(handler=small, server_settings=ServerSettings(jobs_dir=tmp_path))) as client:
        ready(client)
        limit = 1000 * 4 // 3 + 1024 * 1024
        response = client.post("/", content=b"\0" * (limit + 1), headers={"Content-Type": "audio/wav"})
        assert response.status_code == 413
        assert "limit" in response.json()["error"]
        response = client.post("/", json={"inputs": base64.b64encode(clip_wav).decode()})
        assert response.status_code == 413


class FailingHandler:
    """Fails like a model that breaks mid-request; its message quotes the request."""

    settings = None

    def __init__(self, settings):
        self.settings = settings

    def __call__(self, data, progress=None):
        raise RuntimeError(f"broken while reading {data['inputs'][:20]!r}")


def test_server_errors_get_an_error_id_and_no_payload_in_the_log(handler, clip_wav, caplog, tmp_path):
    app = create_app(handler=FailingHandler(handler.settings), server_settings=ServerSettings(jobs_dir=tmp_path))
    with TestClient(app) as client:
        ready(client)
        with caplog.at_level(logging.INFO, logger="server"):
            response = client.post("/", content=clip_wav, headers={"Content-Type": "audio/wav"})
        assert response.status_code == 500
        body = response.json()
        assert body["error"] == "internal server error" and len(body["error_id"]) == 12
        assert body["error_id"] in caplog.text and "RuntimeError" in caplog.text
        assert "RIFF" not in caplog.text  # the exception message quotes the audio; the log must not
        assert client.get("/health").status_code == 200


def test_health_is_503_until_the_models_are_loaded():
    release = threading.Event()
    slot = HandlerSlot(lambda: release.wait(10) and "handler")
    slot.start()
    with pytest.raises(ServiceUnavailableError, match="still loading"):
        slot.get()
    release.set()
    for _ in range(100):
        if slot.handler is not None:
            break
        time.sleep(0.01)
    assert slot.get() == "handler"


def test_a_full_queue_answers_503_at_once():
    queue = WorkQueue(workers=1, queue_length=1)
    release = threading.Event()
    outcomes: list[object] = []

    async def main():
        async def call():
            try:
                with queue.admit():
                    outcomes.append(await queue.run(lambda: release.wait(10) and {"ok": True}))
            except ServiceUnavailableError as error:
                outcomes.append(error)

        async with anyio.create_task_group() as tasks:
            for _ in range(3):
                tasks.start_soon(call)
            await anyio.sleep(0.2)
            release.set()

    anyio.run(main)
    assert sum(isinstance(o, ServiceUnavailableError) for o in outcomes) == 1
    assert outcomes.count({"ok": True}) == 2
    assert queue.pending == 0


def test_openai_json_and_text(client, clip_wav):
    body = transcribe(client, clip_wav, model="whisper-1").json()
    assert "Diane" in body["text"] and body["usage"] == {"type": "duration", "seconds": 15}
    text = transcribe(client, clip_wav, model="whisper-1", response_format="text")
    assert text.headers["content-type"].startswith("text/plain") and text.text == body["text"] + "\n"


def test_openai_srt_and_vtt_carry_speaker_labels(client, clip_wav):
    srt = transcribe(client, clip_wav, response_format="srt").text
    assert srt.startswith("1\n00:00:") and len(set(re.findall(r"^SPEAKER_\d\d: ", srt, re.MULTILINE))) == 2
    vtt = transcribe(client, clip_wav, response_format="vtt")
    assert vtt.headers["content-type"].startswith("text/vtt")
    assert vtt.text.startswith("WEBVTT\n") and len(set(re.findall(r"<v SPEAKER_\d\d>", vtt.text))) == 2


def test_openai_verbose_json_with_words(client, clip_wav):
    response = client.post(
        "/v1/audio/transcriptions",
        files={"file": ("clip.wav", clip_wav, "audio/wav")},
        data={"response_format": "verbose_json", "timestamp_granularities[]": ["word", "segment"]},
    )
    body = response.json()
    assert body["task"] == "transcribe" and body["language"] == "english" and body["duration"] == 15.0
    assert [s["id"] for s in body["segments"]] == list(range(len(body["segments"])))
    assert len({s["speaker"] for s in body["segments"]}) == 2
    assert " ".join(w["word"] for w in body["words"]) == " ".join(s["text"] for s in body["segments"])
    # Whisper's segments, as OpenAI's verbose_json has them: timed by their words, with the quality figures.
    for segment in body["segments"]:
        assert segment["avg_logprob"] < 0 and 0 <= segment["no_speech_prob"] <= 1 and segment["temperature"] == 0
        assert segment["compression_ratio"] > 1
        assert any(abs(segment["start"] - word["start"]) <= 0.1 for word in body["words"])
    assert all(0 <= word["probability"] <= 1 for word in body["words"])


def test_openai_diarized_json_with_our_speaker_hints(client, clip_wav):
    body = transcribe(client, clip_wav, response_format="diarized_json", num_speakers="2").json()
    assert {s["type"] for s in body["segments"]} == {"transcript.text.segment"}
    assert body["segments"][0]["id"] == "seg_0"
    assert len({s["speaker"] for s in body["segments"]}) == 2


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"prompt": "Hello there. " * 100}, "prompt is 300 tokens long"),
        ({"response_format": "xml"}, "response_format"),
        ({"timestamp_granularities[]": "word"}, "verbose_json"),
        ({"stream": "maybe"}, "stream: 'maybe' is not true or false"),
        ({"stream": "true", "response_format": "srt"}, "stream: use response_format json or text or diarized_json"),
        ({"chunking_strategy": "manual"}, "chunking_strategy: 'auto' or a server_vad object"),
        ({"chunking_strategy[type]": "server_vad", "chunking_strategy[threshold]": "2"}, "threshold: Input should be"),
        ({"speakers": "2"}, "unknown parameter 'speakers'"),
    ],
)
def test_openai_misuse_is_refused_with_a_message(client, clip_wav, form, message):
    response = transcribe(client, clip_wav, **form)
    assert response.status_code in (400, 422)
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and message in error["message"]


def test_openai_translation_needs_a_multilingual_model(client, clip_wav):
    response = client.post("/v1/audio/translations", files={"file": ("clip.wav", clip_wav, "audio/wav")})
    assert response.status_code == 422
    assert "multilingual" in response.json()["error"]["message"]


def test_openai_without_a_file(client):
    response = client.post(
        "/v1/audio/transcriptions", data={"model": "whisper-1"}, files={"x": ("a", b"", "text/plain")}
    )
    assert response.status_code in (400, 422)
    assert "file" in json.dumps(response.json())


def test_openai_stream_adds_up_to_the_plain_response(client, clip_wav):
    """The official SDK parses the stream; windows of 5 s, one at a time: speaker turns go out before the last
    window's text, and the deltas, the done event and the turns (revisions applied) are the plain response's."""
    from openai import OpenAI

    sdk = OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client, max_retries=0)
    options = {"chunk_length_s": 5, "batch_size": 1}
    events = list(
        sdk.audio.transcriptions.create(
            model="whisper-1",
            file=("clip.wav", clip_wav, "audio/wav"),
            response_format="diarized_json",
            stream=True,
            chunking_strategy={"type": "server_vad", "silence_duration_ms": 500},
            extra_body=options,
        )
    )
    plain = transcribe(client, clip_wav, response_format="diarized_json", **options).json()
    kinds = [event.type for event in events]
    assert kinds[-1] == "transcript.text.done" and kinds.count("transcript.text.done") == 1
    last_delta = max(i for i, kind in enumerate(kinds) if kind == "transcript.text.delta")
    assert kinds.count("transcript.text.delta") >= 3
    assert "transcript.text.segment" in kinds[:last_delta]
    assert "".join(e.delta for e in events if e.type == "transcript.text.delta") == events[-1].text == plain["text"]
    turns: dict[str, tuple] = {}
    for event in events:
        if event.type == "transcript.text.segment":
            assert (event.id in turns) == bool(getattr(event, "revision", False))
            turns[event.id] = (event.speaker, event.text, event.start, event.end)
    expected = {s["id"]: (s["speaker"], s["text"], s["start"], s["end"]) for s in plain["segments"]}
    assert turns == expected and len({speaker for speaker, *_ in turns.values()}) == 2


def test_openai_stream_of_json_has_no_segments_and_a_bad_file_gets_its_status(client, clip_wav):
    response = transcribe(client, clip_wav, stream="true", chunking_strategy="auto")
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    assert [event["type"] for event in events][-1] == "transcript.text.done"
    assert {event["type"] for event in events} == {"transcript.text.delta", "transcript.text.done"}
    assert re.search(r"^: transcription 1/1$", response.text, re.MULTILINE)  # progress as comments
    refused = transcribe(client, b"RIFF not really a wave file", stream="true")
    assert refused.status_code == 415 and "not an accepted audio file" in refused.json()["error"]["message"]


def test_convert_writes_a_renamed_transcript_as_subtitles(client, sample_response):
    names = {"SPEAKER_00": "Ann", "SPEAKER_01": "Bob"}
    renamed = {
        **sample_response,
        "speakers": [{**turn, "speaker": names[turn["speaker"]]} for turn in sample_response["speakers"]],
        "words": [{**word, "speaker": names[word["speaker"]]} for word in sample_response["words"]],
    }
    srt = client.post("/convert/srt", json=renamed)
    assert srt.status_code == 200 and srt.headers["content-disposition"] == 'attachment; filename="transcript.srt"'
    assert set(re.findall(r"^(\w+): ", srt.text, re.MULTILINE)) == {"Ann", "Bob"}
    assert {"<v Ann>", "<v Bob>"} <= set(re.findall(r"<v \w+>", client.post("/convert/vtt", json=renamed).text))
    bad = client.post("/convert/srt", json={"speakers": [{"speaker": "Ann", "text": "Hi.", "timestamp": [1.0]}]})
    assert bad.status_code == 422 and "speakers.0.timestamp" in bad.json()["error"]
    unknown = client.post("/convert/docx", json=renamed)
    assert unknown.status_code == 422 and "format: 'docx' is not one of" in unknown.json()["error"]


class FailingAfterDecoding:
    """Decodes, then breaks in the models: the stream has started, so the failure is an error event."""

    def __init__(self):
        self.settings = ModelSettings()

    def __call__(self, data, progress=None, emit=None):
        progress("decoding", 0, 1)
        progress("segmentation", 0, 1)
        raise RuntimeError("broken")


def test_a_failure_after_the_stream_started_is_an_error_event_the_sdk_raises(clip_wav, tmp_path):
    from openai import APIError, OpenAI

    app = create_app(handler=FailingAfterDecoding(), server_settings=ServerSettings(jobs_dir=tmp_path))
    with TestClient(app) as client:
        ready(client)
        sdk = OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client, max_retries=0)
        stream = sdk.audio.transcriptions.create(model="whisper-1", file=("clip.wav", clip_wav), stream=True)
        with pytest.raises(APIError, match="internal server error") as raised:
            list(stream)
        assert raised.value.body["type"] == "server_error" and len(raised.value.body["id"]) == 12
