"""Calibrate ``voiceprints.MATCH_THRESHOLD``: from what cosine similarity a diarized speaker takes a known name.

    python bench/calibrate_voiceprints.py               # writes bench/measurements/voiceprint-calibration.txt
    python bench/calibrate_voiceprints.py --rounds 1 --out x.txt  # every voice in one conversation only

Conversations of three Kokoro voices (``bench/conversations.py``'s synthesis and cache), each voice saying three
sentences in turns with short pauses, at a speed drawn per conversation (0.9-1.1); every other conversation has
pink noise at 15 dB SNR, and each of ``--rounds`` regroups the voices. They are diarized by the endpoint's pipeline
as a request is (``diarization_utils.diarize``). Each voice's reference is 5 s of other sentences, synthesized on
their own at speed 1, embedded as a request's reference is (``voiceprints.SpeakerEmbedder``).

Pairs: the cosine between a reference and a diarized speaker's centroid; the speaker holding most of a voice's
speech is that voice's ("same voice"), every other reference of the set against it is a "different voice" pair.
The threshold is the middle of the interval with the lowest sum of the two error rates (different-voice pairs at or
above it, same-voice pairs below) on the tuning set, pairs of voices the embedding cannot tell apart aside (the
English near-duplicates, and one Kokoro voice in two languages: ``em_alex``/``pm_alex``, ``ef_dora``/``pf_dora``,
``*_santa``); the test set reports what it does, with the naming itself: each conversation given the references of
two of its voices and of two voices that are not in it.

Sets: tuning = ``conversations.TUNE_VOICES`` (14 English voices, every near-duplicate pair among them); test =
``conversations.TEST_VOICES`` (14 other English voices) and the 21 Spanish, French, Italian, Portuguese, Hindi and
Chinese voices. English voices say sentences of ``sentences.TUNE`` / ``sentences.TEST`` and their references
sentences of ``bench/corpus.py``; the others say their language's first ``sentences.MULTILINGUAL`` script and
their references its second.
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from conversations import NEAR_DUPLICATES, TEST_VOICES, TUNE_VOICES, colored_noise, synthesize
from corpus import LINES
from sentences import MULTILINGUAL, TEST, TUNE

from config import ModelSettings
from speech.audio import SAMPLE_RATE
from speech.speakers.pipeline import diarize, load_pipeline
from speech.speakers.voiceprints import SpeakerEmbedder, Voiceprint, identify, unit

OTHER_LANGUAGES = {"e": "es", "f": "fr", "i": "it", "p": "pt", "h": "hi", "z": "zh"}
OTHER_VOICES = (
    *("ef_dora", "em_alex", "em_santa", "ff_siwis", "if_sara", "im_nicola", "pf_dora", "pm_alex", "pm_santa"),
    *("hf_alpha", "hf_beta", "hm_omega", "hm_psi"),
    *("zf_xiaobei", "zf_xiaoni", "zf_xiaoxiao", "zf_xiaoyi", "zm_yunjian", "zm_yunxi", "zm_yunxia", "zm_yunyang"),
)
REFERENCE_S = 5.0
SENTENCES_PER_VOICE = 3
NOISE_SNR_DB = 15.0


def near_duplicates(a: str, b: str) -> bool:
    """Voices the embedding cannot tell apart: the English near-duplicate pairs, and one Kokoro voice in two
    languages (``em_alex`` and ``pm_alex``: 0.75-0.81 cosine across, as close as a voice to itself)."""
    return frozenset((a, b)) in NEAR_DUPLICATES or a[3:] == b[3:]


@dataclass
class Texts:
    """Sentences a voice says in conversations (``talk``, taken in turn) and for its reference."""

    talk: list[str]
    reference: list[str]
    next: int = 0

    def take(self) -> str:
        self.next += 1
        return self.talk[(self.next - 1) % len(self.talk)]


def _script(lines: tuple[str, ...]) -> list[str]:
    """A script's sentences without their ``A:`` speaker marks, long enough to be a turn."""
    sentences = [re.sub(r"^[A-Z][:>~]\s*", "", line) for line in lines]
    return [s for s in sentences if len(s) >= 12]


def texts(voice: str, english: dict[str, tuple[str, ...]], rng: np.random.Generator) -> Texts:
    if voice[0] in OTHER_LANGUAGES:
        first, second = MULTILINGUAL[OTHER_LANGUAGES[voice[0]]][:2]
        return Texts(list(rng.permutation(_script(first))), list(rng.permutation(_script(second))))
    talk = [s for topic in english.values() for s in topic if len(s.split()) >= 5]
    return Texts(list(rng.permutation(talk)), list(rng.permutation(LINES)))


def reference(voice: str, sentences: list[str]) -> np.ndarray:
    """``REFERENCE_S`` of ``voice`` saying ``sentences`` (0.3 s apart), cut at exactly that length."""
    pieces, length = [], 0
    for sentence in sentences:
        pieces += [synthesize(sentence, voice, 1.0), np.zeros(int(0.3 * SAMPLE_RATE), dtype=np.float32)]
        length += len(pieces[-2]) + len(pieces[-1])
        if length >= REFERENCE_S * SAMPLE_RATE:
            return np.concatenate(pieces)[: int(REFERENCE_S * SAMPLE_RATE)]
    raise ValueError(f"not enough reference sentences for {voice}")


def groups(voices: tuple[str, ...], rng: np.random.Generator) -> list[tuple[str, ...]]:
    """The voices in conversations of three (two for a remainder of two, four for a remainder of one), never two
    near-duplicates together."""
    while True:
        order = [str(v) for v in rng.permutation(voices)]
        sizes = [3] * (len(order) // 3)
        if len(order) % 3 == 2:
            sizes.append(2)
        elif len(order) % 3 == 1:
            sizes[-1] = 4
        bounds = list(itertools.accumulate(sizes, initial=0))
        chosen = [tuple(order[a:b]) for a, b in itertools.pairwise(bounds)]
        if not any(near_duplicates(*pair) for g in chosen for pair in itertools.combinations(g, 2)):
            return chosen


@dataclass
class Conversation:
    voices: tuple[str, ...]
    noisy: bool
    waveform: np.ndarray = field(repr=False)
    spans: dict[str, list[tuple[float, float]]]


def conversation(
    voices: tuple[str, ...], noisy: bool, bank: dict[str, Texts], rng: np.random.Generator
) -> Conversation:
    """Turns of one sentence, each voice ``SENTENCES_PER_VOICE`` times, in rounds of a shuffled order."""
    speeds = {v: float(np.round(rng.uniform(0.9, 1.1) * 20) / 20) for v in voices}
    pieces, spans, at = [], {v: [] for v in voices}, 0
    for _ in range(SENTENCES_PER_VOICE):
        for voice in rng.permutation(voices):
            speech = synthesize(bank[voice].take(), str(voice), speeds[voice])
            gap = np.zeros(int(rng.uniform(0.3, 0.8) * SAMPLE_RATE), dtype=np.float32)
            spans[voice].append((at / SAMPLE_RATE, (at + len(speech)) / SAMPLE_RATE))
            pieces += [speech, gap]
            at += len(speech) + len(gap)
    waveform = np.concatenate(pieces)
    speech_rms = np.sqrt(np.mean(np.concatenate(pieces[::2]) ** 2))
    if noisy:
        waveform = waveform + colored_noise(len(waveform), 1.0, rng) * speech_rms * 10 ** (-NOISE_SNR_DB / 20)
    waveform = 0.5 * waveform / np.abs(waveform).max()
    return Conversation(voices, noisy, waveform.astype(np.float32), spans)


def owners(diarization, spans: dict[str, list[tuple[float, float]]]) -> dict[str, str]:
    """Each voice's speaker: the diarized speaker whose turns cover most of that voice's speech."""
    found = {}
    for voice, intervals in spans.items():
        held: dict[str, float] = {}
        for turn in diarization.turns:
            for start, end in intervals:
                held[turn.speaker] = held.get(turn.speaker, 0.0) + max(0.0, min(end, turn.end) - max(start, turn.start))
        if held:
            found[voice] = max(held, key=held.get)
    return found


@dataclass
class Pairs:
    """Scores of one set: same-voice pairs, different-voice pairs (with whether the two voices are near-duplicates),
    the voices that shared their speaker with another voice (no pair is taken from those), and the conversations
    whose diarization found another number of speakers than voices."""

    same: list[tuple[float, str]] = field(default_factory=list)
    different: list[tuple[float, bool, str]] = field(default_factory=list)
    merged: int = 0
    miscounted: int = 0

    def errors(self, threshold: float) -> tuple[int, int]:
        """(different-voice pairs at or above ``threshold``, near-duplicates aside; same-voice pairs below it)."""
        return (
            sum(score >= threshold for score, near, _ in self.different if not near),
            sum(score < threshold for score, _ in self.same),
        )


@dataclass
class Diarized:
    conversation: Conversation
    diarization: object
    owners: dict[str, str]


def measure(
    name: str, voices: tuple[str, ...], english: dict, rounds: int, pipeline, embedder: SpeakerEmbedder, seed: int
) -> tuple[Pairs, dict[str, np.ndarray], list[Diarized]]:
    """Build and diarize the set's conversations; score every reference against every diarized speaker."""
    rng = np.random.default_rng(seed)
    bank = {voice: texts(voice, english, rng) for voice in voices}
    references = {v: embedder.embed(reference(v, bank[v].reference)) for v in voices}
    pairs, diarized = Pairs(), []
    for round_ in range(rounds):
        for index, group in enumerate(groups(voices, rng)):
            talk = conversation(group, noisy=(round_ + index) % 2 == 1, bank=bank, rng=rng)
            started = time.perf_counter()
            diarization = diarize(pipeline, talk.waveform)
            own = owners(diarization, talk.spans)
            seconds = len(talk.waveform) / SAMPLE_RATE
            print(
                f"{name}: {'+'.join(group)}, {'noisy' if talk.noisy else 'clean'}, {seconds:.1f} s -> "
                f"{len(diarization.speaker_embeddings)} speakers in {time.perf_counter() - started:.1f} s",
                file=sys.stderr,
                flush=True,
            )
            diarized.append(Diarized(talk, diarization, own))
            shared = [speaker for speaker in own.values() if list(own.values()).count(speaker) > 1]
            pairs.merged += len(shared)
            pairs.miscounted += len({t.speaker for t in diarization.turns}) != len(group)
            voice_of = {speaker: voice for voice, speaker in own.items() if speaker not in shared}
            for speaker, centroid in diarization.speaker_embeddings.items():
                centroid = unit(centroid)
                if centroid is None or speaker not in voice_of:
                    continue
                for voice, embedding in references.items():
                    score = float(embedding @ centroid)
                    if voice == voice_of[speaker]:
                        pairs.same.append((score, voice))
                    else:
                        near = near_duplicates(voice, voice_of[speaker])
                        pairs.different.append((score, near, f"{voice} ~ {voice_of[speaker]}"))
    return pairs, references, diarized


def choose_threshold(pairs: Pairs) -> float:
    """The middle of the first run of thresholds (0.001 apart) with the lowest sum of the two error rates
    (near-duplicate voices aside: the embedding cannot tell them apart)."""
    grid = np.round(np.arange(0.0, 1.0, 0.001), 3)
    different = sum(not near for _, near, _ in pairs.different)
    errors = np.array([pairs.errors(t)[0] / different + pairs.errors(t)[1] / len(pairs.same) for t in grid])
    best = np.flatnonzero(errors == errors.min())
    run_end = best[0] + next((i for i, j in enumerate(best) if j != best[0] + i), len(best)) - 1
    return round(float((grid[best[0]] + grid[run_end]) / 2), 3)


def naming(voices: tuple[str, ...], references: dict, diarized: list[Diarized], threshold: float, seed: int) -> dict:
    """Name each conversation's speakers given references of two of its voices and of two voices not in it (nor
    near-duplicates of one in it). A voice whose speaker holds most of another voice's speech too is counted as
    merged by the diarization, whatever its name."""
    rng = np.random.default_rng(seed)
    kinds = ("named right", "named wrong", "missed", "unreferenced named", "absent assigned", "merged")
    counts = dict.fromkeys(kinds, 0)
    for item in diarized:
        present = list(item.conversation.voices)
        given = [str(v) for v in rng.permutation(present)[:2]]
        others = [v for v in voices if not any(v == p or near_duplicates(v, p) for p in present)]
        absent = [str(v) for v in rng.permutation(others)[:2]]
        known = [Voiceprint(v, references[v], "m") for v in given + absent]
        identified = identify(item.diarization, known, threshold, "m")
        label = dict(zip(item.diarization.speaker_embeddings, identified.diarization.speaker_embeddings, strict=True))
        matched = {m.name for m in identified.matches if m.matched}
        owners = list(item.owners.values())
        for voice in present:
            speaker = item.owners.get(voice)
            if speaker is None or owners.count(speaker) > 1:
                counts["merged"] += 1
            elif voice not in given:
                counts["unreferenced named"] += label.get(speaker) in given + absent
            elif voice not in matched:
                counts["missed"] += 1
            else:
                counts["named right" if label.get(speaker) == voice else "named wrong"] += 1
        counts["absent assigned"] += sum(v in matched for v in absent)
    return counts


def describe(name: str, pairs: Pairs, threshold: float) -> list[str]:
    same = np.array([score for score, _ in pairs.same])
    different = np.array([score for score, _, _ in pairs.different])
    distinct = np.array([score for score, near, _ in pairs.different if not near])
    false_accepts, false_rejects = pairs.errors(threshold)
    highest = sorted(pairs.different, reverse=True)[:3]
    lowest = sorted(pairs.same)[:3]
    lines = [
        f"{name}: {len(same)} same-voice pairs, {len(different)} different-voice pairs "
        f"({len(different) - len(distinct)} of near-duplicate voices); {pairs.merged} voices shared a speaker, "
        f"{pairs.miscounted} conversations diarized into another number of speakers than voices",
        f"  same voice:      min {same.min():.3f}  5th pct {np.percentile(same, 5):.3f}  median {np.median(same):.3f}",
        f"  different voice: median {np.median(different):.3f}  99th pct {np.percentile(different, 99):.3f}  "
        f"max {different.max():.3f} (max without near-duplicates {distinct.max():.3f})",
        f"  at {threshold:.3f}: {false_accepts} of {len(distinct)} different-voice pairs accepted "
        f"({false_accepts / len(distinct):.2%}; near-duplicates aside), "
        f"{false_rejects} of {len(same)} same-voice pairs rejected ({false_rejects / len(same):.2%})",
        "  highest different-voice pairs (reference ~ speaker): "
        + ", ".join(f"{pair} {score:.3f}" for score, _, pair in highest),
        "  lowest same-voice pairs: " + ", ".join(f"{voice} {score:.3f}" for score, voice in lowest),
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="conversations per voice (default: 2)")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "measurements/voiceprint-calibration.txt"
    )
    args = parser.parse_args()
    settings = ModelSettings()
    pipeline = load_pipeline(settings.diarization_model, settings.token, settings.torch_device)
    embedder = SpeakerEmbedder(pipeline)
    started = time.perf_counter()
    tune, tune_references, tune_diarized = measure("tune", TUNE_VOICES, TUNE, args.rounds, pipeline, embedder, seed=1)
    threshold = choose_threshold(tune)
    test, test_references, test_diarized = measure(
        "test", TEST_VOICES + OTHER_VOICES, TEST, args.rounds, pipeline, embedder, seed=2
    )
    lines = [
        f"python bench/calibrate_voiceprints.py --rounds {args.rounds}  ({time.strftime('%Y-%m-%d')}, "
        f"{embedder.model}, {time.perf_counter() - started:.0f} s)",
        f"threshold chosen on the tuning set: {threshold:.3f}",
        *describe("tune (14 English voices)", tune, threshold),
        *describe("test (14 other English voices, 21 of other languages)", test, threshold),
    ]
    for name, voices, references, diarized in (
        ("tune", TUNE_VOICES, tune_references, tune_diarized),
        ("test", TEST_VOICES + OTHER_VOICES, test_references, test_diarized),
    ):
        counts = naming(voices, references, diarized, threshold, seed=3)
        lines.append(f"naming, {name} ({len(diarized)} conversations, 2 present + 2 absent references each): {counts}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    args.out.write_text(text)


if __name__ == "__main__":
    main()
