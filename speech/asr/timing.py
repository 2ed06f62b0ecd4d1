"""Words and their times: the tokens ``generate`` chose, dated by a teacher-forced pass's cross-attention and scored
by its logits, grouped into words as Whisper groups them, and the segments timed by their words."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers.models.whisper.tokenization_whisper import _split_tokens_on_unicode

from config import InferenceConfig
from speech.asr.generation import is_speech
from speech.asr.model import Whisper
from speech.asr.passes import DatedSegment, DecodingPass, passes
from speech.asr.windows import Window
from speech.audio import SAMPLE_RATE
from speech.text import ends_sentence, has_word
from speech.types import Segment, Word

_MAX_MEDIAN_WORD_S = 0.7  # a word lasts at most twice its segment's median word duration (median capped at this)


@dataclass(frozen=True)
class WindowQuality:
    """What Whisper's own tests say of a window's decoding (OpenAI's ``verbose_json`` segment fields): the average
    log-probability of its first pass (end of text included), the no-speech probability, the gzip compression
    ratio of its text, and the temperature it was decoded at. ``speech``: whether Whisper's no-speech rule keeps
    it."""

    avg_logprob: float
    no_speech_prob: float
    compression_ratio: float
    temperature: float
    speech: bool


@dataclass(frozen=True)
class DatedWindow:
    """A window's segments with their tokens' times and log-probabilities (none if not speech), and its quality."""

    segments: list[DatedSegment]
    quality: WindowQuality


class WordTimer:
    """Dates, scores and groups into words the tokens of a batch of windows, for one ``Whisper``."""

    def __init__(self, whisper: Whisper):
        self.whisper = whisper

    def date(
        self,
        features: torch.Tensor,
        mel_frames: list[int],
        segments: list[list[dict]],
        temperatures: list[float],
        prompt: list[int],
        config: InferenceConfig,
    ) -> list[DatedWindow]:
        """Each window's segments with their tokens' start times (seconds into the window) and log-probabilities.

        ``generate`` decodes a window in passes: when a pass ends on an unfinished segment, the next one starts
        at that segment's opening timestamp, on the window's features from there on, padded with zeros (as
        ``generate`` cuts them); the encoder outputs come from ``generate``'s own passes (``CrossAttentionAligner``).
        """
        whisper = self.whisper
        window_passes = [passes(window, whisper.timestamp_begin) for window in segments]
        first_tokens, first = whisper.first_pass(features, segments, prompt)
        no_speech = whisper.no_speech_probabilities(first.hidden, prompt)
        lead = 0 if whisper.timestamps else 1
        dated: list[DatedWindow] = []
        later: list[tuple[int, DecodingPass]] = []
        for i, window in enumerate(window_passes):
            logprobs = whisper.token_logprobs(first.hidden[i], len(prompt), first_tokens[i])
            quality = _quality(config, no_speech[i], logprobs, whisper.compression_ratio(segments[i]), temperatures[i])
            dated.append(DatedWindow([], quality))
            if window and quality.speech:
                attention = first.attention[i, :, len(prompt) - lead :]
                scores = logprobs[:-1].cpu().numpy()
                dated[i].segments.extend(window[0].dated_segments(attention, mel_frames[i], lead, scores))
                later.extend((i, decoding_pass) for decoding_pass in window[1:])
        if later:
            cuts = [torch.nn.functional.pad(features[i, :, p.seek :], (0, p.seek)) for i, p in later]
            encoder_output = whisper.aligner.encode(torch.stack(cuts))
            decoded = whisper.aligner.decode([prompt + p.tokens for _, p in later], encoder_output)
            for row, (i, p) in enumerate(later):
                scores = whisper.token_logprobs(decoded.hidden[row], len(prompt), p.tokens)[:-1].cpu().numpy()
                attention = decoded.attention[row, :, len(prompt) :]
                dated[i].segments.extend(p.dated_segments(attention, mel_frames[i], 0, scores))
        return dated

    def segment(self, window: Window, dated: DatedSegment, spaced: bool, quality: WindowQuality) -> Segment:
        """A Whisper segment and its words, in recording time, timed by its words.

        Words are split as Whisper splits them (``_words``); a word lasts from its first token's time to the next
        token's, by the cross-attention alignment (``alignment_heads``), and its probability is the mean of its
        tokens' (as faster-whisper and openai-whisper compute it). The segment's text is its words joined by
        spaces, or, in a language written without spaces, the text Whisper decoded. It lasts from its first word's
        start to its last word's end; the model's own timestamps only time a segment without words.
        """
        tokenizer = self.whisper.processor.tokenizer
        length = len(window.samples) / SAMPLE_RATE
        tokens = dated.segment["tokens"].tolist()
        times = [min(max(float(t), 0.0), length) for t in dated.times.tolist()]
        texts = [i for i, token in enumerate(tokens) if token < tokenizer.eos_token_id]  # no timestamps or controls
        runs: list[tuple[list[int], float, float, float]] = []
        for word in self._words([tokens[i] for i in texts], spaced):
            first, last = texts[word[0]], texts[word[-1]]
            end = times[last + 1] if last + 1 < len(times) else times[last]
            probability = float(np.mean(np.exp([dated.logprobs[texts[i]] for i in word])))
            runs.append(([tokens[texts[i]] for i in word], times[first], end, probability))
        # The alignment stretches a segment's last word to the closing timestamp: cap word durations.
        durations = [end - start for _, start, end, _ in runs if end > start]
        longest = 2 * min(_MAX_MEDIAN_WORD_S, float(np.median(durations))) if durations else 0.0
        words = []
        for ids, start, end, probability in runs:
            text = tokenizer.decode(ids).strip()
            if text:
                end = min(max(start, end), start + longest)
                offset = window.offset
                words.append(Word(text, round(offset + start, 3), round(offset + end, 3), round(probability, 4)))
        text = " ".join(word.text for word in words) if spaced else tokenizer.decode([tokens[i] for i in texts]).strip()
        if words:
            return _segment(text, words, quality)
        start = min(float(dated.segment["start"]), length)
        end = min(max(float(dated.segment["end"]), start), length)
        return _segment(text, words, quality, round(window.offset + start, 3), round(window.offset + end, 3))

    def _words(self, tokens: list[int], spaced: bool) -> list[list[int]]:
        """The positions of the text ``tokens`` grouped into words as Whisper groups them: a run of tokens starting
        with a space (punctuation stays with its word) or, in a language written without spaces, each run that
        decodes to whole characters (one without a letter or digit, punctuation, joins the word before)."""
        tokenizer = self.whisper.processor.tokenizer
        words: list[list[int]] = []
        if spaced:
            for i, piece in enumerate(tokenizer.convert_ids_to_tokens(tokens)):
                if words and not piece.startswith("Ġ"):
                    words[-1].append(i)
                else:
                    words.append([i])
            return words
        for text, _, positions in zip(*_split_tokens_on_unicode(tokenizer, tokens), strict=True):
            if words and not has_word(text):
                words[-1] += positions
            else:
                words.append(positions)
        return words


def _quality(
    config: InferenceConfig, no_speech: float, logprobs: torch.Tensor, compression_ratio: float, temperature: float
) -> WindowQuality:
    """A window's quality figures, and whether Whisper's no-speech rule keeps it (``generation.is_speech``)."""
    average = float(logprobs.mean())
    speech = is_speech(config, no_speech, len(logprobs) > 1, lambda: average)
    return WindowQuality(round(average, 4), round(no_speech, 4), round(compression_ratio, 3), temperature, speech)


def _segment(
    text: str, words: Sequence[Word], quality: WindowQuality, start: float | None = None, end: float | None = None
) -> Segment:
    """A segment of ``words`` with its window's ``quality``, timed by its words unless ``start`` and ``end`` are
    given."""
    start = words[0].start if start is None else start
    end = words[-1].end if end is None else end
    return Segment(
        text,
        start,
        end,
        tuple(words),
        quality.avg_logprob,
        quality.no_speech_prob,
        quality.compression_ratio,
        quality.temperature,
    )


def sentences(words: Sequence[Word], spaced: bool, quality: WindowQuality) -> list[Segment]:
    """``words`` (of a window decoded without timestamp tokens) cut after each word that ends a sentence, each part
    timed by its words."""
    parts: list[list[Word]] = [[]]
    for word in words:
        parts[-1].append(word)
        if ends_sentence(word.text):
            parts.append([])
    joiner = " " if spaced else ""
    return [_segment(joiner.join(w.text for w in part), part, quality) for part in parts if part]
