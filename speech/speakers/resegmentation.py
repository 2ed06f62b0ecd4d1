"""Who speaks when, corrected: stretches where one speaker talks go to the speaker whose voice they sound like.

pyannote's segmentation follows up to three local speakers per 10 s window, and the clustering labels each local
speaker as a whole. When two voices alternate quickly, the segmentation may keep them in one local speaker, and
the clustering then gives both voices' turns to one speaker (and that speaker's centroid is a blend of the two).
Here speaker embeddings of short sliding windows over the single-speaker frames are matched to the speakers'
centroids, which are first refined on those windows (k-means started from the clustering's centroids, as in
resegmentation with a variational Bayes HMM); a stretch whose windows match another speaker better by ``margin``,
and for ``min_run`` seconds at least, changes speaker. Overlapped speech and the number of speakers are kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pyannote.core import Annotation, Segment, Timeline

from speech.speakers.clustering import centroid
from speech.speakers.voice_windows import VoiceWindows


@dataclass(frozen=True)
class Resegmentation:
    """``window`` and ``hop`` of the sliding embeddings (seconds); ``rounds`` of centroid refinement; ``margin``:
    how much better (cosine) another speaker must match; ``min_run``: the shortest stretch that changes speaker;
    ``min_speech``: the single-speaker seconds a speaker needs to be given stretches (a small cluster's centroid is
    not trusted to take more). Chosen with ``bench/speaker_count.py --resegment-grid`` on ami-dev and the Kokoro
    tune set."""

    window: float = 1.0
    hop: float = 0.24
    rounds: int = 3
    margin: float = 0.2
    min_run: float = 0.3
    min_speech: float = 2.0

    def __call__(
        self,
        voices: VoiceWindows,
        diarization: Annotation,
        exclusive: Annotation,
        centroids: np.ndarray,
        labels: list[str] | None = None,
    ) -> tuple[Annotation, Annotation]:
        """``diarization`` and ``exclusive`` (pyannote's outputs) with single-speaker stretches moved to the speaker
        they sound like; ``voices``: the recording's windows (``voice_windows``). ``labels``: the speakers of
        ``centroids``' rows (by default ``diarization``'s labels); a speaker not in ``diarization`` yet
        (``missed_speakers``) may receive stretches whatever ``min_speech``."""
        labels = labels or list(diarization.labels())
        if len(labels) < 2:
            return diarization, exclusive
        frame = voices.frame_seconds
        active = active_frames(diarization, labels, voices.num_frames, frame)
        single = active.sum(axis=1) == 1
        current = np.where(single, active.argmax(axis=1), -1)
        scores = self._scores(voices, single, centroids[: len(labels)])
        if scores is None:
            return diarization, exclusive
        heard = np.bincount(current[single], minlength=len(labels)) * frame
        trusted = (heard >= self.min_speech) | ~np.isin(labels, diarization.labels())  # else too little to trust
        receivers = np.where(trusted, scores, -np.inf)
        best = receivers.argmax(axis=1)
        rows = np.arange(len(best))
        gain = scores[rows, best] - scores[rows, np.maximum(current, 0)]
        moved = single & np.isfinite(receivers[rows, best]) & ~np.isnan(gain) & (gain > self.margin)
        moved &= best != current
        for run in runs(moved, best):
            if (run.stop - run.start) * frame < self.min_run:
                moved[run] = False
        kept = {int(k) for k in current[single & ~moved]} | {k for k in range(len(labels)) if active[~single, k].any()}
        for k in range(len(labels)):  # a speaker is never emptied (one not in the diarization may stay out)
            if k not in kept:
                moved[current == k] = False
        stretches = [
            (Segment(run.start * frame, run.stop * frame), labels[int(best[run.start])]) for run in runs(moved, best)
        ]
        return _moved(diarization, stretches), _moved(exclusive, stretches)

    def _scores(self, voices: VoiceWindows, single: np.ndarray, centroids: np.ndarray) -> np.ndarray | None:
        """(frames, speakers): the mean cosine between the refined centroids and the sliding windows over each frame
        (NaN where no window is); ``None`` when no window has enough single-speaker frames."""
        width, hop = round(self.window / voices.frame_seconds), round(self.hop / voices.frame_seconds)
        starts = [s for s in range(0, max(1, len(single) - width + 1), hop) if 2 * single[s : s + width].sum() >= width]
        if not starts:
            return None
        weights = np.stack([single[s : s + width] for s in starts]).astype(np.float32)
        embeddings = voices.embed(starts, width, weights)
        norms = np.linalg.norm(centroids, axis=1, keepdims=True)
        means = np.divide(centroids, norms, out=np.zeros_like(centroids, dtype=float), where=norms > 0)
        for _ in range(self.rounds):
            nearest = (embeddings @ means.T).argmax(axis=1)
            for k in range(len(means)):
                if (nearest == k).sum() >= 4:
                    means[k] = centroid(embeddings[nearest == k])
        total = np.zeros((len(single), len(means)))
        count = np.zeros(len(single))
        for start, row in zip(starts, embeddings @ means.T, strict=True):
            total[start : start + width] += row
            count[start : start + width] += 1
        with np.errstate(invalid="ignore", divide="ignore"):
            return total / count[:, None]


def active_frames(annotation: Annotation, labels: list[str], frames: int, frame: float) -> np.ndarray:
    """(frames, speakers) booleans: who speaks in each feature frame."""
    active = np.zeros((frames, len(labels)), dtype=bool)
    for segment, _, label in annotation.itertracks(yield_label=True):
        active[round(segment.start / frame) : round(segment.end / frame), labels.index(label)] = True
    return active


def runs(mask: np.ndarray, values: np.ndarray) -> list[slice]:
    """Maximal stretches of frames where ``mask`` holds and ``values`` stays the same."""
    found, start = [], None
    for i in range(len(mask) + 1):
        if start is not None and (i == len(mask) or not mask[i] or values[i] != values[start]):
            found.append(slice(start, i))
            start = None
        if start is None and i < len(mask) and mask[i]:
            start = i
    return found


def _moved(annotation: Annotation, stretches: list[tuple[Segment, str]]) -> Annotation:
    """``annotation`` with each segment of ``stretches`` (where one speaker talks) given to its label, touching turns
    joined."""
    if not stretches:
        return annotation
    moved = annotation.extrude(Timeline([segment for segment, _ in stretches]))
    for i, (segment, label) in enumerate(stretches):
        moved[segment, f"moved{i}"] = label
    return moved.support()
