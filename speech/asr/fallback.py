"""Whisper's temperature fallback: windows whose decoding repeats itself are decoded again with sampling at rising
temperatures, within a token budget per window."""

from __future__ import annotations

from dataclasses import dataclass

from config import InferenceConfig
from speech.asr.decoding import MIN_TOKENS, is_looping, token_limit
from speech.asr.generation import BatchInput, Generator
from speech.asr.passes import passes

_FALLBACK_TEMPERATURE_STEP = 0.2
WINDOW_BUDGET = 1.5
"""Tokens a window's decodings (first and sampled) may generate in all, in its token limits."""


@dataclass(frozen=True)
class Fallback:
    """What the temperature fallback left of a batch: each window's segments and the temperature of the decoding
    they come from, how many windows it decoded again, the sampled decodings it ran and, per window, those its
    token budget left out."""

    segments: list[list[dict]]
    temperatures: list[float]
    windows: int
    decodings: int
    skipped: list[int]


@dataclass
class _Candidates:
    """The fallback's state for a batch: the kept decodings and their temperatures, each window's spare tokens, and
    per window the best decoding that failed only the log-probability test (average log-probability, segments,
    temperature)."""

    segments: list[list[dict]]
    temperatures: list[float]
    spare: list[int]
    unsure: dict[int, tuple[float, list[dict], float]]


class TemperatureFallback:
    """Decodes again, with sampling, the windows of a batch whose decoding is repetitive."""

    def __init__(self, generator: Generator):
        self.generator = generator
        self.whisper = generator.whisper

    def __call__(self, batch: BatchInput, segments: list[list[dict]], config: InferenceConfig) -> Fallback:
        """Windows whose text is repetitive (``compression_ratio_threshold``, or a loop that ``TokenBudget`` cut
        short) are decoded again with sampling at rising temperatures, without the assistant or beams, until a
        decoding is not cut short and passes both the compression and the ``logprob_threshold`` test. Where none
        does, the sampled decoding that was not cut short, does not repeat itself and has the highest average
        log-probability replaces the window's (as faster-whisper picks); where there is none, the first stays. A
        window's decodings share ``WINDOW_BUDGET`` times its token limit: each sampled one may use what the earlier
        ones left, and once that is under ``MIN_TOKENS`` the window's remaining temperatures are skipped."""
        threshold = config.compression_ratio_threshold
        failing = [i for i, window in enumerate(segments) if self._fails(window, threshold)]
        if failing and config.no_speech_threshold is not None:  # Whisper's rule: silence is not decoded again
            speech = self.generator.heard(batch, segments, failing, config)
            failing = [i for i, is_speech in zip(failing, speech, strict=True) if is_speech]
        skipped = [0] * len(segments)
        temperatures = [config.temperature] * len(segments)
        if not failing:
            return Fallback(segments, temperatures, 0, 0, skipped)
        spare = [
            int(WINDOW_BUDGET * token_limit(frames)) - sum(len(segment["tokens"]) for segment in window)
            for frames, window in zip(batch.frames, segments, strict=True)
        ]
        candidates = _Candidates(list(segments), temperatures, spare, {})
        temperature, retried, decodings = config.temperature, len(failing), 0
        while failing and temperature < 1.0:
            temperature = min(1.0, round(temperature + _FALLBACK_TEMPERATURE_STEP, 6))
            affordable = [i for i in failing if spare[i] >= MIN_TOKENS]
            for i in set(failing) - set(affordable):
                skipped[i] += 1
            decodings += len(affordable)
            still = self._sample_again(batch, candidates, affordable, temperature, config)
            failing = sorted(set(failing) - set(affordable) | set(still))
        for i in failing:
            if i in candidates.unsure:
                _, candidates.segments[i], candidates.temperatures[i] = candidates.unsure[i]
        return Fallback(candidates.segments, candidates.temperatures, retried, decodings, skipped)

    def _fails(self, window: list[dict], threshold: float | None) -> bool:
        """Whether a window's decoding needs the temperature fallback (``threshold`` set): repetitive text, by gzip or
        by the loop check (which cuts a loop before gzip can see it). One cut at its token limit but not repetitive
        is dense speech, which sampling would not make shorter."""
        if threshold is None:
            return False
        found = passes(window, self.whisper.timestamp_begin)
        looping = any(is_looping(decoding_pass.tokens, self.whisper.end_of_text) for decoding_pass in found)
        return looping or self.whisper.compression_ratio(window) > threshold

    def _sample_again(
        self,
        batch: BatchInput,
        candidates: _Candidates,
        failing: list[int],
        temperature: float,
        config: InferenceConfig,
    ) -> list[int]:
        """Decode the ``failing`` windows with sampling at ``temperature``, each within its spare tokens (less what
        this decoding uses); a decoding that is not cut short and passes the compression and log-probability tests
        replaces the window's, one that only fails the log-probability test is kept as unsure if it is the best so
        far. Returns the windows that still fail."""
        if not failing:
            return []
        spare = candidates.spare
        sampled = self.generator.generate(batch, failing, temperature, [spare[i] for i in failing])
        tokens, first = self.whisper.first_pass(batch.features[failing], sampled, batch.prompt)
        still = []
        for row, (i, window) in enumerate(zip(failing, sampled, strict=True)):
            cut = self.generator.cut_short(window, batch.frames[i], spare[i])
            spare[i] -= sum(len(segment["tokens"]) for segment in window)
            if cut or self.whisper.compression_ratio(window) > config.compression_ratio_threshold:
                still.append(i)
                continue
            logprob = self.generator.average_logprob(first.hidden[row], len(batch.prompt), tokens[row])
            if logprob >= config.logprob_threshold:
                candidates.segments[i], candidates.temperatures[i] = window, temperature
            else:
                still.append(i)
                if i not in candidates.unsure or logprob > candidates.unsure[i][0]:
                    candidates.unsure[i] = (logprob, window, temperature)
        return still
