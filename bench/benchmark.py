"""Wall time, real-time factor and peak memory of the endpoint against two baseline flows, measured in one run.

    python bench/benchmark.py                               # sample, 1, 5, 10 and 20 minutes; all flows
    python bench/benchmark.py --minutes 1 5 --baselines-up-to 5

Flows, each on the embedded default weights (tiny.en, segmentation-3.0, CAM++) and in a fresh process per
(flow, recording), so that peak RSS is that recording's. Each flow is given the file's bytes and decodes them
inside the timed call; the timed request follows a 5 s warm-up request:
- ``endpoint``: this project's ``EndpointHandler``.
- ``per-window``: the same with ``DIARIZATION_SINGLE_PASS=0`` (CAM++ run once per pyannote window).
- ``peer``: the sequential design this project replaces: transformers' chunked ASR pipeline (30 s chunks,
  batch 8), then pyannote's pipeline (CAM++ once per window, as pyannote runs any embedding), then each chunk
  given the speaker whose turn ends closest to its end.
- ``whisperx``: a WhisperX-style flow: faster-whisper (CTranslate2, int8, the same tiny.en weights) with word
  timestamps, the same pyannote pipeline, each word given the speaker it overlaps most.
Recordings: the pyannote sample and conversations synthesized with bench/corpus.py (3 speakers, noise, overlaps).
"""

from __future__ import annotations

import argparse
import io
import json
import resource
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from corpus import write_wav

from speech.audio import SAMPLE_RATE, decode, pyannote_sample_path

RECORDINGS = Path(__file__).resolve().parent / "recordings"
ENDPOINT_FLOWS = ("endpoint", "per-window")
"""Run on every length; the baselines only up to ``--baselines-up-to`` minutes."""
BASELINE_FLOWS = ("peer", "whisperx")
_WARM_UP_S = 5
_MAX_DURATION_S = 7200


def recording(minutes: float) -> Path:
    """A synthesized conversation of about ``minutes`` (built once, then reused)."""
    from corpus import Conversation, build

    name = f"conversation-{minutes:g}min"
    path = RECORDINGS / f"{name}.wav"
    if not path.exists():
        RECORDINGS.mkdir(parents=True, exist_ok=True)
        voices = ("flite-slt", "flite-awb", "espeak-us-f")
        build(Conversation(name, 100 + int(minutes), voices, 10_000, 25.0, 0.15, minutes * 60), RECORDINGS)
    return path


def _diarization_pipeline():
    from config import ModelSettings
    from speech.speakers.pipeline import load_pipeline

    settings = ModelSettings()
    # as pyannote runs it: per window, no steps after the clustering
    return load_pipeline(settings.diarization_model, None, settings.torch_device, single_pass=False, steps=False)


def _diarize(pipeline, waveform: np.ndarray) -> list[tuple[float, float, str]]:
    import torch

    output = pipeline({"waveform": torch.from_numpy(waveform)[None], "sample_rate": SAMPLE_RATE})
    annotation = getattr(output, "speaker_diarization", output)
    return [(turn.start, turn.end, str(speaker)) for turn, _, speaker in annotation.itertracks(yield_label=True)]


def endpoint_flow(diarization_single_pass: bool | None = None):
    from config import ModelSettings
    from handler import EndpointHandler

    handler = EndpointHandler(settings=ModelSettings(diarization_single_pass=diarization_single_pass))
    return lambda data: handler({"inputs": data})


def peer_flow():
    from transformers import pipeline

    from config import ModelSettings

    settings = ModelSettings()
    asr = pipeline("automatic-speech-recognition", model=settings.asr_model, device=settings.torch_device)
    asr.tokenizer.pad_token_id = asr.model.config.eos_token_id  # the peer's fix for batching
    diarization = _diarization_pipeline()

    def run(data: bytes) -> list[dict]:
        waveform = decode(data, _MAX_DURATION_S).waveform
        chunks = asr(waveform.copy(), chunk_length_s=30, batch_size=8, return_timestamps=True)["chunks"]
        turns = _diarize(diarization, waveform)
        ends = np.array([end for _, end, _ in turns]) if turns else np.zeros(1)
        return [
            {"speaker": turns[int(np.argmin(np.abs(ends - (c["timestamp"][1] or 0.0))))][2] if turns else None, **c}
            for c in chunks
        ]

    return run


def whisperx_flow():
    from faster_whisper import WhisperModel

    from tools.offline_bundle import BUNDLE_DIR, extract_ctranslate2_model

    folder = extract_ctranslate2_model(BUNDLE_DIR / "ctranslate2-tiny.en")
    model = WhisperModel(str(folder), device="cpu", compute_type="int8", cpu_threads=2)
    diarization = _diarization_pipeline()

    def run(data: bytes) -> list[dict]:
        waveform = decode(data, _MAX_DURATION_S).waveform
        segments, _ = model.transcribe(waveform, beam_size=1, word_timestamps=True, language="en")
        words = [word for segment in segments for word in segment.words]
        turns = _diarize(diarization, waveform)

        def speaker(start: float, end: float) -> str | None:
            overlaps = [(min(end, b) - max(start, a), s) for a, b, s in turns]
            return max(overlaps)[1] if overlaps else None

        return [{"word": w.word, "start": w.start, "end": w.end, "speaker": speaker(w.start, w.end)} for w in words]

    return run


def measure(flow: str, audio: Path) -> dict:
    """Run one flow on one recording in this process: load, warm up, then time one request."""
    data = audio.read_bytes()
    waveform = decode(data, _MAX_DURATION_S).waveform
    warm_up = io.BytesIO()
    write_wav(warm_up, waveform[: _WARM_UP_S * SAMPLE_RATE])
    flows = {
        "endpoint": endpoint_flow,
        "per-window": partial(endpoint_flow, False),
        "peer": peer_flow,
        "whisperx": whisperx_flow,
    }
    run = flows[flow]()
    run(warm_up.getvalue())
    started = time.perf_counter()
    run(data)
    wall = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"flow": flow, "audio_s": len(waveform) / SAMPLE_RATE, "wall_s": wall, "peak_rss_mb": peak_mb}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, nargs="*", default=[1, 5, 10, 20], help="synthesized lengths")
    parser.add_argument("--baselines-up-to", type=float, default=10, help="run the baselines up to this many minutes")
    parser.add_argument("--measure", nargs=2, metavar=("FLOW", "AUDIO"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure[0], Path(args.measure[1]))))
        return
    recordings = [("sample", pyannote_sample_path(), 0.5)] + [(f"{m:g} min", recording(m), m) for m in args.minutes]
    header = ("recording", "flow", "audio s", "wall s", "RTF", "peak RSS MB", "x endpoint")
    print("{:10s} {:9s} {:>8s} {:>8s} {:>6s} {:>12s} {:>11s}".format(*header))
    for name, audio, minutes in recordings:
        endpoint_wall = None
        for flow in ENDPOINT_FLOWS + (BASELINE_FLOWS if minutes <= args.baselines_up_to else ()):
            command = [sys.executable, __file__, "--measure", flow, str(audio)]
            output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            result = json.loads(output.strip().splitlines()[-1])
            endpoint_wall = endpoint_wall or result["wall_s"]
            print(
                f"{name:10s} {flow:9s} {result['audio_s']:8.0f} {result['wall_s']:8.1f} "
                f"{result['wall_s'] / result['audio_s']:6.3f} {result['peak_rss_mb']:12.0f} "
                f"{result['wall_s'] / endpoint_wall:11.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
