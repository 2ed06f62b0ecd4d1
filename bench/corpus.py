"""Build a multi-speaker test corpus with Debian's flite and espeak-ng: exact reference turns and transcripts.

    python bench/corpus.py --out bench/corpus
    python bench/corpus.py --holdout --out bench/corpus-holdout   # other voices, lines and seeds: never tuned on
    python bench/corpus.py --tune --out bench/corpus-tune         # other voices again: tuned on, never reported

Each conversation is seeded, so the corpus is the same on every machine with the same flite/espeak-ng. It has
2-4 speakers, pauses, overlapping turns and, in some files, background noise; one lasts more than 5 minutes.
Per conversation: ``NAME.wav`` (16 kHz mono) and ``NAME.json`` with ``turns: [{speaker, start, end, text}]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from speech.audio import SAMPLE_RATE, decode

VOICES = {
    "flite-slt": ["flite", "-voice", "slt"],
    "flite-rms": ["flite", "-voice", "rms"],
    "flite-awb": ["flite", "-voice", "awb"],
    "flite-kal": ["flite", "-voice", "kal16"],
    "espeak-us-f": ["espeak-ng", "-v", "en-us+f3", "-s", "150"],
    "espeak-gb-m": ["espeak-ng", "-v", "en-gb+m3", "-s", "150"],
    # held-out voices (``--holdout``)
    "flite-kal8": ["flite", "-voice", "kal"],
    "espeak-scot-m": ["espeak-ng", "-v", "en-gb-scotland+m1", "-s", "160"],
    "espeak-rp-f": ["espeak-ng", "-v", "en-gb-x-rp+f4", "-s", "145"],
    "espeak-us-m": ["espeak-ng", "-v", "en-us+m4", "-s", "170"],
    "espeak-029-f": ["espeak-ng", "-v", "en-029+f2", "-s", "155"],
    # tuning voices (``--tune``): chosen on, never reported
    "espeak-lanc-m": ["espeak-ng", "-v", "en-gb-x-gbclan+m2", "-s", "155"],
    "espeak-nyc-m": ["espeak-ng", "-v", "en-us-nyc+m6", "-s", "165"],
    "espeak-wmid-f": ["espeak-ng", "-v", "en-gb-x-gbcwmd+f1", "-s", "150"],
    "espeak-us-m2": ["espeak-ng", "-v", "en-us+m2", "-s", "160"],
    "espeak-gb-f5": ["espeak-ng", "-v", "en+f5", "-s", "145"],
    "espeak-gb-m5": ["espeak-ng", "-v", "en-gb+m5", "-s", "150"],
}

LINES = [
    "Good morning, did you sleep well last night?",
    "Not really, the neighbours were playing music until two.",
    "That sounds awful. Did you ask them to turn it down?",
    "I knocked on their door, but nobody answered.",
    "We should talk to the building manager about it.",
    "I already sent an email this morning.",
    "Have you finished the report for the meeting on Friday?",
    "Almost. I still need the numbers from the sales team.",
    "They promised to send everything before lunch.",
    "Great, then we can review it together this afternoon.",
    "What time does the train leave tomorrow?",
    "The first one leaves at seven fifteen from platform four.",
    "Should we book a table for dinner after the concert?",
    "Yes, the small Italian place near the river would be nice.",
    "I love their mushroom soup and the fresh bread.",
    "Can you pick up some milk and eggs on your way home?",
    "Sure. Do we need anything else from the market?",
    "Maybe some apples and a bag of rice.",
    "The weather forecast says it will rain all weekend.",
    "Then let's visit the museum instead of going hiking.",
    "My brother is moving to a new apartment next month.",
    "Does he need help carrying the furniture?",
    "He said he hired a moving company, so we can relax.",
    "I started learning to play the guitar in the evenings.",
    "That's wonderful. Which songs are you practising?",
    "Mostly old folk songs, they have simple chords.",
    "The garden looks beautiful now that the roses are open.",
    "We planted them three years ago and they finally bloomed.",
    "Could you explain how the new software works?",
    "You open the dashboard and choose a project from the list.",
    "Then you can see every task and who is working on it.",
    "That is much easier than the old spreadsheet.",
    "I think we should leave early to avoid the traffic.",
    "Agreed. Let's meet at the front door at eight.",
    "Did you watch the football match yesterday evening?",
    "I did. The second half was really exciting.",
    "Our team scored twice in the last ten minutes.",
    "The library will be closed on Monday for repairs.",
    "Then I will return my books on Tuesday morning.",
    "Remember to bring your umbrella, it looks cloudy.",
]

HOLDOUT_LINES = [
    "Did anyone water the plants while I was away?",
    "I watered them on Tuesday, but the fern still looks dry.",
    "The printer on the third floor is jammed again.",
    "I will call the technician after the team meeting.",
    "How much did the new laptop cost in the end?",
    "A little under nine hundred, with the extra memory.",
    "Our flight was delayed by almost three hours.",
    "At least the airline gave everyone a meal voucher.",
    "Could you send me the slides before the workshop starts?",
    "They are in the shared folder under this week's date.",
    "My sister just adopted a puppy from the shelter.",
    "What breed is it, do you know?",
    "Nobody is sure, but it has enormous ears.",
    "The bakery on the corner closes early on Sundays.",
    "Then we should buy the bread on Saturday evening.",
    "I think the budget needs another review before we sign.",
    "Agreed, the travel costs look far too high.",
    "The children want to go swimming after school.",
    "The pool is closed for cleaning until Thursday.",
    "Let's take them to the library instead.",
    "Have you read the book that everyone is talking about?",
    "Only the first chapter, it starts very slowly.",
    "The bus driver forgot to stop at my station this morning.",
    "That happened to me last winter in the snow.",
    "We need two more chairs for the guests tonight.",
    "I can borrow some from the neighbours downstairs.",
    "Is the garden party still happening if it rains?",
    "We will move everything into the garage.",
    "The doctor said I should walk for half an hour every day.",
    "You could join our group on Monday and Wednesday mornings.",
]


@dataclass(frozen=True)
class Conversation:
    """A conversation to synthesise: seed, speakers (voice names), number of turns, noise level.

    With ``duration_s``, turns stop once the conversation is that long (``turns`` is then an upper bound).
    """

    name: str
    seed: int
    voices: tuple[str, ...]
    turns: int
    noise_snr_db: float | None
    overlap_probability: float
    duration_s: float | None = None


CONVERSATIONS = [
    Conversation("two-clean", 1, ("flite-slt", "flite-rms"), 12, None, 0.0),
    Conversation("two-overlap", 2, ("flite-awb", "espeak-us-f"), 14, None, 0.3),
    Conversation("three-noise", 3, ("flite-slt", "flite-kal", "espeak-gb-m"), 16, 20.0, 0.15),
    Conversation("four-mixed", 4, ("flite-rms", "flite-slt", "espeak-us-f", "flite-awb"), 18, 25.0, 0.2),
    Conversation("two-espeak", 5, ("espeak-us-f", "espeak-gb-m"), 12, 15.0, 0.1),
    Conversation("long-three", 6, ("flite-slt", "flite-awb", "espeak-us-f"), 90, 25.0, 0.15),
]

# Never tuned on: held-out voices beside known ones in new pairings, HOLDOUT_LINES, other seeds.
HOLDOUT = [
    Conversation("h-two-scot", 101, ("espeak-scot-m", "flite-slt"), 12, None, 0.1),
    Conversation("h-three-mixed", 102, ("flite-kal8", "espeak-rp-f", "flite-rms"), 16, 20.0, 0.2),
    Conversation("h-four-new", 103, ("espeak-us-m", "espeak-029-f", "flite-awb", "espeak-rp-f"), 18, 25.0, 0.2),
    Conversation("h-three-espeak", 104, ("espeak-scot-m", "espeak-029-f", "espeak-us-m"), 15, 15.0, 0.1),
    Conversation("h-four-short", 105, ("flite-slt", "espeak-us-m", "flite-kal8", "espeak-029-f"), 12, None, 0.15),
]

# For choosing settings on voices like the held-out ones (espeak-ng men beside men): other variants, LINES, other
# seeds; never reported.
TUNE = [
    Conversation("t-three-espeak", 201, ("espeak-lanc-m", "espeak-nyc-m", "espeak-wmid-f"), 15, 15.0, 0.1),
    Conversation("t-four-espeak", 202, ("espeak-us-m2", "espeak-gb-m5", "espeak-gb-f5", "flite-rms"), 18, 25.0, 0.2),
    Conversation("t-three-men", 203, ("espeak-lanc-m", "espeak-us-m2", "flite-awb"), 15, None, 0.15),
    Conversation("t-four-short", 204, ("espeak-nyc-m", "espeak-wmid-f", "flite-slt", "espeak-gb-m5"), 12, None, 0.15),
    Conversation("t-two-men", 205, ("espeak-gb-m5", "espeak-nyc-m"), 12, 20.0, 0.1),
    Conversation("t-three-women", 206, ("espeak-wmid-f", "espeak-gb-f5", "flite-slt"), 15, 20.0, 0.2),
]


def synthesize(voice: str, text: str, folder: Path) -> np.ndarray:
    """Speak ``text`` with ``voice``; 16 kHz float32 samples with leading/trailing silence trimmed."""
    path = folder / "utterance.wav"
    command = VOICES[voice]
    if command[0] == "flite":
        subprocess.run([*command, "-t", text, "-o", str(path)], check=True, capture_output=True)
    else:
        subprocess.run([*command, "-w", str(path), text], check=True, capture_output=True)
    samples = decode(path.read_bytes(), 600).waveform
    loud = np.flatnonzero(np.abs(samples) > 0.01)
    return samples[loud[0] : loud[-1] + 1] if len(loud) else samples


def build(conversation: Conversation, folder: Path, lines: list[str] = LINES) -> dict:
    """Mix one conversation; return its reference (turns in seconds, exact speech extents)."""
    rng = np.random.default_rng(conversation.seed)
    pieces: list[tuple[int, np.ndarray, str, str]] = []
    cursor = int(0.5 * SAMPLE_RATE)
    previous = -1
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(conversation.turns):
            if conversation.duration_s is not None and cursor >= conversation.duration_s * SAMPLE_RATE:
                break
            speaker = int(rng.choice([s for s in range(len(conversation.voices)) if s != previous]))
            text = " ".join(str(line) for line in rng.choice(lines, size=int(rng.integers(1, 3)), replace=False))
            samples = synthesize(conversation.voices[speaker], text, Path(tmp))
            if pieces and rng.random() < conversation.overlap_probability:
                start = cursor - int(rng.uniform(0.3, 0.8) * SAMPLE_RATE)  # barge in before the end
            else:
                start = cursor + int(rng.uniform(0.2, 1.2) * SAMPLE_RATE)
            pieces.append((start, samples, f"SPK{speaker}", text))
            cursor = start + len(samples)
            previous = speaker
    mix = np.zeros(cursor + SAMPLE_RATE // 2, dtype=np.float64)
    for start, samples, _, _ in pieces:
        mix[start : start + len(samples)] += samples
    if conversation.noise_snr_db is not None:
        speech_power = np.mean(np.concatenate([samples for _, samples, _, _ in pieces]) ** 2)
        noise = rng.standard_normal(len(mix)) * np.sqrt(speech_power / 10 ** (conversation.noise_snr_db / 10))
        mix += noise
    mix = np.clip(mix / max(1.0, np.abs(mix).max() / 0.95), -1.0, 1.0)
    write_wav(folder / f"{conversation.name}.wav", mix)
    reference = {
        "turns": [
            {
                "speaker": speaker,
                "start": start / SAMPLE_RATE,
                "end": (start + len(samples)) / SAMPLE_RATE,
                "text": text,
            }
            for start, samples, speaker, text in pieces
        ],
    }
    (folder / f"{conversation.name}.json").write_text(json.dumps(reference, indent=1))
    return reference


def write_wav(path: Path | BinaryIO, samples: np.ndarray) -> None:
    """16-bit mono WAV at 16 kHz, to a path or a binary file object."""
    with wave.open(path if not isinstance(path, Path) else str(path), "wb") as output:
        output.setnchannels(1)
        output.setsampwidth(2)
        output.setframerate(SAMPLE_RATE)
        output.writeframes((samples * 32767).astype("<i2").tobytes())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "corpus")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--holdout", action="store_true", help="the held-out conversations (HOLDOUT)")
    which.add_argument("--tune", action="store_true", help="the tuning conversations (TUNE)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    conversations, lines = (HOLDOUT, HOLDOUT_LINES) if args.holdout else (TUNE if args.tune else CONVERSATIONS, LINES)
    for conversation in conversations:
        reference = build(conversation, args.out, lines)
        length = reference["turns"][-1]["end"]
        speakers, turns = len(conversation.voices), len(reference["turns"])
        print(f"{conversation.name}: {speakers} speakers, {turns} turns, {length:.0f} s")


if __name__ == "__main__":
    main()
