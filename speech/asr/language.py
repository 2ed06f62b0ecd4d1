"""What a request asks of Whisper, checked before any audio is decoded (language, task, prompt, assistant), and
the spoken language detected where none was given."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.models.whisper.tokenization_whisper import LANGUAGES, TO_LANGUAGE_CODE

from config import InferenceConfig
from speech.asr.model import Whisper
from speech.asr.windows import Window
from speech.errors import InvalidParametersError

LANGUAGE_WINDOWS = 3
"""The language is detected on the first windows (faster-whisper's ``language_detection_segments``)."""


@dataclass(frozen=True)
class RecognitionOptions:
    """A request's options as Whisper takes them: the prompt's text tokens, the language code (``None``: detect
    it) and the task."""

    prompt: list[int]
    language: str | None
    task: str


def recognition_options(whisper: Whisper, config: InferenceConfig) -> RecognitionOptions:
    """Check what ``config`` asks of this model (prompt, language, task, assistant); raise the
    ``InvalidParametersError`` that names the problem."""
    if config.assisted is True and whisper.assistant is None:
        raise InvalidParametersError(
            "parameters: assisted decoding was asked for, but no assistant model is loaded (set ASSISTANT_MODEL)"
        )
    prompt = _prompt_tokens(whisper, config.prompt)
    language = None if config.language is None else language_code(whisper, config.language)
    if not whisper.multilingual:
        if config.task == "translate":
            raise InvalidParametersError(
                "parameters: task 'translate' needs a multilingual model; this one is English-only"
            )
        if language not in (None, "en"):
            raise InvalidParametersError(f"parameters: language {config.language!r}: this model is English-only")
        language = "en"
    return RecognitionOptions(prompt, language, config.task)


def language_code(whisper: Whisper, language: str) -> str:
    """Normalise a language code or name (``fr``, ``French``) to the code Whisper knows."""
    code = language if language in LANGUAGES else TO_LANGUAGE_CODE.get(language)
    lang_to_id = getattr(whisper.generation_config, "lang_to_id", None) or {}
    if code is None or (lang_to_id and f"<|{code}|>" not in lang_to_id):
        raise InvalidParametersError(f"parameters: language {language!r} is not a language this model knows")
    return code


def _prompt_tokens(whisper: Whisper, prompt: str | None) -> list[int]:
    """The text tokens of the request's ``prompt``; an error if it is longer than a window may read or spells out
    a special token (``<|endoftext|>``...)."""
    if not prompt or not prompt.strip():
        return []
    try:
        tokens = whisper.processor.tokenizer.get_prompt_ids(prompt).tolist()[1:]  # after start of previous
    except ValueError as error:
        raise InvalidParametersError(f"parameters: prompt: {error}") from None
    if len(tokens) > whisper.max_context:
        raise InvalidParametersError(
            f"parameters: prompt is {len(tokens)} tokens long; Whisper reads at most {whisper.max_context}"
        )
    return tokens


def detect_language(whisper: Whisper, windows: list[Window], no_speech_threshold: float | None) -> tuple[str, float]:
    """Whisper's language detection, on speech: one decoder step after start of transcript on each window gives
    the probabilities of the language tokens and of the no-speech token. The windows whose no-speech
    probability is at most ``no_speech_threshold`` (all of them when none is, or with no threshold) vote: their
    language probabilities are summed. The winner, with its average probability over the voting windows."""
    generation = whisper.generation_config
    features = whisper.features([window.samples for window in windows]).input_features
    features = features.to(whisper.device, whisper.dtype)
    start = torch.full((len(windows), 1), whisper.start, device=whisper.device)
    logits = whisper.model(input_features=features, decoder_input_ids=start, use_cache=False).logits[:, -1].float()
    language_ids = torch.tensor(list(generation.lang_to_id.values()), device=logits.device)
    probabilities = logits[:, language_ids].softmax(dim=-1)
    if no_speech_threshold is not None:
        no_speech = logits.softmax(dim=-1)[:, generation.no_timestamps_token_id - 1]
        if bool((no_speech <= no_speech_threshold).any()):
            probabilities = probabilities[no_speech <= no_speech_threshold]
    votes = probabilities.sum(dim=0)
    best = int(votes.argmax())
    token = whisper.processor.tokenizer.convert_ids_to_tokens(int(language_ids[best]))
    return token.strip("<|>"), float(votes[best]) / len(probabilities)
