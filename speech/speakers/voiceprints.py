"""Speakers by name: voiceprints (one speaker embedding per voice) matched across references and recordings.

A request may name the voices it expects with short audio references (``known_speaker_names`` and
``known_speaker_references``, as OpenAI's API takes them) or with voiceprints of earlier responses
(``known_speaker_embeddings``). References are embedded with the diarization pipeline's own embedding model and
compared by cosine similarity with each diarized speaker's centroid; each reference name goes to at most one
speaker (an assignment that maximises the total similarity of the pairs at or above the threshold), and only
where the similarity reaches the threshold, calibrated by ``bench/calibrate_voiceprints.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from speech.audio import decode, request_bytes
from speech.errors import AudioTooShortError, InvalidParametersError
from speech.types import Diarization, Match, Voiceprint

MATCH_THRESHOLD = 0.605
"""Cosine similarity from which a speaker takes a reference's name (CAM++ of the offline bundle; measured by
``bench/calibrate_voiceprints.py``, results in ``bench/measurements/voiceprint-calibration.txt``)."""
CALIBRATED = {"CAMPPlusEmbedding": MATCH_THRESHOLD}
"""The match threshold of each embedding model (by class) that has been calibrated."""
MAX_AUDIO_REFERENCES = 8
"""Most ``known_speaker_references`` in one request (OpenAI's API takes 4)."""
MAX_EMBEDDING_REFERENCES = 64
"""Most ``known_speaker_embeddings`` in one request."""
MIN_REFERENCE_S, MAX_REFERENCE_S = 2.0, 10.0
"""Shortest and longest reference audio, in seconds (as OpenAI's API)."""
REFERENCE_PADDING_S = 0.1
"""Decoded audio a reference may last beyond ``MAX_REFERENCE_S``: what codecs add to a clip cut at 10 s."""
MAX_REFERENCE_BYTES = 2 * 1024 * 1024
"""Largest reference file (10 s of 48 kHz stereo 16-bit WAV fits)."""


@dataclass(frozen=True)
class Identification:
    """A diarization with its speakers renamed, how each reference matched, and each speaker's voiceprint."""

    diarization: Diarization
    matches: list[Match]
    voiceprints: list[Voiceprint]


def unit(vector: np.ndarray) -> np.ndarray | None:
    """``vector`` L2-normalised as float32; ``None`` when it has no direction (zero or not finite)."""
    vector = np.asarray(vector, dtype=np.float64)
    norm = np.linalg.norm(vector)
    return (vector / norm).astype(np.float32) if np.isfinite(norm) and norm > 0 else None


class SpeakerEmbedder:
    """The embedding model of a pyannote diarization pipeline, applied to whole clips, and its identity.

    ``model`` names the weights (class, dimension and a hash of the state dict), so that voiceprints of another
    model, which cannot be compared, are recognised as such; ``threshold`` is its calibrated match threshold
    (``None``: not calibrated).
    """

    def __init__(self, pipeline):
        self._embedding = pipeline._embedding
        self.dimension: int = self._embedding.dimension
        network = getattr(self._embedding, "model_", None)
        if isinstance(network, torch.nn.Module):
            digest = hashlib.sha256()
            for key, tensor in network.state_dict().items():
                digest.update(key.encode())
                digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
            self.model = f"{type(network).__name__}-{self.dimension}-{digest.hexdigest()[:12]}"
        else:
            self.model = f"{pipeline.embedding}-{self.dimension}"
        self.threshold = CALIBRATED.get(type(network).__name__)

    def embed(self, waveform: np.ndarray) -> np.ndarray | None:
        """The L2-normalised embedding of a 16 kHz mono clip; ``None`` if the model gives none."""
        return unit(self._embedding(torch.from_numpy(waveform)[None, None])[0])


def references(
    references: Sequence[tuple[str, str | bytes]],
    embeddings: Sequence[tuple[str, str, Sequence[float]]],
    embedder: SpeakerEmbedder,
    max_duration_s: float,
    timeout_s: float,
) -> list[Voiceprint]:
    """The request's known speakers as voiceprints: audio ``references`` (name, base64 audio) decoded
    (``speech.audio``'s safe path) and embedded, then ``embeddings`` (name, model, vector) checked against
    ``embedder``'s model and dimension. ``max_duration_s`` and ``timeout_s`` bound the decoding as for the
    recording.
    """
    prints = []
    for i, (name, reference) in enumerate(references):
        field = f"known_speaker_references[{i}]"
        limit = min(MAX_REFERENCE_S + REFERENCE_PADDING_S, max_duration_s)
        audio = decode(request_bytes(reference, MAX_REFERENCE_BYTES, field), limit, timeout_s, field)
        if audio.duration < MIN_REFERENCE_S:
            raise AudioTooShortError(
                f"{field}: the audio lasts {audio.duration:.2f} s; a reference must last {MIN_REFERENCE_S:g} to "
                f"{MAX_REFERENCE_S:g} s"
            )
        embedding = embedder.embed(audio.waveform)
        if embedding is None:
            raise AudioTooShortError(f"{field}: no speaker embedding could be computed from this audio")
        prints.append(Voiceprint(name, embedding, embedder.model))
    for i, (name, model, vector) in enumerate(embeddings):
        field = f"known_speaker_embeddings[{i}]"
        if model != embedder.model:
            raise InvalidParametersError(
                f"{field}: made by the embedding model {model!r}; this endpoint's is {embedder.model!r}, "
                "and embeddings of different models cannot be compared"
            )
        embedding = unit(vector) if len(vector) == embedder.dimension else None
        if embedding is None:
            raise InvalidParametersError(
                f"{field}: expected {embedder.dimension} finite numbers, not all zero (got {len(vector)} numbers)"
            )
        prints.append(Voiceprint(name, embedding, embedder.model))
    return prints


def identify(diarization: Diarization, known: list[Voiceprint], threshold: float, model: str | None) -> Identification:
    """Name the diarized speakers that match ``known`` voiceprints and keep every speaker's voiceprint.

    Each name goes to at most one speaker and each speaker takes at most one name: among the pairs whose cosine
    similarity reaches ``threshold``, those of the largest total similarity. An unnamed speaker keeps its label,
    unless that label is one of the ``known`` names (an earlier recording's ``SPEAKER_00`` passed back, for
    instance): then it takes the first ``SPEAKER_xx`` label in use by nobody. ``model`` is the embedding model
    of ``diarization.speaker_embeddings`` (``None``: no voiceprints).
    """
    centroids = {label: unit(vector) for label, vector in diarization.speaker_embeddings.items()}
    speakers = [label for label, vector in centroids.items() if vector is not None]
    scores = np.zeros((len(known), len(speakers)), dtype=np.float32)
    if known and speakers:
        scores = np.stack([k.embedding for k in known]) @ np.stack([centroids[s] for s in speakers]).T
    eligible = scores >= threshold
    rows, columns = linear_sum_assignment(np.where(eligible, scores, 0.0), maximize=True)
    assigned = {int(r): int(c) for r, c in zip(rows, columns, strict=True) if eligible[r, c]}
    names = {speakers[c]: known[r].speaker for r, c in assigned.items()}
    known_names = {k.speaker for k in known}
    unnamed = sorted(({turn.speaker for turn in diarization.turns} | set(centroids)) - set(names))
    in_use = known_names | set(unnamed)
    for label in unnamed:
        if label in known_names:
            names[label] = next(f"SPEAKER_{n:02d}" for n in itertools.count() if f"SPEAKER_{n:02d}" not in in_use)
            in_use.add(names[label])

    def renamed(label: str) -> str:
        return names.get(label, label)

    matches = []
    for r, reference in enumerate(known):
        column = assigned.get(r, int(np.argmax(scores[r])) if speakers else None)
        speaker = None if column is None else renamed(speakers[column])
        score = None if column is None else float(scores[r, column])
        matches.append(Match(reference.speaker, speaker, score, r in assigned))
    evidence = diarization.evidence
    renamed_diarization = dataclasses.replace(
        diarization,
        turns=[dataclasses.replace(turn, speaker=renamed(turn.speaker)) for turn in diarization.turns],
        overlaps=[
            dataclasses.replace(overlap, speakers=tuple(sorted(map(renamed, overlap.speakers))))
            for overlap in diarization.overlaps
        ],
        speaker_embeddings={renamed(label): v for label, v in diarization.speaker_embeddings.items()},
        evidence=evidence and dataclasses.replace(evidence, speakers=tuple(map(renamed, evidence.speakers))),
    )
    voiceprints = [] if model is None else [Voiceprint(renamed(s), centroids[s], model) for s in speakers]
    return Identification(renamed_diarization, matches, voiceprints)
