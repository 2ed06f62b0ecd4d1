"""Score the endpoint on recordings with reference transcripts: WER, cpWER and DER of the ``speakers`` turns.

python bench/evaluate.py              # the pyannote sample
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from metrics import annotation, cpwer, der, texts_by_speaker, wer


@dataclass(frozen=True)
class Reference:
    """A recording with its reference speaker turns: (speaker, start, end, text)."""

    name: str
    audio: Path
    turns: list[tuple[str, float, float, str]]

    @property
    def text(self) -> str:
        return " ".join(turn[3] for turn in self.turns)


def read_stm(audio: Path, stm: Path) -> Reference:
    turns = []
    for line in stm.read_text().splitlines():
        _, _, speaker, start, end, *words = line.split()
        turns.append((speaker, float(start), float(end), " ".join(words)))
    return Reference(audio.stem, audio, turns)


def pyannote_sample() -> Reference:
    import pyannote.audio

    folder = Path(pyannote.audio.__file__).parent / "sample"
    return read_stm(folder / "sample.wav", folder / "sample.stm")


def score(reference: Reference, response: dict) -> dict[str, float]:
    speakers = response["speakers"]
    hyp_turns = [(s["speaker"], s["timestamp"][0], s["timestamp"][1]) for s in speakers]
    ref_turns = [(speaker, start, end) for speaker, start, end, _ in reference.turns]
    return {
        "wer": wer(reference.text, response["text"]),
        "cpwer": cpwer(
            texts_by_speaker((t[0], t[3]) for t in reference.turns),
            texts_by_speaker((s["speaker"], s["text"]) for s in speakers),
        ),
        "der": der(annotation(ref_turns), annotation(hyp_turns), response["duration"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parameters", default="{}", help="request parameters, as JSON")
    args = parser.parse_args()
    from handler import EndpointHandler

    handler = EndpointHandler()
    for reference in [pyannote_sample()]:
        started = time.perf_counter()
        response = handler({"inputs": reference.audio.read_bytes(), "parameters": json.loads(args.parameters)})
        elapsed = time.perf_counter() - started
        scores = score(reference, response)
        print(f"{reference.name}: " + "  ".join(f"{k} {v:.1%}" for k, v in scores.items()) + f"  wall {elapsed:.1f} s")


if __name__ == "__main__":
    main()
