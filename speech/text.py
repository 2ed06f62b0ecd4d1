"""Language-aware text rules shared by recognition, attribution and the writers: sentence ends, spacing, words."""

from __future__ import annotations

_SENTENCE_ENDS = (".", "?", "!", "\u3002", "\uff1f", "\uff01")

UNSPACED_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})
"""Languages written without spaces between words: Whisper splits them into words by character."""


def ends_sentence(text: str) -> bool:
    """Whether ``text`` (a word) ends a sentence: a full stop, question or exclamation mark (Latin or CJK), before
    any closing quote or bracket."""
    return text.rstrip().rstrip("\"')]\u300d").endswith(_SENTENCE_ENDS)


def is_spaced(language: str | None, task: str = "transcribe") -> bool:
    """Whether the words of a transcript are separated by spaces: always in a translation (English), otherwise
    unless ``language`` is written without them."""
    return task == "translate" or language not in UNSPACED_LANGUAGES


def has_word(text: str) -> bool:
    """Whether ``text`` has a letter or digit (not just "." or "...")."""
    return any(character.isalnum() for character in text)
