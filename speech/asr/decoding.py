"""Whisper's ``generate`` with four changes that keep its output.

- On CPU the output projection can be computed as ``weight @ hidden.T`` (``WeightMajorProjection``): for several
  rows (a batch of windows, a verification pass) that is about 1.8x faster than ``linear`` with a 51865x384 weight.
- Token suppression (``suppress_tokens``, ``begin_suppress_tokens``) is a mask built once, not a membership test
  over the vocabulary at every step (2.5 ms of a 20 ms tiny.en step on 2 CPU cores); transformers 4.57 adds the
  lists a second time, from the model's generation config, and that copy is masked too.
- Assisted generation drafts with ``DraftDecoder``, a lean copy of the assistant's decoder (fused projections, a
  preallocated cache, an int8 output projection on CPU), driven by ``DraftCandidates`` inside transformers' own
  verification loop: Whisper checks every drafted token, so the text is the one greedy decoding gives. The
  generic assistant loop costs more per drafted token than a tiny.en step saves. Whisper's ``generate`` also drops
  the start-of-text suppression when assisted; it is put back, so assisted and plain decoding obey the same rules.
- ``encode``, when set, gives ``generate`` the encoder output of its input: the temperature fallback and beam
  search decode windows that an earlier call has encoded (about 0.2 s a window for tiny.en on 2 CPU cores).

And two logits processors that bound and seed what ``generate`` does with each window (``WindowRows`` follows which
window a row of the batch decodes, pass by pass):

- ``TokenBudget`` ends a pass that has generated its share of tokens (Whisper's 224 per 30 s, scaled to the audio
  the pass covers) or that repeats the same words over and over, with a closing timestamp and end of text.
- ``GumbelSampling`` samples as a greedy choice over logits plus Gumbel noise drawn from a generator of its own.
"""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from transformers import WhisperForConditionalGeneration
from transformers.generation.candidate_generator import CandidateGenerator
from transformers.generation.logits_process import (
    LogitsProcessor,
    LogitsProcessorList,
    SuppressTokensAtBeginLogitsProcessor,
    SuppressTokensLogitsProcessor,
)
from transformers.modeling_outputs import BaseModelOutput

_FIRST_DRAFT_LENGTH = 8  # then +2 after a fully accepted draft, -1 after a rejection (transformers' heuristic)


class WeightMajorProjection(nn.Module):
    """A bias-free linear layer computed as ``weight @ hidden.T`` when there are several rows.

    CPU BLAS runs ``(rows x 384) @ (384 x 51865)`` with the weight stored vocabulary-major far below its speed
    for the same product the other way round (2 cores, 8 rows: 23.4 ms against 12.9 ms). One row (a
    matrix-vector product) goes through ``linear``, which is as fast. Results agree to float rounding.
    """

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.weight = linear.weight

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        rows = hidden.reshape(-1, hidden.shape[-1])
        if len(rows) == 1:
            return nn.functional.linear(hidden, self.weight)
        return torch.mm(self.weight, rows.T).T.contiguous().view(*hidden.shape[:-1], len(self.weight))


class SuppressTokens(LogitsProcessor):
    """``SuppressTokensLogitsProcessor`` with its mask built once."""

    def __init__(self, tokens: list[int], vocab_size: int, device: torch.device):
        self.mask = torch.zeros(vocab_size, dtype=torch.bool, device=device)
        self.mask[tokens] = True

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        return scores.masked_fill(self.mask, -float("inf"))


class SuppressTokensAtBegin(SuppressTokens):
    """``SuppressTokensAtBeginLogitsProcessor`` with its mask built once: only the first generated token."""

    def __init__(self, tokens: list[int], vocab_size: int, device: torch.device, begin_index: int):
        super().__init__(tokens, vocab_size, device)
        self.begin_index = begin_index

    def set_begin_index(self, begin_index: int) -> None:
        self.begin_index = begin_index

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        return super().__call__(input_ids, scores) if input_ids.shape[-1] == self.begin_index else scores


TOKENS_PER_SECOND = 224 / 30
"""Whisper's cap on the tokens one pass generates (``sample_len``: 224 for a 30 s window), per second of audio."""
MIN_TOKENS = 24
"""The least a pass may generate, however short its audio."""
_LOOP_MAX_NGRAM = 16
_LOOP_MIN_REPEATS = 4
_LOOP_MIN_TOKENS = 24
_MEL_FRAMES_PER_TIMESTAMP = 2  # timestamp tokens step by 20 ms, mel frames by 10 ms
_LAST_TIMESTAMP = 1500  # <|30.00|>


def token_limit(frames: int) -> int:
    """How many tokens a pass over ``frames`` mel frames of audio may generate."""
    return max(MIN_TOKENS, math.ceil(TOKENS_PER_SECOND * frames / 100))


def is_looping(tokens: list[int], eos: int) -> bool:
    """Whether the text tokens (``tokens`` below ``eos``: timestamps and control tokens left out) end in one
    n-gram of at most 16 tokens said again and again: at least 4 times in a row, over at least 24 tokens."""
    text = [token for token in tokens if token < eos]
    for n in range(1, _LOOP_MAX_NGRAM + 1):
        span = n * max(_LOOP_MIN_REPEATS, -(-_LOOP_MIN_TOKENS // n))
        if len(text) >= span and text[-span:] == text[-n:] * (span // n):
            return True
    return False


class WindowRows:
    """Which window each row of a ``generate`` batch decodes, and the mel frame its current pass starts at.

    Whisper's ``generate`` decodes a window in passes (after a pass that ends in an unfinished segment, the next
    starts at that segment's opening timestamp) and leaves finished windows out of the next pass; passed as
    ``monitor_progress``, this object follows. ``frames``: each window's length in mel frames.
    """

    def __init__(self, frames: list[int]):
        self.frames = frames
        self.seek = [0] * len(frames)
        self.active = list(range(len(frames)))

    def __call__(self, progress: torch.Tensor) -> None:
        """``generate``'s progress before each pass: each window's seek and total frames."""
        self.seek = progress[:, 0].tolist()
        self.active = [i for i, (seek, total) in enumerate(progress.tolist()) if seek < total]

    def window(self, row: int, rows: int) -> int:
        """The window that row ``row`` of ``rows`` decodes (beam search gives each window several rows)."""
        return self.active[row // (rows // len(self.active))]

    def frames_left(self, window: int) -> int:
        return max(0, self.frames[window] - self.seek[window])


class TokenBudget(LogitsProcessor):
    """Cuts a pass short once it has generated ``token_limit`` tokens for the audio it covers (at most
    ``spare[window]`` when given) or ``is_looping``. The pass is closed as Whisper closes one: a timestamp after
    text (the window's end, or the last timestamp if that is later), then end of text; ``generate`` then takes
    the window as done, where a pass stopped in mid-segment would be followed by another. Without timestamps
    (``timestamp_begin`` None) it ends with end of text."""

    def __init__(self, rows: WindowRows, timestamp_begin: int | None, eos: int, spare: list[int] | None = None):
        self.rows, self.timestamp_begin, self.eos, self.spare = rows, timestamp_begin, eos, spare
        self.begin_index = 0

    def set_begin_index(self, begin_index: int) -> None:
        self.begin_index = begin_index

    def limit(self, window: int) -> int:
        limit = token_limit(self.rows.frames_left(window))
        return limit if self.spare is None else min(limit, self.spare[window])

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        closing = {}
        for row, tokens in enumerate(input_ids[:, self.begin_index :].tolist()):
            window = self.rows.window(row, len(input_ids))
            if len(tokens) >= self.limit(window) or is_looping(tokens, self.eos):
                closing[row] = self._closing(tokens, window)
        if not closing:
            return scores
        scores = scores.clone()
        for row, token in closing.items():
            scores[row] = -float("inf")
            scores[row, token] = 0.0
        return scores

    def _closing(self, tokens: list[int], window: int) -> int:
        if self.timestamp_begin is None or tokens[-1] >= self.eos:  # no timestamps, or a timestamp
            return self.eos
        end = self.timestamp_begin + min(_LAST_TIMESTAMP, self.rows.frames_left(window) // _MEL_FRAMES_PER_TIMESTAMP)
        return max([end, *(token for token in tokens if token >= self.timestamp_begin)])


class GumbelSampling(LogitsProcessor):
    """Sampling at ``temperature`` as a greedy choice: the logits divided by the temperature plus Gumbel noise
    peak at an exact sample of softmax(logits / temperature). The noise comes from a generator of this object's
    own, seeded by the window's entry of ``seeds``, its pass and the position, so the text depends on nothing
    else: not on other requests (no process-wide random state), on the batch, or on drafts (the assistant's
    draft sees the noise of the model that checks it)."""

    def __init__(self, rows: WindowRows, temperature: float, seeds: list[int]):
        self.rows, self.temperature, self.seeds = rows, temperature, seeds
        self.generator = torch.Generator()

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        uniform = torch.empty(scores.shape, dtype=torch.float64)
        for row in range(len(scores)):
            window = self.rows.window(row, len(scores))
            seed = (self.seeds[window] * 1_000_003 + self.rows.seek[window]) * 1_000_003 + input_ids.shape[1]
            uniform[row].uniform_(generator=self.generator.manual_seed(seed % 2**63))
        gumbel = -torch.log(-torch.log(uniform))
        return scores / self.temperature + gumbel.to(scores.device, scores.dtype)


@dataclass
class DraftCounts:
    """Tokens the draft proposed and Whisper accepted, over one ``generate`` call."""

    drafted: int = 0
    accepted: int = 0


@dataclass
class _DraftState:
    """One window's draft cache: self-attention keys/values up to ``length``, cross-attention keys/values."""

    keys: torch.Tensor  # (layers, heads, max positions, head dim)
    values: torch.Tensor
    cross_keys: torch.Tensor  # (layers, heads, encoder frames, head dim)
    cross_values: torch.Tensor
    length: int = 0


class _DraftLayer(nn.Module):
    def __init__(self, layer: nn.Module):
        super().__init__()
        attention, cross = layer.self_attn, layer.encoder_attn
        self.self_norm, self.cross_norm, self.ffn_norm = (
            layer.self_attn_layer_norm,
            layer.encoder_attn_layer_norm,
            layer.final_layer_norm,
        )
        self.qkv = _fused(attention.q_proj, attention.k_proj, attention.v_proj)
        self.out = _fused(attention.out_proj)
        self.cross_q = _fused(cross.q_proj)
        self.cross_kv = _fused(cross.k_proj, cross.v_proj)
        self.cross_out = _fused(cross.out_proj)
        self.fc1, self.fc2 = _fused(layer.fc1), _fused(layer.fc2)
        self.activation = layer.activation_fn


def _fused(*linears: nn.Linear) -> nn.Linear:
    """One linear layer computing the concatenated outputs of ``linears`` (a missing bias counts as zero)."""
    weight = torch.cat([linear.weight for linear in linears])
    fused = nn.Linear(weight.shape[1], weight.shape[0], device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        fused.weight.copy_(weight)
        zero = torch.zeros(1, dtype=weight.dtype, device=weight.device)
        fused.bias.copy_(torch.cat([zero.expand(len(lin.weight)) if lin.bias is None else lin.bias for lin in linears]))
    return fused


class DraftDecoder(nn.Module):
    """A Whisper decoder for one-token steps at batch 1, built from a loaded one (``decoder`` + ``proj_out``).

    With ``quantize`` (on CPU) its output projection is int8 with per-channel scales: 51865 x 384 weights cost
    most of a step in float32 (11 ms against 1 ms). The rest stays float32, which keeps drafts close to
    Whisper's. Drafts only decide how many tokens Whisper accepts, never which.
    """

    def __init__(self, decoder: nn.Module, proj_out: nn.Linear, quantize: bool):
        super().__init__()
        config = decoder.config
        self.heads = config.decoder_attention_heads
        self.head_dim = config.d_model // self.heads
        self.max_positions = config.max_target_positions
        self.embed_tokens = decoder.embed_tokens
        self.embed_positions = decoder.embed_positions
        self.final_norm = decoder.layer_norm
        self.layers = nn.ModuleList(_DraftLayer(layer) for layer in decoder.layers)
        self.proj = proj_out  # quantization swaps in an int8 copy; the assistant keeps its own
        if quantize:
            with warnings.catch_warnings():  # torch.ao's notices that torchao will take this API over
                warnings.simplefilter("ignore")
                torch.ao.quantization.quantize_dynamic(
                    self, {"proj": torch.ao.quantization.per_channel_dynamic_qconfig}, inplace=True
                )

    def start(self, encoder_hidden: torch.Tensor) -> _DraftState:
        """A fresh cache for one window; ``encoder_hidden`` is (1, frames, d_model)."""
        frames = encoder_hidden.shape[1]
        cross = [layer.cross_kv(encoder_hidden[0]).view(frames, 2, self.heads, self.head_dim) for layer in self.layers]
        cross = torch.stack(cross).permute(2, 0, 3, 1, 4)  # (2, layers, heads, frames, head dim)
        shape = (len(self.layers), self.heads, self.max_positions, self.head_dim)
        empty = torch.empty(shape, dtype=cross.dtype, device=cross.device)
        return _DraftState(empty, torch.empty_like(empty), cross[0].contiguous(), cross[1].contiguous())

    def step(self, state: _DraftState, tokens: torch.Tensor) -> torch.Tensor:
        """Feed ``tokens`` (1-D) after the cached ones; return the logits that follow the last of them."""
        n, start = len(tokens), state.length
        end = start + n
        x = self.embed_tokens(tokens) + self.embed_positions.weight[start:end]
        mask = None if n == 1 else torch.ones(n, end, dtype=torch.bool, device=x.device).tril(start)
        for i, layer in enumerate(self.layers):
            q, k, v = layer.qkv(layer.self_norm(x)).view(n, 3, self.heads, self.head_dim).permute(1, 2, 0, 3)
            state.keys[i, :, start:end], state.values[i, :, start:end] = k, v
            attended = nn.functional.scaled_dot_product_attention(
                q, state.keys[i, :, :end], state.values[i, :, :end], attn_mask=mask
            )
            x = x + layer.out(attended.transpose(0, 1).reshape(n, -1))
            q = layer.cross_q(layer.cross_norm(x)).view(n, self.heads, self.head_dim).transpose(0, 1)
            attended = nn.functional.scaled_dot_product_attention(q, state.cross_keys[i], state.cross_values[i])
            x = x + layer.cross_out(attended.transpose(0, 1).reshape(n, -1))
            x = x + layer.fc2(layer.activation(layer.fc1(layer.ffn_norm(x))))
        state.length = end
        return self.proj(self.final_norm(x[-1:]))[0]


class DraftCandidates(CandidateGenerator):
    """Drafts with a ``DraftDecoder`` under the same logits processors as Whisper (timestamp rules included)."""

    def __init__(
        self,
        draft: DraftDecoder,
        encoder_hidden: torch.Tensor,
        logits_processor: LogitsProcessorList,
        max_length: int,
        eos_token_ids: set[int],
        counts: DraftCounts,
    ):
        self.draft, self.state = draft, draft.start(encoder_hidden)
        self.logits_processor, self.max_length, self.eos_token_ids = logits_processor, max_length, eos_token_ids
        self.counts, self.length = counts, _FIRST_DRAFT_LENGTH

    def get_candidates(self, input_ids: torch.LongTensor, **kwargs) -> tuple[torch.LongTensor, None]:
        sequence = input_ids.to(self.state.keys.device)
        self.state.length = min(self.state.length, sequence.shape[1] - 1)  # forget rejected drafts
        pending = sequence[0, self.state.length :]
        for _ in range(min(self.length, self.max_length - sequence.shape[1] - 1)):
            logits = self.draft.step(self.state, pending)
            token = self.logits_processor(sequence, logits[None].float()).argmax(dim=-1, keepdim=True)
            sequence, pending = torch.cat([sequence, token], dim=1), token[0]
            if int(token) in self.eos_token_ids:
                break
        return sequence.to(input_ids.device), None

    def update_candidate_strategy(self, input_ids: torch.LongTensor, scores: torch.Tensor, num_matches: int) -> None:
        drafted = scores.shape[1] - 1
        self.counts.drafted += drafted
        self.counts.accepted += int(num_matches)
        self.length = self.length + 2 if num_matches == drafted else max(1, self.length - 1)


def _same_weights(a: nn.Module, b: nn.Module) -> bool:
    first, second = a.state_dict(), b.state_dict()
    return first.keys() == second.keys() and all(
        first[name].shape == second[name].shape and torch.equal(first[name], second[name]) for name in first
    )


class WhisperForDraftedGeneration(WhisperForConditionalGeneration):
    """Whisper whose ``generate`` uses ``SuppressTokens`` and, given ``assistant_model``, ``DraftCandidates``.

    ``set_assistant`` builds the draft; ``count_drafts`` starts counting the drafts of this thread's next calls.
    ``encode``, when set, gives ``generate`` the encoder output of its log-mel input (e.g. one kept from an
    earlier call on the same windows: the temperature fallback decodes them again).
    """

    encode: Callable[[torch.Tensor], torch.Tensor] | None = None

    def _prepare_encoder_decoder_kwargs_for_generation(self, inputs_tensor, model_kwargs, model_input_name, config):
        if self.encode is None or config.output_attentions or config.output_hidden_states:
            return super()._prepare_encoder_decoder_kwargs_for_generation(
                inputs_tensor, model_kwargs, model_input_name, config
            )
        model_kwargs["encoder_outputs"] = BaseModelOutput(last_hidden_state=self.encode(inputs_tensor))
        return model_kwargs

    def set_assistant(self, assistant: nn.Module) -> None:
        """Draft with ``assistant``'s decoder. A full Whisper whose encoder is this model's (distil-whisper keeps
        its teacher's encoder) reads this model's encoder output instead of encoding every window again."""
        quantize = self.device.type == "cpu"
        self.draft = DraftDecoder(assistant.model.decoder, assistant.proj_out, quantize).eval()
        self.draft_encodes = assistant.config.is_encoder_decoder and not _same_weights(
            assistant.get_encoder(), self.get_encoder()
        )
        self._drafts = threading.local()

    def count_drafts(self) -> DraftCounts:
        """Counts that the following ``generate`` calls in this thread add to."""
        self._drafts.counts = DraftCounts()
        return self._drafts.counts

    def _retrieve_logit_processors(self, generation_config, logits_processor, begin_index, num_beams, device):
        if generation_config.begin_suppress_tokens is None:  # dropped by generate() when assisted: put it back
            generation_config.begin_suppress_tokens = self.generation_config.begin_suppress_tokens
        processors = super()._retrieve_logit_processors(
            generation_config, logits_processor, begin_index, num_beams, device
        )
        return [self._masked(processor, device) for processor in processors]

    def _get_logits_processor(self, generation_config, *args, **kwargs) -> LogitsProcessorList:
        """transformers 4.57 puts the model's suppression lists, which Whisper's ``generate`` moved into its own
        processors, back into the generation config: their second copy is masked too (the membership test cost
        1-2 ms a step)."""
        processors = super()._get_logits_processor(generation_config, *args, **kwargs)
        return LogitsProcessorList(self._masked(processor, self.device) for processor in processors)

    def _masked(self, processor: LogitsProcessor, device: torch.device) -> LogitsProcessor:
        vocab_size = self.config.vocab_size
        if isinstance(processor, SuppressTokensLogitsProcessor):
            return SuppressTokens(processor.suppress_tokens.tolist(), vocab_size, device)
        if isinstance(processor, SuppressTokensAtBeginLogitsProcessor):
            tokens = processor.begin_suppress_tokens.tolist()
            return SuppressTokensAtBegin(tokens, vocab_size, device, processor.begin_index)
        return processor

    def _get_candidate_generator(
        self, generation_config, input_ids, inputs_tensor, logits_processor, model_kwargs, assistant_model=None, **kw
    ) -> CandidateGenerator:
        if self.draft_encodes:  # a full Whisper with an encoder of its own
            encoder_hidden = assistant_model.get_encoder()(inputs_tensor.to(assistant_model.dtype)).last_hidden_state
        else:
            encoder_hidden = model_kwargs["encoder_outputs"].last_hidden_state
        return DraftCandidates(
            self.draft,
            encoder_hidden,
            LogitsProcessorList(logits_processor),
            generation_config.max_length,
            set(generation_config._eos_token_tensor.tolist()),
            getattr(self._drafts, "counts", None) or DraftCounts(),
        )
