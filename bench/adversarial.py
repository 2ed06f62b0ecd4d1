"""Time per second of audio on hostile clips against the pyannote sample, in one process with one handler.

    python bench/adversarial.py                 # every clip, once
    python bench/adversarial.py --rounds 3      # every clip three times: median wall times
    python bench/adversarial.py --clips mandarin babble-6

The clips (5-30 s, built with Debian's espeak-ng, flite and sox into a temporary folder; numpy sums and clips)
are what makes an English-only Whisper work hardest: speech in languages it does not know, English at two and
three times its speed, tones, chords, DTMF digits, clipped speech, six voices at once, a noise burst in
silence. Each is sent with default parameters to the handler that serves the sample; the sample is timed first
(after an untimed warm-up) and after every round of clips, and its median RTF is the yardstick. Per clip:
duration, median wall time, RTF, ratio to the sample's RTF, median seconds in ``generate``, windows cut short,
and the windows, decodings and skipped decodings of the temperature fallback. The acceptance check: worst ratio <= 3,
and the sample's words unchanged (its WER against the reference is printed; every sample run must agree).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from corpus import LINES, VOICES, synthesize, write_wav
from evaluate import pyannote_sample, score

from speech.audio import SAMPLE_RATE, decode

FOREIGN = {
    "mandarin": ("cmn", "今天天气很好。我们一起去公园散步吧。我喜欢在周末和朋友们一起喝茶聊天。"),
    "russian": ("ru", "Сегодня хорошая погода, и мы решили погулять в парке. Вечером мы будем пить чай дома."),
    "arabic": ("ar", "الطقس جميل اليوم، لذلك قررنا أن نتمشى في الحديقة. في المساء سنشرب الشاي في البيت."),
    "hindi": ("hi", "आज मौसम बहुत अच्छा है, इसलिए हम पार्क में टहलने गए। शाम को हम घर पर चाय पिएंगे।"),
}
RUSSIAN_STORY = (
    "Когда я был маленьким, мы каждое лето ездили к бабушке в деревню. Бабушка жила в большом доме возле леса. "
    "Утром мы ходили за молоком к соседке, потом купались в реке. Вечером дедушка рассказывал нам истории про "
    "войну и про то, как он строил дом своими руками. Мы сидели на крыльце, пили чай и слушали, как поют "
    "сверчки. Иногда мы ловили рыбу или собирали грибы в лесу. По выходным приезжали двоюродные братья, и мы "
    "вместе играли в футбол на поляне. Когда шёл дождь, мы читали книги на чердаке. Эти летние дни я помню до "
    "сих пор."
)
BABBLE_VOICES = tuple(VOICES)  # six voices, one line each at once


def _sox(inputs: list[str | Path], output: Path, *effects: str) -> np.ndarray:
    subprocess.run(["sox", *map(str, inputs), str(output), *effects], check=True, capture_output=True)
    return decode(output.read_bytes(), 600).waveform


def _english(folder: Path, seconds: float, voice: str = "flite-slt", first: int = 0) -> np.ndarray:
    """At least ``seconds`` of English sentences said one after another by ``voice``."""
    pieces, total, line = [], 0, first
    while total < seconds * SAMPLE_RATE:
        pieces += [synthesize(voice, LINES[line % len(LINES)], folder), np.zeros(SAMPLE_RATE // 4, np.float32)]
        total += len(pieces[-2]) + len(pieces[-1])
        line += 1
    return np.concatenate(pieces)


def _foreign(language: str, text: str, seconds: float = 30.0) -> Callable[[Path], np.ndarray]:
    """espeak-ng saying ``text`` in ``language``, at most ``seconds`` of it."""

    def build(folder: Path) -> np.ndarray:
        path = folder / "foreign.wav"
        subprocess.run(["espeak-ng", "-v", language, "-w", str(path), text], check=True, capture_output=True)
        return _sox([path], folder / "foreign16k.wav", "rate", str(SAMPLE_RATE))[: int(seconds * SAMPLE_RATE)]

    return build


def _faster(factor: float, seconds: float) -> Callable[[Path], np.ndarray]:
    def build(folder: Path) -> np.ndarray:
        write_wav(folder / "english.wav", _english(folder, seconds * factor))
        return _sox([folder / "english.wav"], folder / "faster.wav", "tempo", "-s", str(factor))

    return build


def _tone(frequency: float, seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return np.sin(2 * np.pi * frequency * t)


def _tones(folder: Path) -> np.ndarray:
    """Pure tones of 2 s each, a sweep of pitches."""
    return 0.5 * np.concatenate([_tone(f, 2.0) for f in (440, 660, 880, 1320, 550, 990)])


def _chords(folder: Path) -> np.ndarray:
    """Major and minor triads, 1.5 s each with a plucked envelope, like a strummed accompaniment."""
    roots = (261.6, 220.0, 174.6, 196.0) * 4
    envelope = np.exp(-3 * np.arange(int(1.5 * SAMPLE_RATE)) / SAMPLE_RATE)
    chords = []
    for i, root in enumerate(roots):
        third = root * (2 ** (4 / 12) if i % 2 == 0 else 2 ** (3 / 12))
        notes = (root, third, root * 2 ** (7 / 12), root * 2)
        chords.append(envelope * sum(_tone(f, 1.5) + 0.3 * _tone(2 * f, 1.5) for f in notes))
    return 0.2 * np.concatenate(chords)


def _dtmf(folder: Path) -> np.ndarray:
    """Telephone keypad digits: 0.2 s tone pairs with 0.1 s gaps, a 12-digit number dialled three times."""
    rows, columns = (697, 770, 852, 941), (1209, 1336, 1477)
    keys = {str(d): (rows[(d - 1) // 3], columns[(d - 1) % 3]) for d in range(1, 10)} | {"0": (941, 1336)}
    pieces = []
    for digit in "441632960785" * 3:
        low, high = keys[digit]
        pieces += [0.4 * (_tone(low, 0.2) + _tone(high, 0.2)), np.zeros(int(0.1 * SAMPLE_RATE))]
    return np.concatenate(pieces)


def _clipped(folder: Path) -> np.ndarray:
    """English speech amplified 30 dB and clipped: square-wave-like."""
    write_wav(folder / "english.wav", _english(folder, 12.0, "flite-awb"))
    return _sox([folder / "english.wav"], folder / "clipped.wav", "gain", "30")


def _babble(folder: Path) -> np.ndarray:
    """Six voices talking at once, each its own sentences, for 20 s."""
    voices = [_english(folder, 20.0, voice, first=7 * i)[: 20 * SAMPLE_RATE] for i, voice in enumerate(BABBLE_VOICES)]
    mix = sum(np.pad(v, (0, 20 * SAMPLE_RATE - len(v))) for v in voices)
    return 0.9 * mix / np.abs(mix).max()


def _cough(folder: Path) -> np.ndarray:
    """25 s of silence with one 0.3 s burst of brown noise (a cough) at 12 s."""
    burst = _sox(["-n", "-r", str(SAMPLE_RATE)], folder / "burst.wav", "synth", "0.3", "brownnoise", "fade", "0.02")
    silence = np.zeros(25 * SAMPLE_RATE)
    silence[12 * SAMPLE_RATE : 12 * SAMPLE_RATE + len(burst)] = 0.8 * burst
    return silence


CLIPS: dict[str, Callable[[Path], np.ndarray]] = {
    **{name: _foreign(language, text) for name, (language, text) in FOREIGN.items()},
    "mandarin-5s": _foreign(*FOREIGN["mandarin"], seconds=5.0),
    "russian-30s": _foreign("ru", RUSSIAN_STORY),
    "english-2x": _faster(2.0, 15.0),
    "english-3x": _faster(3.0, 10.0),
    "tones": _tones,
    "chords": _chords,
    "dtmf": _dtmf,
    "clipped": _clipped,
    "babble-6": _babble,
    "cough": _cough,
}


def build(name: str, folder: Path) -> bytes:
    """The clip ``name`` as 16 kHz WAV bytes."""
    samples = np.clip(CLIPS[name](folder), -1.0, 1.0).astype(np.float32)
    write_wav(folder / f"{name}.wav", samples)
    return (folder / f"{name}.wav").read_bytes()


def _timed(handler, audio: bytes) -> tuple[dict, float]:
    started = time.perf_counter()
    response = handler({"inputs": audio, "parameters": {}})
    return response, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", nargs="+", choices=list(CLIPS), default=list(CLIPS))
    parser.add_argument("--rounds", type=int, default=1, help="runs of every clip (median wall time)")
    args = parser.parse_args()
    from handler import EndpointHandler

    with tempfile.TemporaryDirectory() as tmp:
        clips = {name: build(name, Path(tmp)) for name in args.clips}
    sample = pyannote_sample()
    sample_audio = sample.audio.read_bytes()
    handler = EndpointHandler()
    handler({"inputs": sample_audio, "parameters": {}})  # warm-up
    samples, walls = [_timed(handler, sample_audio)], {name: [] for name in clips}
    for _ in range(args.rounds):
        for name, audio in clips.items():
            response, seconds = _timed(handler, audio)
            walls[name].append((seconds, response))
        samples.append(_timed(handler, sample_audio))
    sample_s = statistics.median(seconds for _, seconds in samples)
    sample_rtf = sample_s / samples[0][0]["duration"]

    print(f"{'clip':12s} {'audio':>6s} {'wall':>6s} {'RTF':>6s} {'ratio':>6s} {'generate':>8s}  cut  fallback")
    print(f"{'sample':12s} {samples[0][0]['duration']:5.1f}s {sample_s:5.2f}s {sample_rtf:6.3f} {1:6.2f}")
    worst = ("", 0.0)
    for name, runs in walls.items():
        seconds = statistics.median(seconds for seconds, _ in runs)
        generating = statistics.median(response["decoding"]["seconds"] for _, response in runs)
        response = runs[-1][1]
        rtf = seconds / response["duration"]
        decoding = response["decoding"]
        fallback = "{fallback_windows} win, {fallback_decodings} dec, {fallback_decodings_skipped} skipped"
        print(
            f"{name:12s} {response['duration']:5.1f}s {seconds:5.2f}s {rtf:6.3f} {rtf / sample_rtf:6.2f} "
            f"{generating:7.2f}s {decoding['truncated_windows']:4d}  {fallback.format(**decoding)}"
        )
        worst = max(worst, (name, rtf / sample_rtf), key=lambda item: item[1])
    texts = {response["text"] for response, _ in samples}
    print(f"sample runs: {', '.join(f'{seconds:.2f} s' for _, seconds in samples)}; words the same: {len(texts) == 1}")
    print(f"sample WER against the reference: {score(sample, samples[0][0])['wer']:.1%}")
    print(f"worst ratio: {worst[1]:.2f} ({worst[0]})")


if __name__ == "__main__":
    main()
