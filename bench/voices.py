"""Word error rate of each corpus voice on its own: every sentence of ``bench/corpus.py`` said alone, with 0.5 s of
silence around it, no noise, no overlap, no diarization. What the ASR model gets wrong before segmentation and
attribution play a part.

python bench/voices.py                                       # every voice, greedy
python bench/voices.py espeak-us-f --parameters '{"beam_size": 5}'
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import LINES, VOICES, synthesize
from metrics import normalize, word_errors

from config import InferenceConfig, ModelSettings
from speech.asr.model import Whisper
from speech.asr.transcriber import WhisperTranscriber
from speech.audio import SAMPLE_RATE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("voices", nargs="*", metavar="VOICE", help=f"any of {', '.join(VOICES)}; default all")
    parser.add_argument("--parameters", default="{}", help="request parameters, as JSON")
    args = parser.parse_args()
    unknown = [voice for voice in args.voices if voice not in VOICES]
    if unknown:
        parser.error(f"unknown voice(s): {', '.join(unknown)}")
    settings = ModelSettings()
    transcriber = WhisperTranscriber(Whisper(settings.asr_model, None, settings.torch_device, settings.torch_dtype))
    config = InferenceConfig.from_parameters(json.loads(args.parameters))
    silence = np.zeros(SAMPLE_RATE // 2, dtype=np.float32)
    with tempfile.TemporaryDirectory() as folder:
        for voice in args.voices or VOICES:
            errors = words = 0
            for line in LINES:
                speech = synthesize(voice, line, Path(folder)).astype(np.float32)
                text = transcriber.transcribe(np.concatenate([silence, speech, silence]), config).text
                errors += word_errors(line, text)
                words += len(normalize(line))
            print(f"{voice:12s} wer {errors / words:6.1%}  ({errors}/{words} words)", flush=True)


if __name__ == "__main__":
    main()
