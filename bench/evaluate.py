"""Score the endpoint on recordings with reference transcripts: WER, cpWER and DER of the ``speakers`` turns.

python bench/evaluate.py                          # the pyannote sample
python bench/evaluate.py --corpus bench/corpus    # and the synthesized conversations (bench/corpus.py)
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

from metrics import annotation, cp_word_errors, normalize, texts_by_speaker, word_errors
from pyannote.core import Segment, Timeline
from pyannote.metrics.diarization import DiarizationErrorRate

from audio import pyannote_sample_path


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
    audio = pyannote_sample_path()
    return read_stm(audio, audio.with_suffix(".stm"))


def read_corpus(folder: Path) -> list[Reference]:
    references = []
    for path in sorted(folder.glob("*.json")):
        turns = [(t["speaker"], t["start"], t["end"], t["text"]) for t in json.loads(path.read_text())["turns"]]
        references.append(Reference(path.stem, path.with_suffix(".wav"), turns))
    return references


class Scorer:
    """Per-recording and pooled WER, cpWER and DER (pooled = total errors over total words or speech time)."""

    def __init__(self) -> None:
        self.words = self.errors = self.cp_errors = 0
        self.der = DiarizationErrorRate(collar=0.0, skip_overlap=False)

    def add(self, reference: Reference, response: dict) -> dict[str, float]:
        speakers = response["speakers"]
        words = len(normalize(reference.text))
        errors = word_errors(reference.text, response["text"])
        cp_errors = cp_word_errors(
            texts_by_speaker((t[0], t[3]) for t in reference.turns),
            texts_by_speaker((s["speaker"], s["text"]) for s in speakers),
        )
        der = self.der(
            annotation((speaker, start, end) for speaker, start, end, _ in reference.turns),
            annotation((s["speaker"], *s["timestamp"]) for s in speakers),
            uem=Timeline([Segment(0.0, response["duration"])]),
        )
        self.words, self.errors, self.cp_errors = self.words + words, self.errors + errors, self.cp_errors + cp_errors
        return {"wer": errors / max(1, words), "cpwer": cp_errors / max(1, words), "der": float(der)}

    def pooled(self) -> dict[str, float]:
        words = max(1, self.words)
        return {"wer": self.errors / words, "cpwer": self.cp_errors / words, "der": abs(self.der)}


def score(reference: Reference, response: dict) -> dict[str, float]:
    return Scorer().add(reference, response)


def _line(name: str, scores: dict[str, float], extra: str = "") -> str:
    return f"{name:14s} " + "  ".join(f"{k} {v:6.1%}" for k, v in scores.items()) + extra


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parameters", default="{}", help="request parameters, as JSON")
    parser.add_argument("--corpus", type=Path, help="folder written by bench/corpus.py")
    args = parser.parse_args()
    from handler import EndpointHandler

    handler = EndpointHandler()
    print(_line(*_run(handler, [pyannote_sample()], args.parameters)))
    if args.corpus:
        print(_line(*_run(handler, read_corpus(args.corpus), args.parameters, each=True)))


def _run(handler, references: list[Reference], parameters: str, each: bool = False) -> tuple[str, dict, str]:
    scorer, audio_s, wall_s = Scorer(), 0.0, 0.0
    for reference in references:
        started = time.perf_counter()
        response = handler({"inputs": reference.audio.read_bytes(), "parameters": json.loads(parameters)})
        elapsed = time.perf_counter() - started
        scores = scorer.add(reference, response)
        audio_s, wall_s = audio_s + response["duration"], wall_s + elapsed
        if each:
            print(_line(reference.name, scores, f"  {response['duration']:5.0f} s audio  wall {elapsed:5.1f} s"))
    name = references[0].name if len(references) == 1 else "pooled"
    return name, scorer.pooled(), f"  {audio_s:5.0f} s audio  wall {wall_s:5.1f} s  RTF {wall_s / audio_s:.2f}"


if __name__ == "__main__":
    main()
