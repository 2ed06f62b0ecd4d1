"""How sure a speaker assignment is: the share of the diarization's evidence that names that speaker.

The pipeline looks at the recording through overlapping windows (10 s, a step of 1 s): in each, the segmentation
finds up to three local voices and the embedding model describes each. Every local voice, where it is active,
votes for the speaker whose centroid its embedding is closest to. A stretch of time that every window gives to
the same speaker has confidence 1; at a turn boundary, in overlapped speech or for a voice the windows disagree
about, the share of votes for the assigned speaker falls.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pyannote.core import SlidingWindowFeature

GRID_S = 0.1  # votes are pooled on a 100 ms grid
_MIN_SPAN_S = 0.2  # a word timed as an instant is judged on this much time around it


@dataclass(frozen=True)
class SpeakerEvidence:
    """Votes per speaker on a ``GRID_S`` grid: ``votes[i, k]`` for time ``i * GRID_S``, speaker ``speakers[k]``."""

    speakers: tuple[str, ...]
    votes: np.ndarray
    channels: tuple[int, ...] = ()
    """Each speaker's channel when the channels were diarized apart (``multichannel``): a share is then of the
    votes of its channel's speakers only."""

    def confidence(self, speaker: str | None, start: float | None, end: float | None) -> float | None:
        """The share of the votes within [start, end] that go to ``speaker``; ``None`` without a speaker, a time
        or any vote there."""
        if speaker not in self.speakers or start is None or end is None:
            return None
        middle, half = (start + end) / 2, max(end - start, _MIN_SPAN_S) / 2
        first = max(0, int((middle - half) / GRID_S))
        last = min(len(self.votes), int(np.ceil((middle + half) / GRID_S)))
        column = self.speakers.index(speaker)
        window = self.votes[first:last]
        if self.channels:
            window = window[:, np.asarray(self.channels) == self.channels[column]]
            column = self.channels[:column].count(self.channels[column])
        total = float(window.sum())
        if total <= 0:
            return None
        return round(float(window[:, column].sum()) / total, 3)


def speaker_evidence(
    segmentations: SlidingWindowFeature,
    embeddings: np.ndarray,
    centroids: np.ndarray,
    speakers: list[str],
    duration: float,
) -> SpeakerEvidence:
    """Pool the votes of every active local voice of every window (``segmentations``: (windows, frames, local
    voices), binary; ``embeddings``: (windows, local voices, dimension)) for its nearest of ``centroids``."""
    grid = np.zeros((int(np.ceil(duration / GRID_S)) + 1, len(speakers)), dtype=np.float32)
    norms = np.linalg.norm(centroids, axis=-1, keepdims=True)
    usable = norms[:, 0] > 0  # a speaker the clustering gave no centroid gets no votes
    if not usable.any():
        return SpeakerEvidence(tuple(speakers), grid)
    unit_centroids = np.where(usable[:, None], centroids / np.where(norms > 0, norms, 1), 0)
    window = segmentations.sliding_window
    frame_s = window.duration / segmentations.data.shape[1]
    for w, (activity, local_embeddings) in enumerate(zip(segmentations.data, embeddings, strict=True)):
        active = np.nan_to_num(activity)  # window by window: no copy of the recording's segmentations
        start = window.start + w * window.step
        for voice in range(active.shape[1]):
            embedding = local_embeddings[voice]
            if np.isnan(embedding).any() or not active[:, voice].any():
                continue
            similarity = np.where(usable, unit_centroids @ (embedding / np.linalg.norm(embedding)), -np.inf)
            times = start + (np.flatnonzero(active[:, voice]) + 0.5) * frame_s
            cells = np.clip((times / GRID_S).astype(int), 0, len(grid) - 1)
            np.add.at(grid[:, int(np.argmax(similarity))], cells, 1.0)
    return SpeakerEvidence(tuple(speakers), grid)
