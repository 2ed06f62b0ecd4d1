"""Peak memory by stage and real-time factor of the endpoint on long recordings, each in a fresh process.

    python bench/long_recordings.py                      # 10 minutes and 2 hours
    python bench/long_recordings.py --minutes 10 30

The recording is a WAV file of bench/benchmark.py's synthesized 10-minute conversation (3 speakers, noise,
overlaps), repeated to the length asked for, handed to the handler open (as jobs and the CLI do) in a worker thread
(as the local server and the Inference Endpoints toolkit call it: the C heap of a thread is not the main thread's);
the speakers the response names are printed (3 at any length). The handler's progress callback names the stage; a
thread samples the process's RSS every 20 ms, and each stage's figure is the highest RSS seen while it ran (``load``
is the models after loading).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from benchmark import recording
from corpus import write_wav

from speech.audio import SAMPLE_RATE, decode

STAGES = ("load", "decoding", "segmentation", "embeddings", "transcription", "merge")


def rss_mb(pid: int | str = "self") -> float:
    """The resident memory of process ``pid`` (this one by default), in MB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024


def long_recording(minutes: float, file: BinaryIO) -> None:
    """Write the 10-minute conversation repeated (and cut) to ``minutes`` into ``file``, as 16-bit WAV."""
    base = decode(recording(10).read_bytes(), 3600).waveform
    waveform = np.tile(base, int(np.ceil(minutes * 60 * SAMPLE_RATE / len(base))))[: int(minutes * 60 * SAMPLE_RATE)]
    write_wav(file, waveform)


def measure(minutes: float) -> dict:
    """Load the handler, then run one request on ``minutes`` of audio from a file (as jobs and the CLI hand it),
    sampling RSS per stage."""
    from handler import EndpointHandler

    file = tempfile.TemporaryFile()  # noqa: SIM115 (closed on return)
    long_recording(minutes, file)
    handler = EndpointHandler()
    peaks = {"load": rss_mb()}
    stage = ["decoding"]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peaks[stage[0]] = max(peaks.get(stage[0], 0.0), rss_mb())
            time.sleep(0.02)

    def progress(name: str, completed: int, total: int) -> None:
        stage[0] = name

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.perf_counter()
    try:
        file.seek(0)
        with ThreadPoolExecutor(1) as worker:  # in a worker thread, as the server and the toolkit call it
            response = worker.submit(handler, {"inputs": file}, progress=progress).result()
    finally:
        done.set()
        file.close()
    wall = time.perf_counter() - started
    sampler.join()
    speakers = len({turn["speaker"] for turn in response["speakers"]})
    return {"minutes": minutes, "wall_s": wall, "rtf": wall / (minutes * 60), "peaks": peaks, "speakers": speakers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, nargs="*", default=[10, 120])
    parser.add_argument("--measure", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return
    print(f"{'minutes':>7s} {'RTF':>6s} {'speakers':>8s} " + " ".join(f"{s:>13s}" for s in STAGES) + "  (peak RSS MB)")
    results = []
    for minutes in args.minutes:
        command = [sys.executable, __file__, "--measure", str(minutes)]
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        result = json.loads(output.strip().splitlines()[-1])
        results.append(result)
        peaks = " ".join(f"{result['peaks'].get(s, float('nan')):13.0f}" for s in STAGES)
        print(f"{minutes:7g} {result['rtf']:6.3f} {result['speakers']:8d} {peaks}", flush=True)
    if len(results) > 1:
        first, last = results[0], results[-1]
        growth = max(last["peaks"].values()) - max(first["peaks"].values())
        print(f"{last['minutes']:g} against {first['minutes']:g} minutes: peak +{growth / 1024:.2f} GB, RTF x "
              f"{last['rtf'] / first['rtf']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
