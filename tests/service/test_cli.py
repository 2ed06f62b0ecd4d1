"""The command line as users run it: ``python -m service.cli transcribe FILE... --format ... --out DIR``."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


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
