"""Choose how words are attributed to speakers by measurement: each recording is transcribed and diarized once, then
every candidate attribution is scored on the same words and turns.

    python bench/attribution.py ami=../shared/data/ami-dev tune=bench/kokoro/tune flite=bench/corpus sample

Each ``NAME=FOLDER`` is a set of recordings with references (``*.stm`` beside ``*.wav``, or ``bench/corpus.py``
JSON); ``sample`` is the pyannote sample. The words (the endpoint's transcript, less what lies away from speech) and
the diarization of each recording come from the offline default and are kept in ``bench/cache/attribution``
(delete it after changing either). Scores per set and candidate: pooled WER, cpWER, the gap between them (the
attribution error alone), DER of the speaker turns, and recordings whose number of speakers is right.
"""

from __future__ import annotations

import argparse
import hashlib
import pickle
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from evaluate import Reference, Scorer
from speaker_count import read_set

from config import InferenceConfig
from speech import attribution
from speech.attribution import attribute, within_speech
from speech.speakers import pipeline as diarization_pipeline
from speech.text import ends_sentence
from speech.types import Diarization, Word

CACHE = Path(__file__).resolve().parent / "cache" / "attribution"


class Recordings:
    """Each recording's words, whether they are spaced, its diarization and duration: computed once, then cached."""

    def __init__(self) -> None:
        self.handler = None

    def get(self, reference: Reference) -> tuple[list[Word], bool, Diarization, float]:
        data = reference.audio.read_bytes()
        path = CACHE / f"{reference.name}-{hashlib.sha256(data).hexdigest()[:12]}.pickle"
        if path.exists():
            return pickle.loads(path.read_bytes())
        from handler import EndpointHandler
        from speech.audio import decode

        self.handler = self.handler or EndpointHandler()
        audio = decode(data, 7200, 60)
        diarization = diarization_pipeline.diarize(self.handler.diarization, audio.waveform)
        transcript = self.handler.transcriber.transcribe(audio.waveform, InferenceConfig(), speech=diarization.turns)
        transcript, _ = within_speech(transcript, diarization.turns)
        found = (transcript.words, transcript.spaced, diarization, audio.duration)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps(found))
        return found


def response(words: list[Word], spaced: bool, diarization: Diarization, duration: float) -> dict:
    separator = " " if spaced else ""
    _, turns = attribute(words, diarization.turns, diarization.overlaps, separator)
    return {
        "text": separator.join(word.text for word in words),
        "speakers": [{"speaker": t.speaker, "text": t.text, "timestamp": [t.start, t.end]} for t in turns],
        "duration": duration,
    }


_SNAP = attribution._snap_changes_to_sentence_ends


def _snap_keeping_whole_runs(pieces, speakers):
    """The default snapping, except that a run of another speaker that ends a sentence and is followed by yet
    another speaker (a back-channel, a short answer) keeps its speaker."""
    speakers = list(speakers)
    for i in range(1, len(pieces)):
        if speakers[i] == speakers[i - 1] or ends_sentence(pieces[i - 1].text):
            continue
        later = next((j for j in range(i, min(i + 3, len(pieces))) if ends_sentence(pieces[j].text)), None)
        if later is not None and all(speaker == speakers[i] for speaker in speakers[i : later + 1]):
            whole = later + 1 == len(pieces) or speakers[later + 1] != speakers[i]
            if not whole:
                speakers[i : later + 1] = [speakers[i - 1]] * (later + 1 - i)
            continue
        earlier = next((j for j in range(i - 2, max(-1, i - 5), -1) if ends_sentence(pieces[j].text)), None)
        if earlier is not None and all(speaker == speakers[i - 1] for speaker in speakers[earlier + 1 : i]):
            speakers[earlier + 1 : i] = [speakers[i]] * (i - 1 - earlier)
    return speakers


def _no_snapping(pieces, speakers):
    return list(speakers)


def _use(snap):
    def apply() -> None:
        attribution._snap_changes_to_sentence_ends = snap

    return apply


CANDIDATES: dict[str, Callable[[], None]] = {
    "default": _use(_SNAP),
    "whole runs kept": _use(_snap_keeping_whole_runs),
    "no snapping": _use(_no_snapping),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="+", metavar="NAME=FOLDER|sample")
    parser.add_argument("--verbose", action="store_true", help="a line per recording")
    args = parser.parse_args()
    recordings = Recordings()
    sets = [read_set(spec) for spec in args.sets]
    for candidate, apply in CANDIDATES.items():
        apply()
        print(candidate)
        for name, references in sets:
            scorer = Scorer()
            for reference in references:
                scores = scorer.add(reference, response(*recordings.get(reference)))
                if args.verbose:
                    print(f"    {reference.name:24s} " + "  ".join(f"{k} {v}" for k, v in scores.items()))
            pooled = scorer.pooled()
            print(
                f"  {name:10s} WER {pooled['wer']:6.1%}  cpWER {pooled['cpwer']:6.1%}  gap {pooled['gap']:6.1%}  "
                f"DER {pooled['der']:6.1%}  count right {pooled['count right'][0]}/{pooled['count right'][1]}",
                flush=True,
            )


if __name__ == "__main__":
    main()
