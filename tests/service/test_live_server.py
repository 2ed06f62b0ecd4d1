"""A real server process started as users start it (``python -m service.cli serve``), driven over HTTP on 127.0.0.1:
curl, the official OpenAI SDK (plain and streamed), and the demo page in headless Chromium (one request, and a job)."""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from conftest import API_KEY, SAMPLE_RATE, LiveServer
from corpus import Conversation, build

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
needs_chromium = pytest.mark.skipif(
    not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed (.ci/run installs it)"
)

AUTH = LiveServer.auth()


@contextlib.contextmanager
def demo_page(url: str):
    """The demo page, open in headless Chromium (muted)."""
    from playwright.sync_api import sync_playwright

    flags = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=[*flags, "--disable-sync", "--mute-audio"])
        try:
            page = browser.new_page()
            page.goto(f"{url}/ui")
            page.fill("#api-key", API_KEY)
            yield page
        finally:
            browser.close()


@pytest.fixture(scope="module")
def clip_file(tmp_path_factory, clip_wav):
    path = tmp_path_factory.mktemp("audio") / "clip.wav"
    path.write_bytes(clip_wav)
    return path


@pytest.fixture(scope="module")
def conversation_file(tmp_path_factory):
    """About 70 s of two synthesized voices taking turns: three 30 s windows."""
    folder = tmp_path_factory.mktemp("conversation")
    build(Conversation("conversation", 7, ("flite-slt", "flite-awb"), 40, None, 0.0, 68.0), folder)
    return folder / "conversation.wav"


def test_health_flips_from_503_to_200(live_server):
    statuses = live_server.statuses
    assert statuses[-1] == 200
    assert 503 in statuses, statuses
    assert set(statuses) == {503, 200}


def test_raw_wav_bytes_and_base64_json_return_speakers(live_server, clip_file):
    url = live_server.url
    audio = clip_file.read_bytes()
    raw = httpx.post(url, content=audio, headers={"Content-Type": "audio/wav", **AUTH}, timeout=120)
    as_json = httpx.post(url, json={"inputs": base64.b64encode(audio).decode()}, headers=AUTH, timeout=120)
    for response in (raw, as_json):
        assert response.status_code == 200
        assert len({turn["speaker"] for turn in response.json()["speakers"]}) == 2
    assert raw.json()["speakers"] == as_json.json()["speakers"]


def test_curl_multipart_gives_srt_with_speakers(live_server, clip_file):
    url = live_server.url
    srt = subprocess.run(
        ["curl", "-sS", "--fail-with-body", "-H", f"Authorization: Bearer {API_KEY}",
         "-F", f"file=@{clip_file}", "-F", "response_format=srt",
         f"{url}/v1/audio/transcriptions"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    blocks = srt.strip().split("\n\n")
    assert [block.split("\n")[0] for block in blocks] == [str(i) for i in range(1, len(blocks) + 1)]
    assert all(" --> " in block.split("\n")[1] for block in blocks)
    assert len({block.split("\n")[2].split(":")[0] for block in blocks}) == 2


def test_the_openai_sdk_gets_text(live_server, clip_file):
    from openai import OpenAI

    url = live_server.url
    client = OpenAI(base_url=f"{url}/v1", api_key=API_KEY, timeout=120, max_retries=0)
    with clip_file.open("rb") as audio:
        text = client.audio.transcriptions.create(model="whisper-1", file=audio, response_format="text")
    assert "Diane in New Jersey" in text
    with clip_file.open("rb") as audio:
        verbose = client.audio.transcriptions.create(
            model="whisper-1", file=audio, response_format="verbose_json", timestamp_granularities=["word"]
        )
    assert verbose.language == "english" and verbose.words and verbose.words[0].start < verbose.words[-1].end


@needs_chromium
def test_demo_page_shows_the_transcript_by_speaker(live_server, clip_file):
    url = live_server.url
    with demo_page(url) as page:
        page.set_input_files("#file", str(clip_file))
        page.click("#transcribe")
        page.wait_for_selector(".turn", timeout=120_000)
        speakers = page.eval_on_selector_all(".turn", "nodes => nodes.map(n => n.dataset.speaker)")
        lanes = page.eval_on_selector_all(".lane .bar", "nodes => nodes.length")
        colours = page.eval_on_selector_all(".turn", "nodes => nodes.map(n => n.style.borderLeftColor)")
        transcript = page.inner_text("#transcript")
        status = page.inner_text("#status")
    assert len(set(speakers)) == 2 and len(set(colours)) == 2
    assert lanes >= len(speakers)
    assert "Diane in New Jersey" in transcript
    assert "2 speakers" in status


def test_the_openai_sdk_streams_speaker_segments_before_the_last_window(live_server, conversation_file):
    """Windows one at a time: speaker segments arrive before the last window's text; the final text is the
    non-streamed one."""
    from openai import OpenAI

    url = live_server.url
    client = OpenAI(base_url=f"{url}/v1", api_key=API_KEY, timeout=300, max_retries=0)
    options = {"model": "whisper-1", "response_format": "diarized_json", "extra_body": {"batch_size": 1}}
    with conversation_file.open("rb") as audio:
        events = list(client.audio.transcriptions.create(file=audio, stream=True, chunking_strategy="auto", **options))
    with conversation_file.open("rb") as audio:
        plain = client.audio.transcriptions.create(file=audio, **options)
    kinds = [event.type for event in events]
    deltas = [i for i, kind in enumerate(kinds) if kind == "transcript.text.delta"]
    assert len(deltas) >= 2 and kinds[-1] == "transcript.text.done"
    early = [events[i] for i in range(deltas[-1]) if kinds[i] == "transcript.text.segment"]
    assert len({segment.speaker for segment in early}) == 2 and all(segment.text for segment in early)
    assert events[-1].text == plain.text == "".join(events[i].delta for i in deltas)
    segments = {event.id: event.speaker for event in events if event.type == "transcript.text.segment"}
    assert segments == {segment.id: segment.speaker for segment in plain.segments}


@needs_chromium
def test_demo_page_runs_a_long_file_as_a_job_and_plays_from_a_turn(live_server, conversation_file):
    url = live_server.url
    with demo_page(url) as page:
        page.set_input_files("#file", str(conversation_file))
        page.click("#transcribe")
        page.wait_for_selector("#job:not([hidden])", timeout=30_000)
        fractions = set()
        while page.is_visible("#job"):
            fractions.add(page.eval_on_selector("#progress", "bar => bar.value"))
            time.sleep(0.1)
        page.wait_for_selector(".turn", timeout=30_000)
        jobs = httpx.get(f"{url}/jobs", headers=AUTH).json()["jobs"]
        turn = page.query_selector_all(".turn")[2]
        start = float(turn.get_attribute("data-start"))
        turn.click()
        page.wait_for_function("() => !document.querySelector('#player').paused", timeout=10_000)
        time.sleep(0.5)
        position = page.eval_on_selector("#player", "player => player.currentTime")
        page.fill(".rename[data-speaker='SPEAKER_00']", "Ann")
        names = page.eval_on_selector_all(".turn .who", "nodes => nodes.map(n => n.textContent)")
        with page.expect_download() as download:
            page.click(".download[data-format='srt']")
        srt = download.value.path().read_text()
        status = page.inner_text("#status")
    assert [job["status"] for job in jobs] == ["completed"]
    assert len([f for f in fractions if 0 < f < 1]) >= 2, fractions  # the bar moved
    assert start < position < start + 5
    assert "Ann" in names and "SPEAKER_01" in names and "SPEAKER_00" not in names
    assert "\nAnn: " in srt and "\nSPEAKER_01: " in srt
    assert "2 speakers" in status


def test_under_load_every_request_succeeds_or_gets_503(live_server, clip_wav):
    url = live_server.url
    short = clip_wav[: 44 + 2 * 2 * SAMPLE_RATE]  # 2 s of the call: a quick request

    def client(_: int) -> list[tuple[int, str | None]]:
        with httpx.Client(timeout=120) as http:
            results = []
            for _ in range(5):
                response = http.post(url, content=short, headers={"Content-Type": "audio/wav", **AUTH})
                results.append((response.status_code, response.headers.get("retry-after")))
            return results

    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = [result for results in pool.map(client, range(8)) for result in results]
    assert len(outcomes) == 40
    assert {status for status, _ in outcomes} <= {200, 503}
    assert all(retry == "5" for status, retry in outcomes if status == 503)
    assert any(status == 200 for status, _ in outcomes) and any(status == 503 for status, _ in outcomes)
    assert httpx.get(f"{url}/health").status_code == 200
    response = httpx.post(url, content=short, headers={"Content-Type": "audio/wav", **AUTH}, timeout=120)
    assert response.status_code == 200


def test_a_client_that_disconnects_stops_its_work(live_server, clip_wav):
    url, log = live_server.url, live_server.log
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            url, content=clip_wav, headers={"Content-Type": "audio/wav", **AUTH}, timeout=httpx.Timeout(5, read=0.5)
        )
    logged = '"method": "POST", "route": "/", "status": 499'
    deadline = time.monotonic() + 60
    while logged not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert logged in log.read_text()
    assert httpx.get(f"{url}/health").status_code == 200
