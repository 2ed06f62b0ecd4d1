"""Speakers the clustering missed: voices that short single-speaker windows tell apart and no cluster stands for.

The clustering labels pyannote's local speakers, each pooled over up to 10 s. When the segmentation keeps two voices
in one local speaker, their embeddings blend and the clustering can leave a voice without a speaker of its own. Here
Speaker embeddings of 1 s windows, each inside a stretch where one speaker talks, are clustered as 3D-Speaker does
(spectral clustering with the eigengap, small clusters folded in, near clusters merged). Window clusters beyond the
ones matched to the clustering's speakers are voices it missed; the resegmentation then gives them the stretches
that sound like them. Speakers are only added, never removed: on real meetings the windows are too few and too
noisy to merge speakers by (`bench/measurements/missed-speakers-grid.txt`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pyannote.core import Annotation
from scipy.optimize import linear_sum_assignment

from speech.speakers.clustering import centroids, merge_similar, merge_small, spectral_clusters
from speech.speakers.resegmentation import active_frames, runs
from speech.speakers.voice_windows import VoiceWindows


@dataclass(frozen=True)
class MissedSpeakers:
    """``window`` seconds, a window every half of it; too few windows (``min_windows``) and nothing is looked for;
    ``max_windows`` evenly chosen on long recordings (the affinity matrix is their square). Spectral clustering:
    ``pruning``, ``min_neighbours``, ``max_speakers``; clusters of fewer than ``min_windows_per_speaker`` join the
    nearest, clusters whose centroids are ``merge_similarity`` alike (cosine) merge. Chosen with
    ``bench/speaker_count.py --missed-grid`` on ami-dev and the Kokoro tune set (3D-Speaker's settings)."""

    window: float = 1.0
    min_windows: int = 40
    max_windows: int = 2000
    pruning: float = 0.01
    min_neighbours: int = 6
    max_speakers: int = 10
    min_windows_per_speaker: int = 5
    merge_similarity: float = 0.7

    def __call__(
        self,
        voices: VoiceWindows,
        diarization: Annotation,
        known: np.ndarray,
        room: int | None = None,
    ) -> np.ndarray:
        """(missed speakers, dimension) unit centroids of the voices that none of the ``known`` centroids (the
        clustering's, in the order of ``diarization``'s labels) stands for, largest first, at most ``room``."""
        labels = list(diarization.labels())
        frame = voices.frame_seconds
        active = active_frames(diarization, labels, voices.num_frames, frame)
        single = active.sum(axis=1) == 1
        width = round(self.window / frame)
        starts = []
        for run in runs(single, active.argmax(axis=1)):
            if run.stop - run.start >= width:
                starts += sorted({*range(run.start, run.stop - width + 1, width // 2), run.stop - width})
        if len(starts) < self.min_windows or room == 0:
            return np.zeros((0, known.shape[1]))
        if len(starts) > self.max_windows:
            starts = [starts[i] for i in np.linspace(0, len(starts) - 1, self.max_windows).round().astype(int)]
        unit = voices.embed(starts, width)
        clusters = spectral_clusters(unit, self.pruning, self.min_neighbours, self.max_speakers)
        clusters = merge_small(unit, clusters, self.min_windows_per_speaker)
        clusters = merge_similar(unit, clusters, self.merge_similarity)
        voices = centroids(unit, clusters)
        known = known / np.maximum(np.linalg.norm(known, axis=1, keepdims=True), 1e-12)
        matched, _ = linear_sum_assignment(-(voices @ known.T))
        missed = [v for v in np.argsort(-np.bincount(clusters), kind="stable") if v not in matched]
        return voices[missed[:room]]
