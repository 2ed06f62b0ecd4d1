"""What a new replica costs: start-up time, first and later request times, and peak memory, per Whisper model.

    python bench/cold_start.py                                      # the bundle's tiny.en and base
    python bench/cold_start.py --asr-model .bundle/whisper-base --assistant-model ''

Each model runs in a fresh process, as a new Inference Endpoints replica would: import of the handler's modules,
``EndpointHandler()`` (the models loaded from local folders), then the pyannote sample three times. Peak RSS is the
process's. The environment's other settings (``DIARIZATION_MODEL``, ``DEVICE``...) apply as usual.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MEASURE = """
import json, resource, sys, time
started = time.perf_counter()
sys.path.insert(0, sys.argv[1])
from handler import EndpointHandler
from speech.audio import pyannote_sample_path
imported = time.perf_counter()
handler = EndpointHandler()
loaded = time.perf_counter()
sample = pyannote_sample_path().read_bytes()
requests = []
for _ in range(3):
    begun = time.perf_counter()
    response = handler({"inputs": sample})
    requests.append(time.perf_counter() - begun)
print(json.dumps({
    "import_s": imported - started,
    "load_s": loaded - imported,
    "requests_s": requests,
    "rtf": min(requests) / response["duration"],
    "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    "speakers": len({turn["speaker"] for turn in response["speakers"]}),
}))
"""


def measure(asr_model: str, assistant_model: str) -> dict:
    env = {**os.environ, "ASR_MODEL": asr_model, "ASSISTANT_MODEL": assistant_model}
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(ROOT)], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--asr-model", nargs="*", default=[".bundle/whisper-tiny.en", ".bundle/whisper-base"])
    parser.add_argument("--assistant-model", default=None, help="default: the model's bundle draft (MODEL-draft)")
    args = parser.parse_args()
    print("model | import s | load s | 1st request s | later requests s | RTF | peak RSS GB | speakers")
    for model in args.asr_model:
        draft = ROOT / f"{model}-draft"
        assistant = args.assistant_model if args.assistant_model is not None else str(draft) * draft.exists()
        result = measure(str(ROOT / model), assistant)
        first, *later = result["requests_s"]
        print(
            f"{Path(model).name} | {result['import_s']:.1f} | {result['load_s']:.1f} | {first:.1f} | "
            f"{' / '.join(f'{t:.1f}' for t in later)} | {result['rtf']:.3f} | {result['peak_rss_gb']:.2f} | "
            f"{result['speakers']}"
        )


if __name__ == "__main__":
    main()
