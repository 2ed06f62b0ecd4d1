"""Whisper and its optional assistant, loaded once, and what the decoding steps ask of them: special tokens,
prompts, features, text, and scores from a teacher-forced pass."""

from __future__ import annotations

import zlib

import numpy as np
import torch
from transformers import AutoConfig, WhisperForCausalLM, WhisperForConditionalGeneration, WhisperProcessor

from speech.asr.alignment import CrossAttentionAligner, DecoderPass
from speech.asr.decoding import WeightMajorProjection, WhisperForDraftedGeneration
from speech.asr.passes import first_pass_tokens
from speech.audio import SAMPLE_RATE, float_samples
from speech.errors import ModelLoadError
from speech.hub import WHISPER_FILES, loading


class Whisper:
    """The model, its processor, its cross-attention aligner and its optional ``assistant`` (a draft model)."""

    def __init__(
        self, model: str, assistant: str | None, device: torch.device, dtype: torch.dtype, token: str | None = None
    ):
        self.device, self.dtype = device, dtype
        with loading("ASR model", model, lambda: list(WHISPER_FILES)):
            self.processor = WhisperProcessor.from_pretrained(model, token=token)
            self.model = WhisperForDraftedGeneration.from_pretrained(
                model, dtype=dtype, token=token, attn_implementation="sdpa"
            )
        self.model = self.model.to(device).eval()
        if device.type == "cpu":
            self.model.proj_out = WeightMajorProjection(self.model.proj_out)
        self.generation_config = self.model.generation_config
        self.multilingual = bool(getattr(self.generation_config, "is_multilingual", False))
        # A model whose timestamp tokens do not mark time (the bundle's Whisper base: ``tools.offline_bundle.BASE``)
        # is decoded without them; its segments are sentences timed by their words' alignment.
        self.timestamps = getattr(self.generation_config, "timestamp_tokens", True)
        self.aligner = CrossAttentionAligner(self.model)
        self.model.encode = self.aligner.encode  # the fallback's and beams' windows are encoded once
        self.assistant = self._load_assistant(assistant, token) if assistant else None
        if self.assistant is not None:
            self.model.set_assistant(self.assistant)

    def _load_assistant(self, name: str, token: str | None) -> torch.nn.Module:
        """Load a full Whisper or a decoder-only (distil-whisper style) draft model compatible with the main one."""
        with loading("assistant model", name, lambda: ["config.json"]):
            config = AutoConfig.from_pretrained(name, token=token)
        main = self.model.config
        if config.model_type != "whisper":
            raise ModelLoadError(f"assistant {name!r} is a {config.model_type!r} model, not a Whisper one")
        if config.vocab_size != main.vocab_size:
            raise ModelLoadError(
                f"assistant {name!r} has a vocabulary of {config.vocab_size} tokens, "
                f"the main model {main.vocab_size}: they cannot share drafts"
            )
        for special in ("decoder_start_token_id", "eos_token_id"):
            if getattr(config, special) != getattr(main, special):
                raise ModelLoadError(
                    f"assistant {name!r} has {special} {getattr(config, special)}, the main model "
                    f"{getattr(main, special)}: their tokenizers differ"
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
        with loading("assistant model", name):
            assistant = kind.from_pretrained(name, dtype=self.dtype, token=token, attn_implementation="sdpa")
        return assistant.to(self.device).eval()

    @property
    def timestamp_begin(self) -> int:
        return self.generation_config.no_timestamps_token_id + 1

    @property
    def start(self) -> int:
        return self.generation_config.decoder_start_token_id

    @property
    def end_of_text(self) -> int:
        return self.generation_config.eos_token_id

    @property
    def max_context(self) -> int:
        """Tokens of earlier text a window may read (Whisper's: half its context, less the start-of-previous token)."""
        return self.model.config.max_target_positions // 2 - 1

    def features(self, windows: list[np.ndarray], attention_mask: bool = False):
        """The log-mel features of 16 kHz ``windows`` (float or 16-bit PCM samples, and their attention mask), as the
        processor pads them."""
        return self.processor.feature_extractor(
            [float_samples(window) for window in windows],
            sampling_rate=SAMPLE_RATE,
            return_tensors="pt",
            return_attention_mask=attention_mask,
        )

    def prompt(self, language: str, task: str) -> list[int]:
        """The tokens each window starts with after any earlier text: start of transcript, then language and task
        if multilingual (and no timestamps, for a model decoded without them)."""
        prompt = [self.start]
        if self.multilingual:
            prompt += [self.generation_config.lang_to_id[f"<|{language}|>"], self.generation_config.task_to_id[task]]
        return prompt if self.timestamps else [*prompt, self.generation_config.no_timestamps_token_id]

    def text(self, window: list[dict]) -> str:
        tokens = [token for segment in window for token in segment["tokens"].tolist()]
        return self.processor.tokenizer.decode(tokens, skip_special_tokens=True)

    def compression_ratio(self, window: list[dict]) -> float:
        """How much gzip shrinks the window's text: about 1.5-2 for speech, well above 2.4 for a repetition loop."""
        text = self.text(window).encode()
        return len(text) / len(zlib.compress(text)) if text else 0.0

    def token_logprobs(self, hidden: torch.Tensor, prompt_length: int, tokens: list[int]) -> torch.Tensor:
        """The log-probability of each of ``tokens`` and of the end of text after them, from a teacher-forced pass's
        last hidden states (one row per position of prompt and tokens)."""
        scored = torch.tensor([*tokens, self.end_of_text], device=hidden.device)
        logits = self.model.proj_out(hidden[prompt_length - 1 : prompt_length + len(tokens)])
        return logits.float().log_softmax(dim=-1).gather(1, scored[:, None])[:, 0]

    def no_speech_probabilities(self, hidden: torch.Tensor, prompt: list[int]) -> list[float]:
        """Each window's probability of the no-speech token after start of transcript (Whisper's no-speech rule)."""
        no_speech_token = self.generation_config.no_timestamps_token_id - 1
        start = prompt.index(self.start)
        return self.model.proj_out(hidden[:, start]).float().softmax(dim=-1)[:, no_speech_token].tolist()

    def first_pass(
        self, features: torch.Tensor, windows: list[list[dict]], prompt: list[int]
    ) -> tuple[list[list[int]], DecoderPass]:
        """The tokens of each window's first ``generate`` pass, and a teacher-forced decoder pass over them."""
        tokens = [first_pass_tokens(window, self.timestamp_begin) for window in windows]
        return tokens, self.aligner.decode([prompt + t for t in tokens], self.aligner.encode(features))
