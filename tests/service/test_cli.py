"""The command line as users run it: ``python -m service.cli transcribe FILE... --format ... --out DIR``."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT

from service.server.auth import ApiKeys, exposure_problem


def run_cli(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "service.cli", "transcribe", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_files_are_written_per_format_and_a_bad_file_is_reported(tmp_path, clip_wav):
    (tmp_path / "clip.wav").write_bytes(clip_wav)
    (tmp_path / "notes.wav").write_text("not audio")
    result = run_cli(str(tmp_path / "clip.wav"), str(tmp_path / "notes.wav"), "--format", "srt", "--out", str(tmp_path))
    assert result.returncode == 1
    assert "notes.wav: inputs: text is not an accepted audio file" in result.stderr
    srt = (tmp_path / "clip.srt").read_text()
    assert srt.startswith("1\n00:00:") and "Diane in New Jersey" in " ".join(srt.split())
    assert not (tmp_path / "notes.srt").exists()


def test_parameters_are_validated_before_loading_models():
    result = run_cli("--num-speakers", "2", "--min-speakers", "1")
    assert result.returncode == 2
    assert "num_speakers excludes min_speakers and max_speakers" in result.stderr


def test_the_server_refuses_a_network_address_without_api_keys():
    env = {key: value for key, value in os.environ.items() if key not in ("API_KEYS", "API_KEYS_FILE")}
    command = [sys.executable, "-m", "service.cli", "serve", "--host", "0.0.0.0"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 2
    assert "refusing to listen on 0.0.0.0 without API keys" in result.stderr and "API_KEYS" in result.stderr
    for host in ("127.0.0.1", "::1", "localhost"):
        assert exposure_problem(host, ApiKeys([]), allow_unauthenticated=False) is None
    assert exposure_problem("0.0.0.0", ApiKeys(["a key"]), allow_unauthenticated=False) is None
    assert exposure_problem("0.0.0.0", ApiKeys([]), allow_unauthenticated=True) is None
