"""One batch of windows through ``generate``: greedy, assisted, sampled or beam search, every pass within its token
budget, and the checks of what came out (cut short, speech or not)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from transformers.generation.logits_process import LogitsProcessorList

from config import InferenceConfig
from speech.asr.alignment import MEL_FRAME_S
from speech.asr.decoding import GumbelSampling, TokenBudget, WindowRows, is_looping, token_limit
from speech.asr.model import Whisper
from speech.asr.passes import passes
from speech.text import has_word


@dataclass(frozen=True)
class BatchInput:
    """Windows decoded together: their features and attention mask, ``generate``'s options, the decoder
    prompt (earlier text, start of transcript, language, task) their tokens follow, each window's length in mel
    frames and the index of the first window in the recording."""

    features: torch.Tensor
    attention_mask: torch.Tensor
    options: dict
    prompt: list[int]
    frames: list[int]
    first: int


def is_speech(
    config: InferenceConfig, no_speech: float, has_tokens: bool, average_logprob: Callable[[], float]
) -> bool:
    """Whisper's rule for one window: non-speech when the no-speech probability is above ``no_speech_threshold`` and
    the decoding's average log-probability (raw logits, end of text included; computed only when needed) is below
    ``logprob_threshold``; a window without tokens, or without a threshold, is speech."""
    if config.no_speech_threshold is None or no_speech <= config.no_speech_threshold or not has_tokens:
        return True
    return average_logprob() >= config.logprob_threshold


class Generator:
    """Runs ``generate`` on the windows of a batch and judges its output, for one ``Whisper``."""

    def __init__(self, whisper: Whisper):
        self.whisper = whisper

    def generate(
        self,
        batch: BatchInput,
        rows: list[int],
        temperature: float = 0.0,
        spare: list[int] | None = None,
        **options,
    ) -> list[list[dict]]:
        """Decode the windows ``rows`` of ``batch`` with ``options`` over the batch's own: greedy (or beams), or
        sampled at ``temperature`` (``GumbelSampling``, seeded by window and temperature), every pass within its
        token limit (``TokenBudget``; at most ``spare`` tokens per window when given). Their segments. With an
        ``assistant_model``, the windows go through ``generate`` one at a time: transformers' assisted generation
        takes a batch of one."""
        if "assistant_model" in options and len(rows) > 1:
            spares = [None] * len(rows) if spare is None else [[tokens] for tokens in spare]
            return [
                self.generate(batch, [row], temperature, row_spare, **options)[0]
                for row, row_spare in zip(rows, spares, strict=True)
            ]
        whisper = self.whisper
        windows = WindowRows([batch.frames[i] for i in rows])
        timestamp_begin = whisper.timestamp_begin if whisper.timestamps else None
        processors = LogitsProcessorList([TokenBudget(windows, timestamp_begin, whisper.end_of_text, spare)])
        if temperature > 0:
            seeds = [(batch.first + i) * 1000 + round(temperature * 100) for i in rows]
            processors.append(GumbelSampling(windows, temperature, seeds))
        output = whisper.model.generate(
            batch.features[rows],
            attention_mask=batch.attention_mask[rows],
            logits_processor=processors,
            monitor_progress=windows,
            **{**batch.options, **options},
        )
        if whisper.timestamps:
            return output["segments"]
        return [self._untimed(sequence, len(batch.prompt)) for sequence in output["sequences"]]

    def _untimed(self, sequence: torch.Tensor, prompt_length: int) -> list[dict]:
        """A window decoded without timestamps as ``generate``'s segments: one for all its text, if any."""
        tokens = sequence[prompt_length:]
        ends = (tokens == self.whisper.end_of_text).nonzero()
        tokens = tokens[: int(ends[0]) if len(ends) else len(tokens)]
        if not len(tokens):
            return []
        return [{"tokens": tokens, "start": 0.0, "end": 0.0, "idxs": (prompt_length, prompt_length + len(tokens))}]

    def cut_short(self, window: list[dict], frames: int, spare: int | None = None) -> str | None:
        """Why ``TokenBudget`` cut a window's decoding short (``frames`` long, at most ``spare`` tokens a pass), or
        None: a pass reached its token limit, or its text ends in a repetition loop."""
        for decoding_pass in passes(window, self.whisper.timestamp_begin):
            left = frames - decoding_pass.seek
            limit = token_limit(left) if spare is None else min(token_limit(left), spare)
            if len(decoding_pass.tokens) >= limit:
                return f"the limit of {limit} tokens for {left * MEL_FRAME_S:.1f} s of audio was reached"
            if is_looping(decoding_pass.tokens, self.whisper.end_of_text):
                return "the same words repeated over and over"
        return None

    def is_speech(
        self, hidden: torch.Tensor, prompt: list[int], tokens: list[list[int]], config: InferenceConfig
    ) -> list[bool]:
        """Whisper's no-speech rule (``is_speech``) for each window of a teacher-forced pass."""
        if config.no_speech_threshold is None:
            return [True] * len(tokens)
        no_speech = self.whisper.no_speech_probabilities(hidden, prompt)
        return [
            is_speech(config, no_speech[i], bool(t), partial(self.average_logprob, hidden[i], len(prompt), t))
            for i, t in enumerate(tokens)
        ]

    def average_logprob(self, hidden: torch.Tensor, prompt_length: int, tokens: list[int]) -> float:
        """Average log-probability of ``tokens`` and the end of text after them (Whisper's ``avg_logprob``)."""
        return float(self.whisper.token_logprobs(hidden, prompt_length, tokens).mean())

    def heard(
        self, batch: BatchInput, segments: list[list[dict]], rows: list[int], config: InferenceConfig
    ) -> list[bool]:
        """Whether Whisper's no-speech rule calls each of the windows ``rows`` speech, given their ``segments``."""
        if not rows:
            return []
        windows = [segments[i] for i in rows]
        tokens, first = self.whisper.first_pass(batch.features[rows], windows, batch.prompt)
        return self.is_speech(first.hidden, batch.prompt, tokens, config)

    def search_beams(self, batch: BatchInput, segments: list[list[dict]], config: InferenceConfig) -> list[list[dict]]:
        """Beam search (``beam_size``) on the windows whose greedy decoding has a word (a letter or digit) and is
        speech by Whisper's no-speech rule. On silence and noise a beam follows a repetition to the token limit
        (about 30 s a window with tiny.en on a CPU) where greedy decoding stops at once."""
        windows = [i for i, window in enumerate(segments) if has_word(self.whisper.text(window))]
        speech = [i for i, heard in zip(windows, self.heard(batch, segments, windows, config), strict=True) if heard]
        if not speech:
            return segments
        beamed = self.generate(batch, speech, num_beams=config.beam_size)
        segments = list(segments)
        for i, window in zip(speech, beamed, strict=True):
            segments[i] = window
        return segments
