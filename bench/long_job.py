"""A long recording through the local server's jobs, with default settings: the WAV file posted to ``POST /jobs``
as it is read from disk, the job followed to the end, and the peak RSS of the server process by stage (the stage
the job's progress showed at its last poll, every 2 s; ``upload`` until the job is queued).

    python bench/long_job.py                 # 2 hours
    python bench/long_job.py --minutes 10

The recording is ``bench/long_recordings.py``'s (the 10-minute synthesized conversation, repeated). The server is
``python -m service.cli serve`` on a free local port, with a temporary ``JOBS_DIR`` and nothing else set.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
from long_recordings import long_recording, rss_mb

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, server: subprocess.Popen, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited with {server.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1)
    raise SystemExit("the server did not become healthy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=120)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        wav = Path(folder) / "recording.wav"
        with wav.open("wb") as file:
            long_recording(args.minutes, file)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "JOBS_DIR": str(Path(folder) / "jobs")}
        command = [sys.executable, "-m", "service.cli", "serve", "--port", str(port)]
        server = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
        peaks, stage, done = {}, ["upload"], threading.Event()

        def sample() -> None:
            while not done.is_set() and server.poll() is None:
                peaks[stage[0]] = max(peaks.get(stage[0], 0.0), rss_mb(server.pid))
                time.sleep(0.05)

        try:
            wait_healthy(url, server)
            idle = rss_mb(server.pid)
            sampler = threading.Thread(target=sample)
            sampler.start()
            began = time.perf_counter()
            with wav.open("rb") as body:  # streamed from disk
                response = httpx.post(f"{url}/jobs", content=body, headers={"Content-Type": "audio/wav"}, timeout=600)
            response.raise_for_status()
            job = response.json()
            print(
                f"{wav.stat().st_size / 1e6:.0f} MB WAV posted in {time.perf_counter() - began:.1f} s: {job['status']}"
            )
            while job["status"] in ("queued", "running"):
                time.sleep(2)
                job = httpx.get(f"{url}/jobs/{job['id']}", timeout=30).json()
                now = job["progress"]["stage"] or job["status"]
                if now != stage[0]:
                    stage[0] = now
                    print(f"  {time.perf_counter() - began:7.0f} s  {now}", flush=True)
            wall = time.perf_counter() - began
            done.set()
            sampler.join()
            print(
                f"{args.minutes:g} minutes: job {job['status']} in {wall:.0f} s (RTF {wall / (args.minutes * 60):.3f})"
            )
            if job["status"] != "completed":
                raise SystemExit(f"the job did not complete: {job.get('error')}")
            result = httpx.get(f"{url}/jobs/{job['id']}/result", timeout=60).json()
            words = sum(len(chunk["text"].split()) for chunk in result["chunks"])
            speakers = {turn["speaker"] for turn in result["speakers"]}
            print(f"  {words} words, {len(speakers)} speakers, audio {job['audio_s']:.0f} s")
            print(f"  server RSS: {idle:.0f} MB idle with the models loaded, peak {max(peaks.values()):.0f} MB")
            print("  peak by stage (MB): " + ", ".join(f"{name} {mb:.0f}" for name, mb in peaks.items()))
        finally:
            done.set()
            server.terminate()
            server.wait(timeout=60)


if __name__ == "__main__":
    main()
