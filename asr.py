"""Speech recognition with Whisper (transformers), optionally assisted by a smaller draft model."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from transformers import (
    AutoConfig,
    WhisperForCausalLM,
    WhisperForConditionalGeneration,
    WhisperProcessor,
)
from transformers.models.whisper.tokenization_whisper import LANGUAGES, TO_LANGUAGE_CODE

from audio import SAMPLE_RATE
from config import InferenceConfig
from diarization_utils import Chunk, Progress
from errors import InvalidParametersError, ModelLoadError

_QUIET_SEARCH_S = 5.0  # a long recording is cut at the quietest point of the last seconds of each window
_ENERGY_FRAME_S = 0.02
_ENERGY_SMOOTHING_S = 0.2
_MAX_MEDIAN_WORD_S = 0.7  # a word lasts at most twice its segment's median word duration (median capped at this)


@dataclass(frozen=True)
class Window:
    """A stretch of the recording decoded as one Whisper input; ``offset`` in seconds."""

    offset: float
    samples: np.ndarray


@dataclass(frozen=True)
class Transcript:
    """What Whisper heard, in time order: segments (``chunks``), the same text as ``words``, and the language."""

    chunks: list[Chunk]
    words: list[Chunk]
    language: str

    @property
    def text(self) -> str:
        return " ".join(chunk.text for chunk in self.chunks if chunk.text)


def split_windows(waveform: np.ndarray, max_length_s: float) -> list[Window]:
    """Cut ``waveform`` into windows of at most ``max_length_s``, each cut at the quietest nearby moment."""
    max_length = int(max_length_s * SAMPLE_RATE)
    if len(waveform) <= max_length:
        return [Window(0.0, waveform)]
    frame = int(_ENERGY_FRAME_S * SAMPLE_RATE)
    usable = len(waveform) // frame * frame
    energy = np.square(waveform[:usable].astype(np.float64)).reshape(-1, frame).mean(axis=1)
    smoothing = max(1, int(_ENERGY_SMOOTHING_S / _ENERGY_FRAME_S))
    energy = np.convolve(energy, np.ones(smoothing) / smoothing, mode="same")
    search = int(min(_QUIET_SEARCH_S, max_length_s / 3) * SAMPLE_RATE) // frame
    windows, start = [], 0
    while len(waveform) - start > max_length:
        last = min((start + max_length) // frame, len(energy))
        first = max(start // frame + 1, last - search)
        cut = (first + int(np.argmin(energy[first:last]))) * frame
        windows.append(Window(start / SAMPLE_RATE, waveform[start:cut]))
        start = cut
    windows.append(Window(start / SAMPLE_RATE, waveform[start:]))
    return windows


def _batched(items: list[Window], size: int) -> Iterator[list[Window]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class WhisperTranscriber:
    """Whisper and its optional assistant, loaded once; ``transcribe`` turns a waveform into a ``Transcript``."""

    def __init__(
        self,
        model: str,
        assistant: str | None,
        device: torch.device,
        dtype: torch.dtype,
        token: str | None = None,
    ):
        self.device, self.dtype = device, dtype
        self.processor = WhisperProcessor.from_pretrained(model, token=token)
        self.model = (
            WhisperForConditionalGeneration.from_pretrained(model, dtype=dtype, token=token, attn_implementation="sdpa")
            .to(device)
            .eval()
        )
        self.multilingual = bool(getattr(self.model.generation_config, "is_multilingual", False))
        self.assistant = self._load_assistant(assistant, token) if assistant else None

    def _load_assistant(self, name: str, token: str | None) -> torch.nn.Module:
        """Load a full Whisper or a decoder-only (distil-whisper style) draft model compatible with the main one."""
        config = AutoConfig.from_pretrained(name, token=token)
        main = self.model.config
        if getattr(config, "vocab_size", None) != main.vocab_size:
            raise ModelLoadError(
                f"assistant {name!r} has a vocabulary of {getattr(config, 'vocab_size', '?')} tokens, "
                f"the main model {main.vocab_size}: they cannot share drafts"
            )
        decoder_only = "WhisperForCausalLM" in (config.architectures or [])
        if not decoder_only and getattr(config, "num_mel_bins", None) != main.num_mel_bins:
            raise ModelLoadError(
                f"assistant {name!r} expects {config.num_mel_bins} mel bins, the main model {main.num_mel_bins}"
            )
        if decoder_only and config.d_model != main.d_model:
            raise ModelLoadError(
                f"decoder-only assistant {name!r} has d_model {config.d_model}; it reuses the main model's encoder "
                f"outputs, whose width is {main.d_model}"
            )
        kind = WhisperForCausalLM if decoder_only else WhisperForConditionalGeneration
        return (
            kind.from_pretrained(name, dtype=self.dtype, token=token, attn_implementation="sdpa").to(self.device).eval()
        )

    def language_code(self, language: str) -> str:
        """Normalise a language code or name (``fr``, ``French``) to the code Whisper knows."""
        code = language if language in LANGUAGES else TO_LANGUAGE_CODE.get(language)
        lang_to_id = getattr(self.model.generation_config, "lang_to_id", None) or {}
        if code is None or (lang_to_id and f"<|{code}|>" not in lang_to_id):
            raise InvalidParametersError(f"parameters: language {language!r} is not a language this model knows")
        return code

    def _generation_options(self, config: InferenceConfig, features: torch.Tensor) -> tuple[dict, str]:
        """Keyword arguments for ``generate`` and the recording's language."""
        if config.assisted and self.assistant is None:
            raise InvalidParametersError(
                "parameters: assisted decoding was asked for, but no assistant model is loaded (set ASSISTANT_MODEL)"
            )
        options: dict = {
            "return_timestamps": True,
            "return_segments": True,
            "return_token_timestamps": True,
            "return_dict_in_generate": True,
            "output_logits": True,
        }
        if config.temperature > 0:
            options.update(do_sample=True, temperature=config.temperature)
        if config.assisted:
            options["assistant_model"] = self.assistant
        if not self.multilingual:
            if config.task == "translate":
                raise InvalidParametersError(
                    "parameters: task 'translate' needs a multilingual model; this one is English-only"
                )
            if config.language is not None and self.language_code(config.language) != "en":
                raise InvalidParametersError(f"parameters: language {config.language!r}: this model is English-only")
            return options, "en"
        if config.language is not None:
            language = self.language_code(config.language)
        else:
            token_id = int(self.model.detect_language(features[:1])[0])
            language = self.processor.tokenizer.convert_ids_to_tokens(token_id).strip("<|>")
        options.update(language=language, task=config.task)
        return options, language

    @torch.inference_mode()
    def transcribe(self, waveform: np.ndarray, config: InferenceConfig, progress: Progress | None = None) -> Transcript:
        """Transcribe a 16 kHz mono waveform window by window, batching windows when not assisted.

        A window is dropped as non-speech when Whisper's no-speech probability is above ``no_speech_threshold``
        and its decoding's average log-probability below ``logprob_threshold`` (Whisper's own rule).
        """
        windows = split_windows(waveform, config.chunk_length_s)
        chunks: list[Chunk] = []
        words: list[Chunk] = []
        options: dict | None = None
        language = "en"
        done = 0
        for batch in _batched(windows, config.effective_batch_size):
            inputs = self.processor.feature_extractor(
                [window.samples for window in batch],
                sampling_rate=SAMPLE_RATE,
                return_tensors="pt",
                return_attention_mask=True,
            )
            features = inputs.input_features.to(self.device, self.dtype)
            if options is None:
                options, language = self._generation_options(config, features)
            output = self.model.generate(features, attention_mask=inputs.attention_mask.to(self.device), **options)
            for window, window_features, segments in zip(batch, features, output["segments"], strict=True):
                if segments and self._is_non_speech(window_features, segments[0]["result"], config):
                    continue
                for segment in segments:
                    chunk, segment_words = self._segment(window, segment)
                    if chunk.text:
                        chunks.append(chunk)
                        words.extend(segment_words)
            done += len(batch)
            if progress is not None:
                progress("transcription", done, len(windows))
        return Transcript(chunks, words, language)

    def _is_non_speech(self, features: torch.Tensor, result: dict, config: InferenceConfig) -> bool:
        """Whisper's rule: likely no speech, and a decoding too unsure to trust (raw, unfiltered logits)."""
        if config.no_speech_threshold is None:
            return False
        eot = self.processor.tokenizer.eos_token_id
        steps = len(result["logits"])
        logprobs = []
        for token, logits in zip(result["sequences"][-steps:].tolist(), result["logits"], strict=True):
            logprobs.append(logits.float().log_softmax(dim=-1)[token].item())
            if token == eot:
                break
        if float(np.mean(logprobs)) >= config.logprob_threshold:
            return False
        generation = self.model.generation_config
        encoded = self.model.get_encoder()(features[None])
        start = torch.tensor([[generation.decoder_start_token_id]], device=self.device)
        logits = self.model(encoder_outputs=encoded, decoder_input_ids=start).logits[0, -1].float()
        no_speech = logits.softmax(dim=-1)[generation.no_timestamps_token_id - 1].item()
        return no_speech > config.no_speech_threshold

    def _segment(self, window: Window, segment: dict) -> tuple[Chunk, list[Chunk]]:
        """A Whisper segment as a chunk and its words, in recording time.

        A word is a run of tokens starting with a space (punctuation stays with its word); it lasts from its
        first token's time to the next token's, by the cross-attention alignment (``alignment_heads``).
        """
        tokenizer = self.processor.tokenizer
        length = len(window.samples) / SAMPLE_RATE
        tokens = segment["tokens"].tolist()
        times = [min(max(float(t), 0.0), length) for t in segment["token_timestamps"].tolist()]
        runs: list[tuple[list[int], float, float]] = []
        for i, token in enumerate(tokens):
            if token >= tokenizer.eos_token_id:  # timestamps and control tokens
                continue
            end = times[i + 1] if i + 1 < len(times) else times[i]
            if runs and not tokenizer.convert_ids_to_tokens(token).startswith("Ġ"):
                runs[-1] = (runs[-1][0] + [token], runs[-1][1], end)
            else:
                runs.append(([token], times[i], end))
        # The alignment stretches a segment's last word to the closing timestamp: cap word durations.
        durations = [end - start for _, start, end in runs if end > start]
        longest = 2 * min(_MAX_MEDIAN_WORD_S, float(np.median(durations))) if durations else 0.0
        words = []
        for ids, start, end in runs:
            text = tokenizer.decode(ids).strip()
            if text:
                end = min(max(start, end), start + longest)
                words.append(Chunk(text, round(window.offset + start, 3), round(window.offset + end, 3)))
        start = min(float(segment["start"]), length)
        end = min(max(float(segment["end"]), start), length)
        text = " ".join(word.text for word in words)
        return Chunk(text, round(window.offset + start, 3), round(window.offset + end, 3)), words
