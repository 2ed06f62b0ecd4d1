"""Score the endpoint on recordings with reference transcripts: WER, cpWER, DER and the number of speakers.

python bench/evaluate.py                                   # the pyannote sample
python bench/evaluate.py --corpus bench/corpus             # and the synthesized conversations (bench/corpus.py)
python bench/evaluate.py --set ami=../shared/data/ami-dev --set test=bench/kokoro/test --whisperx --each

Each ``--set NAME=FOLDER`` is scored on its own (``*.stm`` beside ``*.wav``, or the JSON of bench/corpus.py and
bench/conversations.py): pooled WER, cpWER (each reference speaker's words against one hypothesis speaker's, best
mapping), the gap cpWER - WER (the attribution error alone), DER of the ``speakers`` turns against the reference
turns (collar 0, overlap scored), and on how many recordings the number of speakers is right. ``--whisperx`` scores
a WhisperX-style flow beside the endpoint in the same run (``bench/benchmark.py``: faster-whisper words on the same
tiny.en weights, the same pyannote pipeline, each word to the speaker it overlaps most).
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

from speech.audio import pyannote_sample_path


@dataclass(frozen=True)
class Reference:
    """A recording with its reference speaker turns: (speaker, start, end, text), and its spoken language."""

    name: str
    audio: Path
    turns: list[tuple[str, float, float, str]]
    language: str = "en"

    @property
    def text(self) -> str:
        return " ".join(turn[3] for turn in self.turns)

    @property
    def speakers(self) -> int:
        return len({turn[0] for turn in self.turns})


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
        reference = json.loads(path.read_text())
        turns = [(t["speaker"], t["start"], t["end"], t["text"]) for t in reference["turns"]]
        references.append(Reference(path.stem, path.with_suffix(".wav"), turns, reference.get("language", "en")))
    return references


class Scorer:
    """Per-recording and pooled WER, cpWER, the gap between them, DER (pooled = total errors over total words or
    speech time), and the recordings whose number of speakers is right."""

    def __init__(self) -> None:
        self.words = self.errors = self.cp_errors = 0
        self.recordings = self.counted = 0
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
        found = len({s["speaker"] for s in speakers if s["speaker"] is not None})
        truth = reference.speakers
        self.recordings, self.counted = self.recordings + 1, self.counted + (found == truth)
        wer, cpwer = errors / max(1, words), cp_errors / max(1, words)
        return {"wer": wer, "cpwer": cpwer, "gap": cpwer - wer, "der": float(der), "speakers": (found, truth)}

    def pooled(self) -> dict[str, float]:
        words = max(1, self.words)
        wer, cpwer = self.errors / words, self.cp_errors / words
        count = (self.counted, self.recordings)
        return {"wer": wer, "cpwer": cpwer, "gap": cpwer - wer, "der": abs(self.der), "count right": count}


def score(reference: Reference, response: dict) -> dict[str, float]:
    return Scorer().add(reference, response)


def _line(name: str, scores: dict, extra: str = "") -> str:
    def value(v) -> str:
        return f"{v[0]}/{v[1]}" if isinstance(v, tuple) else f"{v:6.1%}"

    return f"{name:24s} " + "  ".join(f"{k} {value(v)}" for k, v in scores.items()) + extra


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parameters", default="{}", help="request parameters, as JSON")
    parser.add_argument("--corpus", type=Path, help="folder written by bench/corpus.py")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=FOLDER", help="a set scored on its own")
    parser.add_argument("--whisperx", action="store_true", help="score the WhisperX-style flow beside the endpoint")
    parser.add_argument("--each", action="store_true", help="a line per recording of each --set")
    args = parser.parse_args()
    from handler import EndpointHandler

    handler = EndpointHandler()
    parameters = json.loads(args.parameters)
    flows = {"endpoint": lambda data: handler({"inputs": data, "parameters": parameters})}
    if args.whisperx:
        flows["whisperx"] = _whisperx_response()
    sets = [("sample", [pyannote_sample()], False)]
    if args.corpus:
        sets.append(("corpus", read_corpus(args.corpus), True))
    sets += [(name, read_folder(Path(folder)), args.each) for name, folder in (s.split("=", 1) for s in args.set)]
    for name, references, each in sets:
        for flow, run in flows.items():
            print(_line(*_run(run, references, f"{name} {flow}", each)), flush=True)


def read_folder(folder: Path) -> list[Reference]:
    """Recordings with ``*.stm`` references, or the JSON of bench/corpus.py and bench/conversations.py."""
    stms = sorted(folder.glob("*.stm"))
    return [read_stm(stm.with_suffix(".wav"), stm) for stm in stms] if stms else read_corpus(folder)


def _whisperx_response():
    """The WhisperX-style flow of bench/benchmark.py, its words grouped into a response's speaker turns."""
    from benchmark import whisperx_flow

    from speech.audio import SAMPLE_RATE, decode

    run = whisperx_flow()

    def respond(data: bytes) -> dict:
        words = run(data)
        speakers: list[dict] = []
        for word in words:
            if speakers and speakers[-1]["speaker"] == word["speaker"]:
                speakers[-1]["text"] += word["word"]
                speakers[-1]["timestamp"][1] = word["end"]
            else:
                speakers.append(
                    {"speaker": word["speaker"], "text": word["word"], "timestamp": [word["start"], word["end"]]}
                )
        duration = len(decode(data, 7200.0).waveform) / SAMPLE_RATE
        return {"text": "".join(word["word"] for word in words), "speakers": speakers, "duration": duration}

    return respond


def _run(run, references: list[Reference], name: str, each: bool = False) -> tuple[str, dict, str]:
    scorer, audio_s, wall_s = Scorer(), 0.0, 0.0
    for reference in references:
        started = time.perf_counter()
        response = run(reference.audio.read_bytes())
        elapsed = time.perf_counter() - started
        scores = scorer.add(reference, response)
        audio_s, wall_s = audio_s + response["duration"], wall_s + elapsed
        if each:
            print(_line(f"  {reference.name}", scores, f"  {response['duration']:5.0f} s audio  wall {elapsed:5.1f} s"))
    return name, scorer.pooled(), f"  {audio_s:5.0f} s audio  wall {wall_s:5.1f} s  RTF {wall_s / audio_s:.2f}"


if __name__ == "__main__":
    main()
