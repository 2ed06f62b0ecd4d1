"""CAM++ speaker embedding (3D-Speaker) as a pyannote.audio model.

pyannote's diarization pipeline asks its embedding model for one embedding per (window, local speaker),
passing per-frame speaker ``weights``. This model honours them: Kaldi fbank features go through the CAM++
network up to its statistics pooling, which is replaced by pyannote's weighted statistics pooling.
Whole batches of windows are processed at once.
"""

from __future__ import annotations

import warnings
from functools import partial
from pathlib import Path

import lightning
import torch
import torchaudio.compliance.kaldi as kaldi
from pyannote.audio import Model
from pyannote.audio.core.task import Problem, Resolution, Specifications
from pyannote.audio.models.blocks.pooling import StatsPool
from speakerlab.models.campplus.DTDNN import CAMPPlus

# pyannote probes the shortest input an embedding model accepts with inputs of a frame or two, whose unweighted
# standard deviation is undefined; the probe expects that and so do we.
warnings.filterwarnings("ignore", message=r"std\(\): degrees of freedom", category=UserWarning)


class CAMPPlusEmbedding(Model):
    """CAM++ embedding model: 80-bin Kaldi fbank (mean-normalised), CAM++ trunk, weighted statistics pooling."""

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
        self.pooling = StatsPool()
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
        """(batch, 1, samples) waveforms -> (batch, frames, mel bins) mean-normalised log-mel features."""
        features = torch.vmap(self._fbank)(waveforms.float())
        return features - features.mean(dim=1, keepdim=True)

    def forward(self, waveforms: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        """(batch, 1, samples) waveforms and optional (batch, frames) weights -> (batch, dimension) embeddings.

        pyannote asks for one embedding per (window, local speaker), repeating each window once per speaker in a
        row: the CAM++ trunk runs once per distinct window and only the pooling runs per speaker.
        """
        distinct = torch.ones(len(waveforms), dtype=torch.bool, device=waveforms.device)
        distinct[1:] = (waveforms[1:] != waveforms[:-1]).flatten(1).any(dim=1)
        frames = self.trunk(waveforms[distinct])[torch.cumsum(distinct, dim=0) - 1]
        return self.campplus.xvector.dense(self.pooling(frames, weights=weights))

    def trunk(self, waveforms: torch.Tensor) -> torch.Tensor:
        """(batch, 1, samples) waveforms -> (batch, channels, frames) CAM++ frame features before pooling."""
        x = self.campplus.head(self.compute_fbank(waveforms).transpose(1, 2))
        for name, layer in self.campplus.xvector.named_children():
            if name == "stats":
                return x
            x = layer(x)
        raise RuntimeError("CAM++ has no statistics pooling layer")
