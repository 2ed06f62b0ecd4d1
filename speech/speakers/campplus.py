"""CAM++ speaker embedding (3D-Speaker) as a pyannote.audio model.

pyannote's diarization pipeline asks its embedding model for one embedding per (window, local speaker),
passing per-frame speaker ``weights``. This model honours them: Kaldi fbank features go through the CAM++
network up to its statistics pooling, which is replaced by weighted statistics pooling (``weighted_stats``).

Windows overlap (pyannote's step is a tenth of its 10 s window), so running the network on every window computes
each second of audio ten times. ``embed_recording`` runs it once over the recording instead, in 12 s tiles that
overlap by a margin, and pools each window's frames from the result: about 3x less diarization time.
12 s tiles keep 10 s of frames each, like pyannote's windows. The features go to a temporary file as they are
computed (``RecordingFeatures``), so that memory stays flat in the recording's length.
"""

from __future__ import annotations

import math
import os
import tempfile
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path

import lightning
import numpy as np
import torch
import torch.nn.functional as F
import torchaudio.compliance.kaldi as kaldi
from pyannote.audio import Model
from pyannote.audio.core.task import Problem, Resolution, Specifications
from speakerlab.models.campplus.DTDNN import CAMPPlus

from speech.audio import float_samples

# pyannote probes the shortest input an embedding model accepts with inputs of a frame or two, whose unweighted
# standard deviation is undefined; the probe expects that and so do we.
warnings.filterwarnings("ignore", message=r"std\(\): degrees of freedom", category=UserWarning)

FRAME_SECONDS = 0.02
"""Hop of the CAM++ frame features: 10 ms fbank frames, halved by the trunk's first strided layer."""
TILE_SECONDS = 12.0
"""Audio the trunk sees at once in ``embed_recording`` (chosen by cpWER and DER on bench/corpus and the pyannote
sample: 5, 6, 8, 10 and 12 s tried)."""
TILE_MARGIN_SECONDS = 1.0
"""Context on each side of a tile whose frames are dropped, so no kept frame sits at a tile's edge."""
FEATURE_DTYPE = torch.float16
"""The recording's trunk features are kept at 16 bits (512 channels, 50 frames a second: 0.37 GB for 2 hours, not
0.74), and pooled at 32."""


class RecordingFeatures:
    """A recording's (channels, ``num_frames``) trunk features in an unnamed temporary file, frame after frame at
    ``FEATURE_DTYPE``, read back a window at a time: the process holds only the windows it pools, the file system's
    cache the rest. The file is deleted when this object goes."""

    def __init__(self, channels: int, num_frames: int, device: torch.device):
        self.channels, self.num_frames, self.device = channels, num_frames, device
        self._file = tempfile.TemporaryFile()  # noqa: SIM115 (closed with this object)
        self._frame_bytes = channels * torch.finfo(FEATURE_DTYPE).bits // 8

    def write(self, start: int, frames: torch.Tensor) -> None:
        """Store (tiles, channels, frames) trunk features, the tiles one after another, from frame ``start``."""
        rows = frames.to(FEATURE_DTYPE).transpose(1, 2).reshape(-1, self.channels).cpu().contiguous()
        os.pwrite(self._file.fileno(), rows.numpy(), start * self._frame_bytes)

    def window(self, start: int, width: int) -> torch.Tensor:
        """(channels, frames) features of the ``width`` frames from ``start`` (fewer at the recording's end)."""
        rows = torch.empty((max(0, min(width, self.num_frames - start)), self.channels), dtype=FEATURE_DTYPE)
        os.preadv(self._file.fileno(), [rows.numpy()], start * self._frame_bytes)
        return rows.to(self.device).T


class CAMPPlusEmbedding(Model):
    """CAM++ embedding model: 80-bin Kaldi fbank (mean-normalised), CAM++ trunk, weighted statistics pooling."""

    frame_seconds = FRAME_SECONDS

    def __init__(
        self,
        sample_rate: int = 16000,
        num_channels: int = 1,
        num_mel_bins: int = 80,
        embedding_size: int = 192,
        task=None,
    ):
        super().__init__(sample_rate=sample_rate, num_channels=num_channels, task=task)
        self.save_hyperparameters("num_mel_bins", "embedding_size")
        self.campplus = CAMPPlus(feat_dim=num_mel_bins, embedding_size=embedding_size)
        self._fbank = partial(kaldi.fbank, num_mel_bins=num_mel_bins, sample_frequency=sample_rate, dither=0.0)

    @classmethod
    def from_campplus_state_dict(cls, state_dict: dict[str, torch.Tensor]) -> CAMPPlusEmbedding:
        """Wrap a 3D-Speaker CAM++ state dict (all keys must match)."""
        embedding_size = state_dict["xvector.dense.linear.weight"].shape[0]
        model = cls(embedding_size=embedding_size)
        model.campplus.load_state_dict(state_dict, strict=True)
        model.specifications = Specifications(
            problem=Problem.REPRESENTATION, resolution=Resolution.CHUNK, duration=10.0
        )
        return model.eval()

    def save_checkpoint(self, path: Path) -> None:
        """Save as a pyannote.audio checkpoint, loadable with ``Model.from_pretrained(path)``."""
        checkpoint = {"state_dict": self.state_dict(), "hyper_parameters": dict(self.hparams)}
        self.on_save_checkpoint(checkpoint)
        checkpoint["pytorch-lightning_version"] = lightning.__version__
        torch.save(checkpoint, path)

    @property
    def dimension(self) -> int:
        return self.hparams.embedding_size

    def compute_fbank(self, waveforms: torch.Tensor) -> torch.Tensor:
        """(batch, 1, samples) float or 16-bit PCM waveforms -> (batch, frames, mel bins) mean-normalised log-mel
        features."""
        features = torch.vmap(self._fbank)(float_samples(waveforms).float())
        return features - features.mean(dim=1, keepdim=True)

    def forward(self, waveforms: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        """(batch, 1, samples) waveforms and optional (batch, frames) weights -> (batch, dimension) embeddings.

        pyannote asks for one embedding per (window, local speaker), repeating each window once per speaker in a
        row: the CAM++ trunk runs once per distinct window and only the pooling runs per speaker.
        """
        distinct = torch.ones(len(waveforms), dtype=torch.bool, device=waveforms.device)
        distinct[1:] = (waveforms[1:] != waveforms[:-1]).flatten(1).any(dim=1)
        frames = self.trunk(waveforms[distinct])[torch.cumsum(distinct, dim=0) - 1]
        return self.campplus.xvector.dense(weighted_stats(frames, weights))

    @torch.inference_mode()
    def embed_recording(
        self,
        waveform: torch.Tensor,
        starts: np.ndarray,
        duration: float,
        weights: np.ndarray,
        batch_size: int = 32,
        progress: Callable[[int, int], None] | None = None,
    ) -> tuple[np.ndarray, RecordingFeatures]:
        """Embeddings of the windows ``[start, start + duration)`` of one recording, one per (window, speaker), and
        the trunk features of the whole recording they were pooled from (``recording_features``).

        ``waveform``: (1, samples); ``weights``: (windows, speakers, frames) per-frame speaker weights of each window
        (0 or 1: booleans will do). Returns (windows, speakers, dimension) and the features. ``progress(completed,
        total)`` follows the tile batches.
        """
        reach = int(_first_frames(starts)[-1]) + self.num_frames(round(duration * self.hparams.sample_rate))
        frames = max(reach, self.num_frames(waveform.shape[-1]))
        features = self.recording_features(waveform[0], frames, batch_size, progress)
        return self.embed_windows(features, starts, duration, weights, batch_size), features

    @torch.inference_mode()
    def embed_windows(
        self,
        features: RecordingFeatures,
        starts: np.ndarray,
        duration: float,
        weights: np.ndarray,
        batch_size: int = 32,
    ) -> np.ndarray:
        """``embed_recording`` on the recording's ``recording_features``."""
        window_frames = self.num_frames(round(duration * self.hparams.sample_rate))
        weights = torch.from_numpy(weights)
        embeddings = []
        first_frames = _first_frames(starts)
        for batch in range(0, len(first_frames), batch_size):
            frames = torch.stack([features.window(f, window_frames) for f in first_frames[batch : batch + batch_size]])
            embeddings.append(self.pool(frames, weights[batch : batch + batch_size]))
        return torch.cat(embeddings).cpu().numpy()

    def pool(self, frames: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """(batch, channels, frames) trunk features and (batch, speakers, frames) weights -> (batch, speakers,
        dimension) embeddings."""
        stats = weighted_stats(frames, weights)
        return self.campplus.xvector.dense(stats.flatten(0, 1)).unflatten(0, stats.shape[:2])

    @torch.inference_mode()
    def recording_features(
        self,
        waveform: torch.Tensor,
        num_frames: int,
        batch_size: int,
        progress: Callable[[int, int], None] | None = None,
    ) -> RecordingFeatures:
        """(samples,) waveform -> (channels, num_frames) trunk features; frame ``i`` is centred near ``i * 20 ms``.

        Tiles start every ``TILE_SECONDS - 2 * TILE_MARGIN_SECONDS`` and keep their middle frames. The recording is
        extended by reflection so that the first and last tiles see speech-like context, not digital silence; a
        batch's tiles are views of the waveform (a copy only where they cross its ends).
        """
        sample_rate = self.hparams.sample_rate
        tile, margin = round(TILE_SECONDS * sample_rate), round(TILE_MARGIN_SECONDS * sample_rate)
        hop = tile - 2 * margin
        kept, skipped = round(hop / sample_rate / FRAME_SECONDS), round(TILE_MARGIN_SECONDS / FRAME_SECONDS)
        num_tiles = math.ceil(num_frames / kept)
        samples = waveform[: num_tiles * hop + margin]
        features = None
        for batch in range(0, num_tiles, batch_size):
            count = min(batch_size, num_tiles - batch)
            span = _reflected(samples, batch * hop - margin, (batch + count - 1) * hop - margin + tile)
            frames = self.trunk(span.unfold(0, tile, hop)[:, None])[:, :, skipped : skipped + kept]
            if features is None:
                features = RecordingFeatures(frames.shape[1], num_frames, frames.device)
            features.write(batch * kept, frames)
            if progress is not None:
                progress(batch + count, num_tiles)
        return features

    @staticmethod
    def num_frames(num_samples: int) -> int:
        """Frames of trunk features for ``num_samples`` of audio: 25 ms fbank frames every 10 ms, then stride 2."""
        fbank_frames = 1 + (num_samples - 400) // 160
        return (fbank_frames - 1) // 2 + 1

    def trunk(self, waveforms: torch.Tensor) -> torch.Tensor:
        """(batch, 1, samples) waveforms -> (batch, channels, frames) CAM++ frame features before pooling."""
        x = self.campplus.head(self.compute_fbank(waveforms).transpose(1, 2))
        for name, layer in self.campplus.xvector.named_children():
            if name == "stats":
                return x
            x = layer(x)
        raise RuntimeError("CAM++ has no statistics pooling layer")


def weighted_stats(frames: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """(batch, channels, frames) features and (batch, frames) or (batch, speakers, frames) weights (any dtype and
    device; interpolated to the features' frames) -> (batch, [speakers,] 2 * channels): the weighted mean and
    unbiased standard deviation, as pyannote's ``StatsPool`` (the plain ones without weights). Computed from two
    weighted sums over the frames in float64: pyannote's makes three frame-sized temporaries per speaker, which a
    loop over long recordings leaves scattered in the C heap (gigabytes, in a worker thread's arena)."""
    if weights is None:
        return torch.cat([frames.mean(dim=-1), frames.std(dim=-1, correction=1)], dim=-1)
    speakers = weights.dim() == 3
    w = (weights if speakers else weights[:, None]).to(frames.device, torch.float64)
    if w.shape[-1] != frames.shape[-1]:
        w = F.interpolate(w, size=frames.shape[-1], mode="nearest")
    x = frames.double()
    total = w.sum(dim=2, keepdim=True)
    v1, v2 = total + 1e-8, w.square().sum(dim=2, keepdim=True)
    sums = torch.einsum("bct,bst->bsc", x, w)
    mean = sums / v1
    spread = torch.einsum("bct,bst->bsc", x.square(), w) - 2 * mean * sums + mean.square() * total  # sum w (x - mean)^2
    std = (spread / (v1 - v2 / v1 + 1e-8)).clamp(min=0).sqrt()
    stats = torch.cat([mean, std], dim=-1).float()
    return stats if speakers else stats[:, 0]


def _reflected(samples: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """``samples[start:stop]``, extended by reflection where it reaches past either end (as ``np.pad`` with
    ``mode="reflect"``); a view unless it does."""
    if start >= 0 and stop <= len(samples):
        return samples[start:stop]
    period = max(2 * (len(samples) - 1), 1)
    index = torch.arange(start, stop, device=samples.device).remainder(period)
    return samples[torch.where(index < len(samples), index, period - index)]


def _first_frames(starts: np.ndarray) -> np.ndarray:
    """The feature frame at which each window starting at ``starts`` (seconds) begins."""
    return np.round(np.asarray(starts) / FRAME_SECONDS).astype(int)
