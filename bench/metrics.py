"""Transcript scoring helpers: normalised word errors, speaker-attributed errors (cpWER), annotations for DER.

English is normalised as Whisper's evaluations do; other languages are case-folded with punctuation and symbols
removed, and those written without spaces (zh, ja...) are compared character by character (CER), Chinese in
simplified characters (Whisper writes traditional ones as often).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping

import numpy as np
from opencc import OpenCC
from pyannote.core import Annotation, Segment
from rapidfuzz.distance import Levenshtein
from scipy.optimize import linear_sum_assignment
from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

# Whisper's English normaliser (numbers, contractions, punctuation, case); no British/American spelling map.
_NORMALIZER = EnglishTextNormalizer({})
_SIMPLIFIED = OpenCC("t2s")


CHARACTER_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})
"""Languages written without spaces: scored by characters (CER), not words."""


def normalize(text: str, language: str = "en") -> list[str]:
    """The units errors are counted in: English words as Whisper's evaluations compare them ("Seven fifteen?" and
    "715." are both ["715"]); other languages' case-folded words without punctuation, or their characters."""
    if language == "en":
        return _NORMALIZER(text).split()
    folded = unicodedata.normalize("NFKC", _SIMPLIFIED.convert(text) if language == "zh" else text).casefold()
    words = "".join(" " if unicodedata.category(c)[0] in "PSZ" else c for c in folded).split()
    return list("".join(words)) if language in CHARACTER_LANGUAGES else words


def word_errors(reference: str, hypothesis: str, language: str = "en") -> int:
    """Substitutions + deletions + insertions between two texts, in words (characters for ``CHARACTER_LANGUAGES``)."""
    return Levenshtein.distance(normalize(reference, language), normalize(hypothesis, language))


def cp_word_errors(reference: Mapping[str, str], hypothesis: Mapping[str, str], language: str = "en") -> int:
    """Errors of the best one-to-one matching of hypothesis speakers to reference speakers (each speaker's words)."""
    ref_texts, hyp_texts = list(reference.values()), list(hypothesis.values())
    size = max(len(ref_texts), len(hyp_texts))
    ref_texts += [""] * (size - len(ref_texts))
    hyp_texts += [""] * (size - len(hyp_texts))
    cost = np.array([[word_errors(r, h, language) for h in hyp_texts] for r in ref_texts])
    rows, cols = linear_sum_assignment(cost)
    return int(cost[rows, cols].sum())


def texts_by_speaker(turns: Iterable[tuple[str | None, str]]) -> dict[str, str]:
    """Join the text of (speaker, text) turns per speaker."""
    texts: dict[str, list[str]] = {}
    for speaker, text in turns:
        texts.setdefault(str(speaker), []).append(text)
    return {speaker: " ".join(parts) for speaker, parts in texts.items()}


def annotation(turns: Iterable[tuple[str | None, float, float]]) -> Annotation:
    result = Annotation()
    for speaker, start, end in turns:
        if end > start:
            result[Segment(start, end), len(result)] = str(speaker)
    return result
