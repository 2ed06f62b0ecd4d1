"""Transcribe and diarize recordings with the endpoint handler; print its JSON response.

python transcribe.py                       # the pyannote sample recording
python transcribe.py call.mp3 --parameters '{"num_speakers": 2}'
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from errors import RequestError


def pyannote_sample_path() -> Path:
    import pyannote.audio

    return Path(pyannote.audio.__file__).parent / "sample" / "sample.wav"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="audio files (default: the pyannote sample)")
    parser.add_argument("--parameters", default="{}", help="request parameters as JSON, e.g. '{\"num_speakers\": 2}'")
    args = parser.parse_args()
    from handler import EndpointHandler

    handler = EndpointHandler()
    status = 0
    for path in args.files or [pyannote_sample_path()]:
        try:
            response = handler({"inputs": path.read_bytes(), "parameters": json.loads(args.parameters)})
        except (OSError, RequestError) as error:
            print(f"{path}: {error}", file=sys.stderr)
            status = 1
            continue
        print(json.dumps(response, indent=2, ensure_ascii=False))
    return status


if __name__ == "__main__":
    sys.exit(main())
