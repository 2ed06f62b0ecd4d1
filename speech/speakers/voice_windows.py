"""Embeddings of short windows of a recording, for the steps after the clustering (missed speakers,
resegmentation), from whichever embedding model the pipeline loaded.

Windows are counted in frames of ``frame_seconds``. ``FeatureWindows`` pools them from the trunk features that the
single CAM++ pass left (nothing is computed again); ``AudioWindows`` runs the pipeline's embedding model on each
window's audio with the frame weights as its mask, as pyannote embeds a window's speaker (any model pyannote loads:
CAM++, WeSpeaker ResNet34...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

if TYPE_CHECKING:  # CAM++ (speakerlab) is imported only by a pipeline that uses it
    from speech.speakers.campplus import CAMPPlusEmbedding, RecordingFeatures

FRAME_SECONDS = 0.02
"""The frame of ``AudioWindows``: CAM++'s, so that the steps' settings mean the same time with either source."""
_BATCH = 256
"""Windows embedded at once (256 x 1 s of 512-channel CAM++ frames: about 26 MB)."""


class VoiceWindows(Protocol):
    """A recording seen as ``num_frames`` frames of ``frame_seconds``, whose windows can be embedded."""

    frame_seconds: float
    num_frames: int

    def embed(self, starts: list[int], width: int, weights: np.ndarray | None = None) -> np.ndarray:
        """(windows, dimension) unit embeddings of the ``width`` frames from each of ``starts``, weighted by the
        (windows, width) frame ``weights`` (all frames by default); a row of zeros where none can be computed."""
        ...


class FeatureWindows:
    """Windows pooled from the recording's CAM++ trunk features (``CAMPPlusEmbedding.recording_features``)."""

    def __init__(self, model: CAMPPlusEmbedding, features: RecordingFeatures):
        self.model, self.features = model, features
        self.frame_seconds = model.frame_seconds
        self.num_frames = features.num_frames

    def embed(self, starts: list[int], width: int, weights: np.ndarray | None = None) -> np.ndarray:
        embeddings = []
        with torch.inference_mode():
            for batch in range(0, len(starts), _BATCH):
                batch_starts = starts[batch : batch + _BATCH]
                frames = torch.stack([self.features.window(s, width) for s in batch_starts])
                if weights is None:
                    batch_weights = torch.ones(len(batch_starts), 1, width)
                else:
                    batch_weights = torch.from_numpy(weights[batch : batch + _BATCH])[:, None]
                pooled = self.model.pool(frames, batch_weights)[:, 0]
                embeddings.append(pooled.float().cpu().numpy())
        return _unit(np.concatenate(embeddings))


class AudioWindows:
    """Windows of the recording's audio through a pyannote embedding (``PretrainedSpeakerEmbedding``-like: called
    with (batch, 1, samples) waveforms and (batch, frames) masks, it gives (batch, dimension), NaN where the mask
    leaves too little audio)."""

    frame_seconds = FRAME_SECONDS

    def __init__(self, embedding, waveform: torch.Tensor, sample_rate: int, batch_size: int = 32):
        self.embedding, self.batch_size = embedding, batch_size
        self.samples = waveform.reshape(-1)
        self.hop = round(FRAME_SECONDS * sample_rate)
        self.num_frames = len(self.samples) // self.hop

    def embed(self, starts: list[int], width: int, weights: np.ndarray | None = None) -> np.ndarray:
        masks = torch.ones(len(starts), width) if weights is None else torch.from_numpy(weights).float()
        embeddings = []
        for batch in range(0, len(starts), self.batch_size):
            chunk = [
                self.samples[s * self.hop : (s + width) * self.hop] for s in starts[batch : batch + self.batch_size]
            ]
            waveforms = torch.stack([torch.nn.functional.pad(c, (0, width * self.hop - len(c))) for c in chunk])
            embeddings.append(np.asarray(self.embedding(waveforms[:, None], masks=masks[batch : batch + len(chunk)])))
        return _unit(np.nan_to_num(np.concatenate(embeddings).astype(np.float64), nan=0.0))


def _unit(embeddings: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(embeddings, axis=1, keepdims=True)
    return np.divide(embeddings, norms, out=np.zeros_like(embeddings), where=norms > 0)
