"""Fit a PLDA for a diarization pipeline's speaker embedding, in pyannote's format, so that pyannote's own VBx
clustering (``VBxClustering``, community-1's method) can run on it.

    python bench/fit_plda.py --out tools/plda                      # the offline bundle's CAM++
    python bench/fit_plda.py --pipeline FOLDER --out FOLDER/plda   # any pipeline folder's embedding

Labelled voices the project holds, none of them a voice that a reported set speaks with: the speakers of the
ami-dev meeting excerpts (their single-speaker turns, by the reference STM), Kokoro's English tuning voices
(``conversations.TUNE_VOICES``, at three speeds), and espeak-ng's voice variants with random English accents, less the
variants that bench/corpus.py's reported voices use (f2, f3, f4, m1, m3, m4) and the robotic and whispered ones.
Each voice gives up to ``--pieces`` pieces of 1.5 to 6 s, embedded by the pipeline's embedding model as it embeds a
window's speaker.

The fit follows the VBx recipe that pyannote's ``PLDA`` reads (``pyannote.audio.utils.vbx.vbx_setup``): centre
(``mean1``), length-normalise, LDA to ``lda`` dimensions (fewer than the voices), centre again (``mean2``) and
length-normalise: ``xvec_transform.npz``; then a two-covariance PLDA in that space, the within-speaker covariance
whitened (``tr``) and the across-speaker one diagonal (``psi``), around ``mu``: ``plda.npz``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from pyannote.core import Annotation, Segment, Timeline
from scipy.linalg import eigh

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from conversations import TUNE_VOICES, synthesize
from evaluate import read_folder
from sentences import TUNE

from speech.audio import SAMPLE_RATE, decode
from speech.speakers.pipeline import load_pipeline
from tools.offline_bundle import BUNDLE_DIR, DIARIZATION_DIR_NAME

AMI_DEV = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "ami-dev"
REPORTED_VARIANTS = {"f2", "f3", "f4", "m1", "m3", "m4"}
"""espeak-ng variants of bench/corpus.py's reported voices (corpus and holdout)."""
NOT_HUMAN = re.compile(r"robo|robot|whisper|demonic|announcer|fast", re.IGNORECASE)
ACCENTS = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-029", "en-gb-x-gbclan", "en-us-nyc", "en")
MIN_PIECE_S, MAX_PIECE_S = 1.5, 6.0


def _sentences() -> list[str]:
    return [line for lines in TUNE.values() for line in lines]


def ami_voices(folder: Path, pieces: int) -> dict[str, list[np.ndarray]]:
    """Each meeting speaker's speech where no other speaker talks (by the reference turns), in pieces of
    ``MIN_PIECE_S`` to ``MAX_PIECE_S``."""
    voices: dict[str, list[np.ndarray]] = {}
    for reference in read_folder(folder):
        waveform = decode(reference.audio.read_bytes(), 7200, 120).waveform
        turns = Annotation()
        for track, (speaker, start, end, _) in enumerate(reference.turns):
            turns[Segment(start, end), track] = speaker
        for speaker in turns.labels():
            others = Timeline([s for s, _, label in turns.itertracks(yield_label=True) if label != speaker])
            alone = turns.label_timeline(speaker).support().extrude(others.support())
            label = f"ami-{reference.name.split('_')[0]}-{speaker}"
            for region in alone:
                start = region.start
                while region.end - start >= MIN_PIECE_S and len(voices.setdefault(label, [])) < pieces:
                    stop = min(region.end, start + MAX_PIECE_S)
                    voices[label].append(waveform[int(start * SAMPLE_RATE) : int(stop * SAMPLE_RATE)])
                    start = stop
    return {label: found for label, found in voices.items() if len(found) >= 2}


def espeak_voices(pieces: int, rng: np.random.Generator) -> dict[str, list[np.ndarray]]:
    listing = subprocess.run(["espeak-ng", "--voices=variant"], capture_output=True, text=True, check=True).stdout
    variants = [line.split()[4].removeprefix("!v/") for line in listing.splitlines()[1:]]
    variants = [v for v in variants if v not in REPORTED_VARIANTS and not NOT_HUMAN.search(v)]
    sentences = _sentences()
    voices = {}
    with tempfile.TemporaryDirectory() as folder:
        wav = Path(folder) / "say.wav"
        for variant in variants:
            voices[f"espeak-{variant}"] = []
            for _ in range(pieces):
                accent, speed = rng.choice(ACCENTS), int(rng.integers(135, 180))
                text = " ".join(rng.choice(sentences, 2, replace=False))
                command = ["espeak-ng", "-v", f"{accent}+{variant}", "-s", str(speed), "-w", str(wav), text]
                subprocess.run(command, check=True, capture_output=True)
                samples = decode(wav.read_bytes(), 120, 60).waveform
                voices[f"espeak-{variant}"].append(samples[: int(MAX_PIECE_S * SAMPLE_RATE)])
    return voices


def kokoro_voices(pieces: int, rng: np.random.Generator) -> dict[str, list[np.ndarray]]:
    sentences = _sentences()
    voices = {}
    for voice in TUNE_VOICES:
        voices[f"kokoro-{voice}"] = [
            synthesize(str(rng.choice(sentences)), voice, float(rng.choice([0.9, 1.0, 1.1])))[
                : int(MAX_PIECE_S * SAMPLE_RATE)
            ]
            for _ in range(pieces)
        ]
    return voices


def embed(pipeline, voices: dict[str, list[np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """(pieces, dimension) embeddings and each piece's voice index."""
    embeddings, labels = [], []
    for index, pieces in enumerate(voices.values()):
        for piece in pieces:
            vector = pipeline._embedding(torch.from_numpy(np.ascontiguousarray(piece))[None, None])[0]
            if np.all(np.isfinite(vector)):
                embeddings.append(vector)
                labels.append(index)
    return np.stack(embeddings).astype(np.float64), np.asarray(labels)


def length_norm(x: np.ndarray) -> np.ndarray:
    return np.sqrt(x.shape[1]) * x / np.linalg.norm(x, axis=1, keepdims=True)


def scatter(x: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Within- and across-voice covariances (each voice weighs as much as its pieces)."""
    mean = x.mean(axis=0)
    within = np.zeros((x.shape[1], x.shape[1]))
    across = np.zeros_like(within)
    for label in np.unique(labels):
        own = x[labels == label]
        centred = own - own.mean(axis=0)
        within += centred.T @ centred
        across += len(own) * np.outer(own.mean(axis=0) - mean, own.mean(axis=0) - mean)
    return within / len(x), across / len(x)


def fit(x: np.ndarray, labels: np.ndarray, lda_dimension: int) -> tuple[dict, dict]:
    """pyannote's ``xvec_transform.npz`` and ``plda.npz`` arrays for raw embeddings ``x`` of voices ``labels``."""
    mean1 = x.mean(axis=0)
    y = length_norm(x - mean1)
    within, across = scatter(y, labels)
    within += 1e-6 * np.trace(within) / len(within) * np.eye(len(within))
    values, vectors = eigh(across, within)
    lda = vectors[:, np.argsort(values)[::-1][:lda_dimension]]
    z = y @ lda
    mean2 = z.mean(axis=0)
    v = length_norm(z - mean2)
    mu = v.mean(axis=0)
    within, across = scatter(v, labels)
    psi, vectors = eigh(across, within)  # vectors.T @ within @ vectors = I
    order = np.argsort(psi)[::-1]
    transform = {"mean1": mean1, "mean2": mean2, "lda": lda}
    return transform, {"mu": mu, "tr": vectors[:, order].T, "psi": np.maximum(psi[order], 1e-6)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", default=str(BUNDLE_DIR / DIARIZATION_DIR_NAME))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--pieces", type=int, default=8, help="pieces per voice")
    parser.add_argument("--lda-dimension", type=int, default=128)
    parser.add_argument("--ami", type=Path, default=AMI_DEV)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    pipeline = load_pipeline(args.pipeline, None, torch.device("cpu"), single_pass=False)
    sources = {
        "ami-dev": ami_voices(args.ami, args.pieces),
        "espeak-ng": espeak_voices(args.pieces, rng),
        "kokoro": kokoro_voices(args.pieces, rng),
    }
    voices = {label: pieces for found in sources.values() for label, pieces in found.items()}
    for name, found in sources.items():
        print(f"{name}: {len(found)} voices, {sum(map(len, found.values()))} pieces")
    x, labels = embed(pipeline, voices)
    dimension = min(args.lda_dimension, len(voices) - 1, x.shape[1])
    transform, plda = fit(x, labels, dimension)
    args.out.mkdir(parents=True, exist_ok=True)
    np.savez(args.out / "xvec_transform.npz", **transform)
    np.savez(args.out / "plda.npz", **plda)
    print(f"{len(x)} embeddings of {len(voices)} voices; LDA to {dimension} dimensions; written to {args.out}")
    _report(x, labels, args.out)


def _report(x: np.ndarray, labels: np.ndarray, folder: Path) -> None:
    """How well the fitted space separates the training voices: same- and other-voice cosines, raw and in PLDA."""
    from pyannote.audio.core.plda import PLDA

    plda = PLDA(folder / "xvec_transform.npz", folder / "plda.npz")
    for name, space in (("raw", x), ("plda", plda(x))):
        unit = space / np.linalg.norm(space, axis=1, keepdims=True)
        cosines = unit @ unit.T
        same = labels[:, None] == labels[None, :]
        off = ~np.eye(len(x), dtype=bool)
        print(f"{name}: same voice {cosines[same & off].mean():.3f}, other voices {cosines[~same].mean():.3f}")


if __name__ == "__main__":
    main()
