"""The endpoint client against the real local server, in process on 127.0.0.1 with room for two requests: 20 files
four at a time (503s retried, nothing lost), a second run that skips everything, and a 4xx that is not retried."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
import wave
from pathlib import Path

import pytest
import uvicorn

from config import ServerSettings
from service.cli import main
from service.endpoint_client import EndpointClient, RetryPolicy, transcribe_files
from service.server import create_app
from speech.audio import pyannote_sample_path

CLIPS, CLIP_S, START_S, STEP_S = 20, 1.6, 6.0, 1.15  # 20 short slices of the call, where it has speech


@pytest.fixture(scope="module")
def url(handler):
    """A uvicorn server around the session's handler: one worker, one queue slot, so a third request gets 503."""
    app = create_app(handler=handler, server_settings=ServerSettings(workers=1, queue_length=1))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{listener.getsockname()[1]}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=5) as response:
                if response.status == 200:
                    break
        except OSError:
            time.sleep(0.05)
    try:
        yield base + "/"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        listener.close()


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("clips")
    with wave.open(str(pyannote_sample_path())) as sample:
        params, rate = sample.getparams(), sample.getframerate()
        frames = sample.readframes(sample.getnframes())
    width = params.sampwidth * params.nchannels
    paths = []
    for i in range(CLIPS):
        start = int((START_S + i * STEP_S) * rate) * width
        path = folder / f"clip{i:02d}.wav"
        with wave.open(str(path), "wb") as clip:
            clip.setparams(params)
            clip.writeframes(frames[start : start + int(CLIP_S * rate) * width])
        paths.append(path)
    return paths


def test_twenty_files_four_at_a_time_through_503s_then_all_skipped(url, clips, tmp_path):
    # the server's Retry-After (5 s) is honoured; capping the backoff at 6 s keeps a file kept out by the others
    # from waiting long after they are done, and more attempts let it wait for all of them on busy cores
    client = EndpointClient(url, "not-checked-locally", timeout_s=120, retry=RetryPolicy(attempts=20, max_delay_s=6))
    result = transcribe_files(client, clips, tmp_path, "json", concurrency=4, progress=False)
    assert [o.status for o in result.outcomes] == ["transcribed"] * CLIPS, [o.error for o in result.failed]
    assert result.retries[503] >= 1, result.retries
    assert set(result.retries) == {503}
    for clip in clips:
        assert isinstance(json.loads((tmp_path / f"{clip.stem}.json").read_text())["text"], str)
    assert sorted(path.name for path in tmp_path.iterdir()) == [f"{clip.stem}.json" for clip in clips]

    again = transcribe_files(client, clips, tmp_path, "json", concurrency=4, progress=False)
    assert len(again.skipped) == CLIPS and again.requests == 0
    assert again.summary() == "0 transcribed, 20 skipped, 0 failed (0 requests, 0 retried)"


def test_a_4xx_fails_without_retry_and_the_others_succeed(url, clips, tmp_path, capsys):
    notes = tmp_path / "notes.wav"
    notes.write_text("not audio")
    out = tmp_path / "out"
    files = [clips[0], notes, clips[1]]
    result = transcribe_files(EndpointClient(url), files, out, "srt", concurrency=2, progress=False)
    assert [o.status for o in result.outcomes] == ["transcribed", "failed", "transcribed"]
    failed = result.outcomes[1]
    assert failed.attempts[-1] == 415 and failed.attempts.count(415) == 1 and set(failed.attempts) <= {415, 503}
    assert failed.error.startswith("HTTP 415: inputs: ")
    assert "notes.wav: HTTP 415" in capsys.readouterr().err
    assert (out / "clip00.srt").read_text().startswith("1\n00:00:")
    assert not (out / "notes.srt").exists() and not list(out.glob(".*"))


def test_the_command_line_resumes_and_validates_before_sending(url, clips, tmp_path, capsys):
    (tmp_path / "clip00.json").write_text("{}")  # an output already there: skipped, not overwritten
    assert main(["transcribe", "--endpoint", url, "--out", str(tmp_path), *map(str, clips[:2])]) == 0
    assert capsys.readouterr().err.splitlines()[-1].startswith("1 transcribed, 1 skipped, 0 failed")
    assert (tmp_path / "clip00.json").read_text() == "{}"
    assert "text" in json.loads((tmp_path / "clip01.json").read_text())
    arguments = ["transcribe", "--endpoint", url, "--out", str(tmp_path), str(clips[2])]
    assert main([*arguments, "--num-speakers", "2", "--min-speakers", "1"]) == 2
    assert "num_speakers excludes min_speakers" in capsys.readouterr().err
    assert not (tmp_path / "clip02.json").exists()
    with pytest.raises(SystemExit):
        main(["transcribe", "--endpoint", url, str(clips[2])])  # no --out


def test_requests_carry_the_token_and_the_scale_up_timeout():
    request = EndpointClient("https://example.invalid/", "hf_x").request(b"RIFF", {"num_speakers": 2})
    assert request.get_header("Authorization") == "Bearer hf_x"
    assert request.get_header("X-scale-up-timeout") == "600"
    assert request.get_header("Content-type") == request.get_header("Accept") == "application/json"
    assert json.loads(request.data) == {"inputs": "UklGRg==", "parameters": {"num_speakers": 2}}
    assert "Authorization" not in EndpointClient("http://127.0.0.1/").request(b"", {}).headers


def test_backoff_grows_honours_retry_after_and_is_capped():
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=60.0)
    assert 1.0 <= policy.delay(1) <= 1.25 and 8.0 <= policy.delay(4) <= 10.0
    assert 30.0 <= policy.delay(1, retry_after_s=30) <= 37.5
    assert policy.delay(10) == 60.0 and policy.delay(1, retry_after_s=600) == 60.0
