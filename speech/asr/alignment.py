"""Token timestamps from Whisper's cross-attention: alignment heads, median filter and dynamic time warping.

After ``generate`` has chosen the tokens, one teacher-forced decoder pass over them gives the cross-attention of
the model's alignment heads (``generation_config.alignment_heads``); each head is normalised over the tokens and
median-filtered over time, the heads are averaged, and the monotonic path of least cost through the
(tokens x audio frames) matrix dates every token. The same pass gives the logits Whisper's no-speech rule needs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from scipy.ndimage import median_filter
from transformers import WhisperForConditionalGeneration

MEL_FRAME_S = 0.01
FRAME_S = 0.02  # one encoder frame (two mel frames): also the step of Whisper's timestamp tokens
_MEDIAN_FILTER_WIDTH = 7


@dataclass(frozen=True)
class DecoderPass:
    """A teacher-forced pass over ``prompt + tokens`` of each window of a batch."""

    hidden: torch.Tensor  # (batch, positions, d_model): the decoder's last hidden states
    attention: torch.Tensor  # (batch, alignment heads, positions, encoder frames)


class CrossAttentionAligner:
    """Keeps the encoder passes of ``generate`` and dates its tokens with a second, teacher-forced decoder pass.

    Hooks stay registered for the model's lifetime and only act in the thread that turned keeping on, so
    concurrent requests on the same model do not see each other's tensors.
    """

    def __init__(self, model: WhisperForConditionalGeneration):
        self.model = model
        heads: dict[int, list[int]] = {}
        for layer, head in model.generation_config.alignment_heads:
            heads.setdefault(int(layer), []).append(int(head))
        self._local = threading.local()
        model.get_encoder().register_forward_hook(self._keep_encoder_pass, with_kwargs=True)
        for layer, layer_heads in sorted(heads.items()):
            attention = model.get_decoder().layers[layer].encoder_attn
            attention.register_forward_pre_hook(self._attention_hook(layer_heads), with_kwargs=True)

    @contextmanager
    def keeping_encoder_passes(self) -> Iterator[None]:
        """Keep the inputs and outputs of the encoder passes run in this thread inside the block (``generate``'s),
        for ``encode`` to reuse."""
        self._local.passes = []
        try:
            yield
        finally:
            self._local.passes = None

    def _keep_encoder_pass(self, module: torch.nn.Module, args: tuple, kwargs: dict, output) -> None:
        passes = getattr(self._local, "passes", None)
        if passes is not None:
            passes.append((args[0] if args else kwargs["input_features"], output.last_hidden_state))

    def encode(self, features: torch.Tensor) -> torch.Tensor:
        """The encoder output for a batch of log-mel ``features``: rows that a kept encoder pass saw as input are
        reused (``generate`` has already encoded every window it decoded), any other is encoded."""
        outputs: list[torch.Tensor | None] = []
        for row in features:
            found = (
                output[i]
                for inputs, output in getattr(self._local, "passes", None) or []
                for i in range(len(inputs))
                if torch.equal(inputs[i], row)
            )
            outputs.append(next(found, None))
        missing = [i for i, output in enumerate(outputs) if output is None]
        if missing:
            encoded = self.model.get_encoder()(features[missing]).last_hidden_state
            for i, output in zip(missing, encoded, strict=True):
                outputs[i] = output
        return torch.stack(outputs)

    def _attention_hook(self, heads: list[int]):
        def hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
            weights = getattr(self._local, "attention", None)
            if not isinstance(weights, list):
                return
            hidden = args[0] if args else kwargs["hidden_states"]
            keys_from = kwargs["key_value_states"]
            batch, positions, _ = hidden.shape
            query = (module.q_proj(hidden) * module.scaling).view(batch, positions, -1, module.head_dim)
            key = module.k_proj(keys_from).view(batch, keys_from.shape[1], -1, module.head_dim)
            scores = torch.einsum("bthd,bshd->bhts", query[:, :, heads].float(), key[:, :, heads].float())
            weights.append(scores.softmax(dim=-1))

        return hook

    def decode(self, sequences: list[list[int]], encoder_output: torch.Tensor) -> DecoderPass:
        """Run the decoder over each window's ``sequences`` (prompt and tokens) against ``encoder_output``."""
        length = max(len(sequence) for sequence in sequences)
        pad = self.model.generation_config.eos_token_id
        ids = torch.tensor([s + [pad] * (length - len(s)) for s in sequences], device=encoder_output.device)
        self._local.attention = []
        try:
            hidden = self.model.get_decoder()(input_ids=ids, encoder_hidden_states=encoder_output).last_hidden_state
            attention = torch.cat(self._local.attention, dim=1)
        finally:
            self._local.attention = None
        return DecoderPass(hidden, attention)


def token_times(attention: torch.Tensor, num_frames: int) -> np.ndarray:
    """Start time (seconds) of the token input at each row of ``attention`` (heads, tokens, frames).

    ``num_frames`` is the window's length in mel frames; the attention is cropped to the audio it covers.
    """
    frames = max(1, num_frames // 2)
    weights = attention[:, :, :frames].double().cpu().numpy()
    if weights.shape[1] == 0:
        return np.zeros(0)
    mean = weights.mean(axis=1, keepdims=True)
    std = weights.std(axis=1, keepdims=True)
    weights = (weights - mean) / np.where(std > 0, std, 1.0)
    if frames > _MEDIAN_FILTER_WIDTH // 2:
        weights = median_filter(weights, size=(1, 1, _MEDIAN_FILTER_WIDTH), mode="mirror")
    rows, columns = monotonic_path(-weights.mean(axis=0))
    first_of_row = np.diff(rows, prepend=-1).astype(bool)
    return columns[first_of_row] * FRAME_S


def monotonic_path(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dynamic time warping: the (rows, columns) path of least total ``cost`` from the top-left to the bottom-right.

    Each row of the accumulated cost is one vectorised pass: with ``S`` the running sum of the row's cost and
    ``b[j]`` the best entry from the row above, ``acc[j] = S[j] + min over k <= j of (b[k] - S[k - 1])``.
    """
    n, m = cost.shape
    acc = np.full((n + 1, m + 1), np.inf)
    acc[0, 0] = 0.0
    for i in range(1, n + 1):
        from_above = np.minimum(acc[i - 1, :-1], acc[i - 1, 1:])
        running = np.concatenate(([0.0], np.cumsum(cost[i - 1])))
        acc[i, 1:] = running[1:] + np.minimum.accumulate(from_above - running[:-1])
    rows, columns = [], []
    i, j = n, m
    while i > 0 and j > 0:
        rows.append(i - 1)
        columns.append(j - 1)
        diagonal, up, left = acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1]
        if diagonal < up and diagonal < left:
            i, j = i - 1, j - 1
        elif up < diagonal and up < left:
            i -= 1
        else:
            j -= 1
    return np.array(rows[::-1]), np.array(columns[::-1])
