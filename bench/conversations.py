"""Realistic multi-speaker conversations with Kokoro-82M voices: exact reference turns, noise and microphones.

    python bench/conversations.py --set tune --out bench/kokoro/tune
    python bench/conversations.py --set test --out bench/kokoro/test
    python bench/conversations.py --set multilingual --out bench/kokoro/multilingual
    python bench/evaluate.py --corpus bench/kokoro/test

Per conversation: ``NAME.wav`` (16 kHz mono, 16-bit) and ``NAME.json``: ``turns: [{speaker, start, end, text}]`` as
``bench/corpus.py`` writes them (each turn spans exactly the speech placed, Kokoro's silence trimmed), ``language``
(Whisper's code) and how it was made (voices, speeds, gains_db, noise, microphone, condition, overlap_s, seed,
rare_speaker).

- ``tune`` and ``test`` (English, for tuning and for reporting): 2-8 speakers of disjoint voice pools, with no voice of
  one set near-duplicate of a voice of the other (``NEAR_DUPLICATES``), and disjoint sentences (``sentences.TUNE`` and
  ``sentences.TEST``). Back-channels ("yeah", "mm-hm") as turns of their own and over other speakers, overlapping turn
  starts, pauses, turns from half a second to a minute, speeds 0.85-1.15, speakers at different distances; pink,
  brown, babble and mains-hum noise at 5-30 dB SNR; telephone band, reverb, quiet recordings. Short recordings (30-40 s)
  with four voices and short turns; a speaker who says one sentence in a long recording; ``test`` has one
  conversation of 10 minutes, ``tune`` one of 5.
- ``multilingual``: scripted dialogues of 2-3 speakers, 20-50 s, in es, fr, it, pt, hi, zh (Kokoro's voices of each
  language), en, and de and pl said by Kokoro voices of other languages through espeak-ng's phonemes (accented; JSON
  ``"accented"`` lists such voices); French adds such voices to its one native voice.

Every synthesized utterance is cached in ``bench/kokoro/.cache`` by voice, language, speed and text, so a rebuild
only mixes. Seeded: the same Kokoro model and voices give the same files.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import re
import sys
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from scipy import signal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import write_wav
from kokoro import LANGUAGES, WHISPER_LANGUAGES, kokoro, voices
from sentences import BACKCHANNELS, MONOLOGUES, MULTILINGUAL, TEST, TUNE

from speech.audio import SAMPLE_RATE

CACHE = Path(__file__).resolve().parent / "kokoro" / ".cache"

TUNE_VOICES = (
    *("af_alloy", "af_bella", "af_heart", "af_kore", "af_nova", "af_sky"),
    *("am_echo", "am_fenrir", "am_onyx", "am_puck"),
    *("bf_alice", "bf_lily", "bm_daniel", "bm_george"),
)
"""The tuning set's voices: all near-duplicate pairs are here, so none crosses into ``TEST_VOICES``."""

TEST_VOICES = (
    *("af_aoede", "af_jessica", "af_nicole", "af_river", "af_sarah"),
    *("am_adam", "am_eric", "am_liam", "am_michael", "am_santa"),
    *("bf_emma", "bf_isabella", "bm_fable", "bm_lewis"),
)
"""The test set's voices: every pair below 0.8 speaker-embedding cosine (``../shared/NOTES.md``)."""

NEAR_DUPLICATES = frozenset(
    frozenset(pair)
    for pair in (
        ("am_fenrir", "am_puck"),
        ("am_echo", "am_puck"),
        ("af_heart", "af_nova"),
        ("af_heart", "af_bella"),
        ("bm_daniel", "bm_george"),
    )
)
"""English voice pairs whose speaker embeddings are nearly the same: never in one conversation."""


@dataclass(frozen=True)
class Noise:
    """Background noise ``snr_db`` below the speech: pink, brown, babble (other voices talking) or hum (50 Hz mains)."""

    kind: str
    snr_db: float


@dataclass(frozen=True)
class Microphone:
    """How the room and microphone shape the recording.

    ``peak_db``: level of the loudest sample (dBFS); ``spread_db``: each speaker's gain drawn within +-half of it
    (distance to the microphone); ``telephone``: 300-3400 Hz band; ``reverb_s``: reverberation time RT60, 0 for none.
    """

    peak_db: float = -1.0
    spread_db: float = 3.0
    telephone: bool = False
    reverb_s: float = 0.0


@dataclass(frozen=True)
class Spec:
    """An English conversation to build: who, how long, how turns go, and the recording conditions.

    ``sentences``: sentences per ordinary turn (min, max); ``long_turns``: probability of a turn of 3-6 sentences
    instead; ``overlap``: probability that a turn starts before the previous one ends; ``backchannel``: probability of
    a back-channel after or over a turn; ``rare``: the last speaker says one sentence only; ``monologue``: one turn of
    about a minute (``sentences.MONOLOGUES``).
    """

    name: str
    speakers: int
    duration_s: float
    sentences: tuple[int, int] = (1, 2)
    long_turns: float = 0.08
    overlap: float = 0.12
    backchannel: float = 0.2
    noise: tuple[Noise, ...] = ()
    microphone: Microphone = field(default_factory=Microphone)
    rare: bool = False
    monologue: bool = False


@dataclass(frozen=True)
class Dialogue:
    """A scripted conversation (``sentences.MULTILINGUAL``) in ``language`` (Whisper's code).

    ``voices``: one per script speaker A, B, C...; ``phonemes``: espeak-ng language for voices of another language
    (None: each voice's own).
    """

    name: str
    language: str
    script: int
    voices: tuple[str, ...]
    phonemes: str | None = None
    noise: tuple[Noise, ...] = ()
    microphone: Microphone = field(default_factory=Microphone)


@dataclass(frozen=True)
class Line:
    """A turn to say: its speaker, its sentences, and how it joins the conversation.

    ``join``: "gap" after everything so far, "overlap" before the last turn ends, "during" inside the last turn
    (a back-channel; after it when that turn is too short).
    """

    speaker: int
    sentences: tuple[str, ...]
    join: str = "gap"


@dataclass(frozen=True)
class Utterance:
    """A turn as placed: speaker, text, first sample and its (trimmed) speech."""

    speaker: int
    text: str
    start: int
    samples: np.ndarray = field(repr=False)

    @property
    def end(self) -> int:
        return self.start + len(self.samples)


SECOND = SAMPLE_RATE

SHORT = {"sentences": (1, 1), "long_turns": 0.0}
"""Short turns only: one sentence or a back-channel."""

TUNE_SPECS = (
    Spec("tune-05min-meeting", 5, 300, monologue=True, rare=True, noise=(Noise("pink", 25),)),
    Spec("tune-short-four-clean", 4, 30, **SHORT, overlap=0.2, backchannel=0.3),
    Spec("tune-short-four-reverb", 4, 35, **SHORT, noise=(Noise("pink", 20),), microphone=Microphone(reverb_s=0.3)),
    Spec("tune-two-clean", 2, 35),
    Spec("tune-two-phone", 2, 40, noise=(Noise("brown", 20),), microphone=Microphone(telephone=True)),
    Spec("tune-three-babble", 3, 40, noise=(Noise("babble", 15),)),
    Spec("tune-three-overlap", 3, 40, overlap=0.4, backchannel=0.35),
    Spec("tune-eight-room", 8, 50, (1, 2), long_turns=0.0, microphone=Microphone(spread_db=8, reverb_s=0.4)),
    Spec("tune-six-hum", 6, 45, (1, 2), long_turns=0.0, noise=(Noise("hum", 20),)),
    Spec("tune-five-cafe", 5, 40, (1, 2), noise=(Noise("babble", 12), Noise("pink", 30))),
    Spec("tune-four-quiet", 4, 30, (1, 2), microphone=Microphone(peak_db=-26, spread_db=6)),
    Spec("tune-two-lowsnr", 2, 30, noise=(Noise("pink", 8),)),
    Spec("tune-three-long-turns", 3, 40, (3, 6), backchannel=0.4),
    Spec("tune-seven-phone", 7, 40, (1, 2), long_turns=0.0, microphone=Microphone(telephone=True, reverb_s=0.3)),
)
"""The tuning set: 14 conversations, about 14 minutes."""

TEST_SPECS = (
    Spec(
        "test-10min-meeting",
        6,
        600,
        monologue=True,
        rare=True,
        noise=(Noise("pink", 30),),
        microphone=Microphone(spread_db=5),
    ),
    Spec("test-short-four-clean", 4, 32, **SHORT, overlap=0.2, backchannel=0.3),
    Spec("test-short-four-babble", 4, 36, **SHORT, noise=(Noise("babble", 18),)),
    Spec("test-short-four-phone", 4, 30, **SHORT, noise=(Noise("pink", 25),), microphone=Microphone(telephone=True)),
    Spec("test-two-clean", 2, 40, long_turns=0.0),
    Spec("test-two-phone", 2, 50, noise=(Noise("pink", 20),), microphone=Microphone(telephone=True)),
    Spec("test-three-brown", 3, 45, noise=(Noise("brown", 15),)),
    Spec("test-three-reverb", 3, 45, microphone=Microphone(reverb_s=0.5)),
    Spec("test-five-babble", 5, 50, (1, 2), noise=(Noise("babble", 15),)),
    Spec("test-eight-room", 8, 65, (1, 2), long_turns=0.0, microphone=Microphone(spread_db=8, reverb_s=0.4)),
    Spec("test-six-hum", 6, 50, (1, 2), long_turns=0.0, noise=(Noise("hum", 25), Noise("pink", 30))),
    Spec("test-two-monologue", 2, 75, monologue=True, backchannel=0.4),
    Spec("test-four-quiet", 4, 40, (1, 2), microphone=Microphone(peak_db=-24, spread_db=6)),
    Spec("test-three-overlap", 3, 40, overlap=0.4, backchannel=0.35),
    Spec(
        "test-seven-cafe",
        7,
        50,
        (1, 2),
        long_turns=0.0,
        noise=(Noise("babble", 12),),
        microphone=Microphone(reverb_s=0.3),
    ),
    Spec("test-two-lowsnr", 2, 35, noise=(Noise("pink", 5),)),
    Spec("test-three-long-turns", 3, 50, (3, 6), backchannel=0.4),
    Spec("test-five-conference", 5, 45, (1, 2), noise=(Noise("hum", 30),), microphone=Microphone(telephone=True)),
)
"""The test set: 18 conversations, about 25 minutes, one of them 10 minutes long."""

DIALOGUES = (
    Dialogue("es-beach", "es", 0, ("ef_dora", "em_alex", "em_santa")),
    Dialogue("es-meeting", "es", 1, ("em_alex", "ef_dora"), noise=(Noise("pink", 25),)),
    Dialogue("fr-coffee", "fr", 0, ("ff_siwis", "em_alex", "if_sara"), phonemes="fr-fr"),
    Dialogue(
        "fr-restaurant", "fr", 1, ("im_nicola", "ff_siwis"), phonemes="fr-fr", microphone=Microphone(telephone=True)
    ),
    Dialogue("it-friends", "it", 0, ("if_sara", "im_nicola")),
    Dialogue("it-directions", "it", 1, ("im_nicola", "if_sara"), noise=(Noise("brown", 20),)),
    Dialogue("pt-football", "pt", 0, ("pm_alex", "pf_dora", "pm_santa")),
    Dialogue("pt-meeting", "pt", 1, ("pf_dora", "pm_alex"), microphone=Microphone(reverb_s=0.3)),
    Dialogue("hi-market", "hi", 0, ("hf_alpha", "hm_omega", "hf_beta")),
    Dialogue("hi-meeting", "hi", 1, ("hm_psi", "hf_beta", "hm_omega"), noise=(Noise("pink", 25),)),
    Dialogue("zh-weekend", "zh", 0, ("zf_xiaobei", "zm_yunjian", "zf_xiaoni"), noise=(Noise("babble", 18),)),
    Dialogue("zh-shop", "zh", 1, ("zm_yunxi", "zf_xiaoxiao"), noise=(Noise("hum", 25),)),
    Dialogue("en-delivery", "en", 0, ("af_river", "bm_lewis", "af_kore")),
    Dialogue("de-neighbours", "de", 0, ("if_sara", "pm_alex", "im_nicola"), phonemes="de"),
    Dialogue("de-station", "de", 1, ("em_alex", "pf_dora"), phonemes="de"),
    Dialogue("pl-report", "pl", 0, ("pm_alex", "if_sara"), phonemes="pl"),
)


def trim(samples: np.ndarray) -> np.ndarray:
    """``samples`` without the silence around the speech: 10 ms power within 40 dB of its peak."""
    power = np.convolve(samples.astype(np.float64) ** 2, np.ones(SAMPLE_RATE // 100) / (SAMPLE_RATE // 100), "same")
    loud = np.flatnonzero(power > power.max() * 1e-4)
    return samples[loud[0] : loud[-1] + 1]


def synthesize(text: str, voice: str, speed: float, phonemes: str | None = None) -> np.ndarray:
    """``text`` said by ``voice`` (16 kHz float32, trimmed), cached on disk by voice, phonemes, speed and text."""
    import torch
    import torchaudio

    language = phonemes or LANGUAGES[voice[0]]
    key = hashlib.sha256(f"{voice}|{language}|{speed:.2f}|{text}".encode()).hexdigest()[:24]
    path = CACHE / f"{key}.npy"
    if not path.exists():
        samples, rate = kokoro().create(text, voice, speed=speed, lang=language)
        waveform = torch.from_numpy(np.asarray(samples, dtype=np.float32))
        CACHE.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.part")  # builders running at once never share a partial file
        with partial.open("wb") as file:
            np.save(file, torchaudio.functional.resample(waveform, rate, SAMPLE_RATE).numpy())
        partial.replace(path)
    return trim(np.load(path))


def say(
    sentences: Sequence[str], voice: str, speed: float, rng: np.random.Generator, phonemes: str | None
) -> np.ndarray:
    """One turn: its sentences one after another with short breaths between them."""
    pieces = []
    for index, sentence in enumerate(sentences):
        if index:
            pieces.append(np.zeros(int(rng.uniform(0.15, 0.45) * SECOND), dtype=np.float32))
        pieces.append(synthesize(sentence, voice, speed, phonemes))
    return np.concatenate(pieces)


def choose_voices(pool: Sequence[str], count: int, rng: np.random.Generator) -> tuple[str, ...]:
    """``count`` voices of ``pool`` in a seeded order, no two of them near-duplicates."""
    chosen: list[str] = []
    for voice in rng.permutation(pool):
        if all(frozenset((voice, other)) not in NEAR_DUPLICATES for other in chosen):
            chosen.append(str(voice))
    if len(chosen) < count:
        raise ValueError(f"only {len(chosen)} distinct voices to choose from, {count} wanted")
    return tuple(chosen[:count])


def english_lines(spec: Spec, deck: Iterator[str], monologue: str, rng: np.random.Generator) -> Iterator[Line]:
    """An endless conversation: every speaker but the rare one has a turn first, then talkative and quiet speakers
    take turns of ``spec.sentences`` sentences (now and then longer ones), with back-channels and overlaps; the rare
    speaker has no line here (``place`` adds it); the monologue comes early on."""
    talkers = spec.speakers - spec.rare
    weights = rng.dirichlet(np.full(talkers, 3.0))
    introductions = [int(s) for s in rng.permutation(talkers)]
    monologue_at = int(rng.integers(1, 4)) if spec.monologue else -1
    speaker = -1
    for index in itertools.count():
        others = [s for s in range(talkers) if s != speaker]
        speaker = (
            introductions.pop() if introductions else int(rng.choice(others, p=weights[others] / weights[others].sum()))
        )
        listeners = [s for s in range(talkers) if s != speaker]
        join = "overlap" if rng.random() < spec.overlap else "gap"
        backchannels = int(rng.random() < spec.backchannel)
        if index == monologue_at:
            sentences, backchannels = tuple(re.split(r"(?<=[.?!])\s+", monologue)), 3
        elif rng.random() < spec.backchannel / 3 and index >= talkers:
            sentences = (str(rng.choice(BACKCHANNELS)),)
        else:
            low, high = (3, 6) if rng.random() < spec.long_turns else spec.sentences
            sentences = tuple(itertools.islice(deck, int(rng.integers(low, high + 1))))
        yield Line(speaker, sentences, join)
        for _ in range(backchannels):
            yield Line(int(rng.choice(listeners)), (str(rng.choice(BACKCHANNELS)),), "during")


JOINS = {":": "gap", ">": "overlap", "~": "during"}
"""How a ``sentences.MULTILINGUAL`` script line joins the conversation, by the mark after its speaker."""


def scripted_lines(script: Sequence[str]) -> Iterator[Line]:
    """The lines of a ``sentences.MULTILINGUAL`` script (``A: text``, ``B> text``, ``A~ text``)."""
    for line in script:
        yield Line(ord(line[0]) - ord("A"), (line[3:],), JOINS[line[1]])


def pause(rng: np.random.Generator) -> int:
    """Silence between turns, in samples: mostly short, sometimes a longer pause."""
    return int((rng.uniform(1.0, 2.5) if rng.random() < 0.12 else rng.uniform(0.15, 0.8)) * SECOND)


def place(
    lines: Iterable[Line],
    voices: Sequence[str],
    speeds: Sequence[float],
    rng: np.random.Generator,
    duration_s: float | None = None,
    phonemes: str | None = None,
    interjection: tuple[float, Line] | None = None,
) -> list[Utterance]:
    """Say each line and place it in time, until ``duration_s`` is reached (or the lines run out); no turn of the
    second half ends more than 5 s after it.

    No speaker ever overlaps their own speech; a "during" line lands inside the last turn when it fits.
    ``interjection``: a line said once, as the next turn after that many seconds.
    """
    placed: list[Utterance] = []
    last: Utterance | None = None  # the last turn not said over another
    cursor = SECOND // 2  # the end of all speech so far
    pending = iter(lines)
    while (line := next(pending, None)) is not None:
        if duration_s is not None and cursor >= duration_s * SECOND and line.join != "during":
            break
        if interjection is not None and cursor >= interjection[0] * SECOND and line.join != "during":
            pending, line, interjection = itertools.chain([line], pending), interjection[1], None
        samples = say(line.sentences, voices[line.speaker], speeds[line.speaker], rng, phonemes)
        during = line.join == "during" and last is not None and len(last.samples) > len(samples) + 1.5 * SECOND
        if last is None:
            start = cursor
        elif during:
            start = last.start + int(rng.uniform(0.3, 0.8) * (len(last.samples) - len(samples)))
        elif line.join == "overlap":
            start = max(last.start + len(last.samples) // 2, cursor - int(rng.uniform(0.2, 1.0) * SECOND))
        else:
            start = cursor + pause(rng)
        late = duration_s is not None and 2 * cursor > duration_s * SECOND
        if late and not during and start + len(samples) > (duration_s + 5) * SECOND:
            break  # a turn of the second half that would run well past the end
        while clash := [
            u for u in placed if u.speaker == line.speaker and u.start < start + len(samples) and start < u.end
        ]:
            start = max(u.end for u in clash) + pause(rng)
        utterance = Utterance(line.speaker, " ".join(line.sentences), start, samples)
        placed.append(utterance)
        cursor = max(cursor, utterance.end)
        if not during:
            last = utterance
    return sorted(placed, key=lambda u: u.start)


def colored_noise(length: int, exponent: float, rng: np.random.Generator) -> np.ndarray:
    """Noise with power falling as 1/f**exponent above 20 Hz (1: pink, 2: brown), unit RMS."""
    spectrum = np.fft.rfft(rng.standard_normal(length))
    frequencies = np.maximum(np.fft.rfftfreq(length, 1 / SAMPLE_RATE), 20.0)
    noise = np.fft.irfft(spectrum / frequencies ** (exponent / 2), length)
    return noise / np.sqrt(np.mean(noise**2))


def hum(length: int, rng: np.random.Generator) -> np.ndarray:
    """Mains hum: 50 Hz and its harmonics, unit RMS."""
    t = np.arange(length) / SAMPLE_RATE
    noise = sum(np.sin(2 * np.pi * 50 * k * t + rng.uniform(0, 2 * np.pi)) / k for k in range(1, 8) if k % 2 or k == 2)
    return noise / np.sqrt(np.mean(noise**2))


def babble(length: int, pool: Sequence[str], sentences: Sequence[str], rng: np.random.Generator) -> np.ndarray:
    """Other people talking at once: four voices of ``pool``, each saying a few sentences, looped; unit RMS."""
    streams = [
        say(tuple(rng.choice(sentences, size=4, replace=False)), str(voice), 1.0, rng, None)
        for voice in rng.choice(pool, size=min(4, len(pool)), replace=False)
    ]
    bed = np.zeros(max(len(s) for s in streams))
    for stream in streams:
        bed += np.roll(np.pad(stream, (0, len(bed) - len(stream))), int(rng.integers(len(bed))))
    noise = np.tile(bed, length // len(bed) + 1)[:length]
    return noise / np.sqrt(np.mean(noise**2))


def reverb(speech: np.ndarray, rt60_s: float, rng: np.random.Generator) -> np.ndarray:
    """``speech`` in a room: direct sound plus an exponentially decaying noise tail as loud as it (RT60 ``rt60_s``)."""
    t = np.arange(int(rt60_s * SAMPLE_RATE)) / SAMPLE_RATE
    tail = rng.standard_normal(len(t)) * np.exp(-6.9 * t / rt60_s)
    tail[: SAMPLE_RATE // 200] = 0.0  # first reflections after 5 ms
    response = np.concatenate([[1.0], tail[1:] / np.sqrt(np.sum(tail**2))])
    return signal.fftconvolve(speech, response)[: len(speech)]


def record(
    utterances: Sequence[Utterance],
    gains_db: Sequence[float],
    noise: Sequence[Noise],
    microphone: Microphone,
    babble_voices: Sequence[str],
    babble_sentences: Sequence[str],
    rng: np.random.Generator,
) -> np.ndarray:
    """The recording: speakers at their gains, the room, the noise at its SNR over speech, the microphone's band and
    level."""
    length = max(u.end for u in utterances) + int(rng.uniform(0.5, 1.0) * SECOND)
    speech, active = np.zeros(length), np.zeros(length, dtype=bool)
    for utterance in utterances:
        speech[utterance.start : utterance.end] += utterance.samples * 10 ** (gains_db[utterance.speaker] / 20)
        active[utterance.start : utterance.end] = True
    if microphone.reverb_s:
        speech = reverb(speech, microphone.reverb_s, rng)
    speech_power = np.mean(speech[active] ** 2)
    mix = speech.copy()
    for source in noise:
        if source.kind == "babble":
            background = babble(length, babble_voices, babble_sentences, rng)
        elif source.kind == "hum":
            background = hum(length, rng)
        else:
            background = colored_noise(length, {"pink": 1.0, "brown": 2.0}[source.kind], rng)
        mix += background * np.sqrt(speech_power / 10 ** (source.snr_db / 10))
    if microphone.telephone:
        mix = signal.sosfiltfilt(signal.butter(4, (300, 3400), "bandpass", fs=SAMPLE_RATE, output="sos"), mix)
    return np.clip(mix * 10 ** (microphone.peak_db / 20) / np.abs(mix).max(), -1.0, 1.0)


def condition(noise: Sequence[Noise], microphone: Microphone) -> str:
    """A short label of the recording conditions, e.g. "babble 15 dB, telephone"."""
    parts = [f"{n.kind} {n.snr_db:g} dB" for n in noise]
    parts += ["telephone"] * microphone.telephone + [f"reverb {microphone.reverb_s:g} s"] * bool(microphone.reverb_s)
    parts += [f"quiet ({microphone.peak_db:g} dBFS)"] * (microphone.peak_db < -12)
    return ", ".join(parts) or "clean"


def overlap_s(utterances: Sequence[Utterance]) -> float:
    """Seconds during which two or more speakers talk."""
    count = np.zeros(max(u.end for u in utterances), dtype=np.int8)
    for utterance in utterances:
        count[utterance.start : utterance.end] += 1
    return float(np.sum(count > 1)) / SAMPLE_RATE


def write(
    folder: Path,
    name: str,
    waveform: np.ndarray,
    utterances: Sequence[Utterance],
    voices: Sequence[str],
    metadata: dict,
) -> dict:
    """Write ``NAME.wav`` and ``NAME.json`` (turns in seconds, with the metadata); return the reference."""
    write_wav(folder / f"{name}.wav", waveform)
    reference = {
        "turns": [
            {"speaker": f"SPK{u.speaker}", "start": u.start / SECOND, "end": u.end / SECOND, "text": u.text}
            for u in utterances
        ],
        **metadata,
        "speakers": len(voices),
        "voices": {f"SPK{index}": voice for index, voice in enumerate(voices)},
        "duration": len(waveform) / SECOND,
        "overlap_s": round(overlap_s(utterances), 3),
    }
    (folder / f"{name}.json").write_text(json.dumps(reference, indent=1, ensure_ascii=False))
    return reference


def seed(set_name: str, name: str) -> int:
    """A conversation's seed: its set and name."""
    return zlib.crc32(f"{set_name}/{name}".encode())


def build_english(set_name: str, folder: Path) -> Iterator[tuple[str, dict]]:
    """Build every conversation of the ``tune`` or ``test`` set into ``folder``; yield each name and reference."""
    specs, pool, bank = (TUNE_SPECS, TUNE_VOICES, TUNE) if set_name == "tune" else (TEST_SPECS, TEST_VOICES, TEST)
    order = np.random.default_rng(seed(set_name, "topics")).permutation(sorted(bank))
    sentences = [sentence for topic in order for sentence in bank[topic]]
    deck = itertools.cycle(sentences)  # conversations take consecutive sentences, topic by topic
    monologues = itertools.cycle(MONOLOGUES[set_name])
    for spec in specs:
        rng = np.random.default_rng(seed(set_name, spec.name))
        chosen = choose_voices(pool, spec.speakers, rng)
        speeds = [round(float(rng.uniform(0.85, 1.15)), 2) for _ in chosen]
        gains = [round(float(rng.uniform(-0.5, 0.5) * spec.microphone.spread_db), 1) for _ in chosen]
        lines = english_lines(spec, deck, next(monologues) if spec.monologue else "", rng)
        rare = (rng.uniform(0.3, 0.7) * spec.duration_s, Line(spec.speakers - 1, (next(deck),))) if spec.rare else None
        utterances = place(lines, chosen, speeds, rng, spec.duration_s, interjection=rare)
        others = [v for v in pool if v not in chosen and all(frozenset((v, u)) not in NEAR_DUPLICATES for u in chosen)]
        waveform = record(utterances, gains, spec.noise, spec.microphone, others, sentences, rng)
        metadata = _metadata(set_name, spec.name, "en", speeds, gains, spec.noise, spec.microphone)
        if spec.rare:
            metadata["rare_speaker"] = f"SPK{spec.speakers - 1}"
        yield spec.name, write(folder, spec.name, waveform, utterances, chosen, metadata)


def record_dialogue(dialogue: Dialogue) -> tuple[np.ndarray, list[Utterance], list[float], list[float]]:
    """A ``DIALOGUES`` conversation: its waveform, utterances, and the speeds and gains of its voices."""
    rng = np.random.default_rng(seed("multilingual", dialogue.name))
    speeds = [round(float(rng.uniform(0.9, 1.1)), 2) for _ in dialogue.voices]
    gains = [round(float(rng.uniform(-0.5, 0.5) * dialogue.microphone.spread_db), 1) for _ in dialogue.voices]
    script = MULTILINGUAL[dialogue.language][dialogue.script]
    utterances = place(scripted_lines(script), dialogue.voices, speeds, rng, phonemes=dialogue.phonemes)
    others = [v for v in voices() if v[0] == dialogue.voices[0][0] and v not in dialogue.voices]
    babble_sentences = [line[3:] for line in script]
    waveform = record(utterances, gains, dialogue.noise, dialogue.microphone, others, babble_sentences, rng)
    return waveform, utterances, speeds, gains


def build_multilingual(folder: Path) -> Iterator[tuple[str, dict]]:
    """Build every ``DIALOGUES`` conversation into ``folder``; yield each name and reference."""
    for dialogue in DIALOGUES:
        waveform, utterances, speeds, gains = record_dialogue(dialogue)
        metadata = _metadata(
            "multilingual", dialogue.name, dialogue.language, speeds, gains, dialogue.noise, dialogue.microphone
        )
        accented = [v for v in dialogue.voices if WHISPER_LANGUAGES[v[0]] != dialogue.language]
        reference = write(
            folder, dialogue.name, waveform, utterances, dialogue.voices, {**metadata, "accented": accented}
        )
        yield dialogue.name, reference


def _metadata(
    set_name: str,
    name: str,
    language: str,
    speeds: Sequence[float],
    gains: Sequence[float],
    noise: Sequence[Noise],
    microphone: Microphone,
) -> dict:
    return {
        "language": language,
        "set": set_name,
        "seed": seed(set_name, name),
        "condition": condition(noise, microphone),
        "speeds": {f"SPK{i}": speed for i, speed in enumerate(speeds)},
        "gains_db": {f"SPK{i}": gain for i, gain in enumerate(gains)},
        "noise": [asdict(n) for n in noise],
        "microphone": asdict(microphone),
    }


def check_sets() -> None:
    """Fail when the tuning and test sets share a voice, a near-duplicate pair or a sentence."""
    if set(TUNE_VOICES) & set(TEST_VOICES):
        raise AssertionError("a voice is in both sets")
    if any(frozenset((a, b)) in NEAR_DUPLICATES for a in TUNE_VOICES for b in TEST_VOICES):
        raise AssertionError("near-duplicate voices across sets")
    tune = {s for topic in TUNE.values() for s in topic} | set(MONOLOGUES["tune"])
    test = {s for topic in TEST.values() for s in topic} | set(MONOLOGUES["test"])
    tune, test = ({split for s in bank for split in re.split(r"(?<=[.?!])\s+", s)} for bank in (tune, test))
    if tune & test:
        raise AssertionError(f"sentences in both sets: {sorted(tune & test)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", required=True, choices=("tune", "test", "multilingual"))
    parser.add_argument("--out", type=Path, help="default bench/kokoro/SET")
    args = parser.parse_args()
    check_sets()
    folder = args.out or Path(__file__).resolve().parent / "kokoro" / args.set
    folder.mkdir(parents=True, exist_ok=True)
    references = build_multilingual(folder) if args.set == "multilingual" else build_english(args.set, folder)
    total, started = 0.0, time.monotonic()
    for name, reference in references:
        total += reference["duration"]
        print(
            f"{name:26s} {reference['speakers']} speakers {len(reference['turns']):4d} turns "
            f"{reference['duration']:6.1f} s, overlap {reference['overlap_s']:4.1f} s, {reference['condition']} "
            f"({time.monotonic() - started:.0f} s)",
            flush=True,
        )
    print(f"{args.set}: {total / 60:.1f} min of audio in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
