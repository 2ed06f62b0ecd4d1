"""Speech recognition with Whisper (transformers), optionally assisted by a smaller draft model: the recording's
windows decoded batch by batch into a ``Transcript``."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from config import InferenceConfig
from speech.asr.decoding import DraftCounts
from speech.asr.fallback import Fallback, TemperatureFallback
from speech.asr.generation import BatchInput, Generator
from speech.asr.language import LANGUAGE_WINDOWS, RecognitionOptions, detect_language, recognition_options
from speech.asr.model import Whisper
from speech.asr.timing import WindowQuality, WordTimer, sentences
from speech.asr.windows import Window, batched, find_holes, split_windows
from speech.audio import SAMPLE_RATE
from speech.speakers.turns import TurnIndex
from speech.text import has_word, is_spaced
from speech.types import Decoding, Progress, Segment, Transcript, Turn

_HOLE_ROUNDS = 3  # the holes of a hole's text are decoded again, this many times deep


@dataclass
class _Tally:
    """What a request's decodings add up to (``Decoding``), and the warnings they raise."""

    assisted: int = 0
    fallback_windows: int = 0
    fallback_decodings: int = 0
    fallback_skipped: int = 0
    truncated: int = 0
    holes: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def count(self, fallback: Fallback) -> None:
        self.fallback_windows += fallback.windows
        self.fallback_decodings += fallback.decodings
        self.fallback_skipped += sum(fallback.skipped)

    def decoding(self, windows: int, drafts: DraftCounts) -> Decoding:
        return Decoding(
            windows=windows,
            assisted_windows=self.assisted,
            drafted_tokens=drafts.drafted,
            accepted_tokens=drafts.accepted,
            fallback_windows=self.fallback_windows,
            fallback_decodings=self.fallback_decodings,
            fallback_decodings_skipped=self.fallback_skipped,
            truncated_windows=self.truncated,
            holes=self.holes,
            seconds=self.seconds,
        )


@dataclass(frozen=True)
class _Request:
    """What a batch's decodings share: the decoder prompt (earlier text, start of transcript, language, task),
    ``generate``'s options, the request's parameters, whether its text is spaced, its tally."""

    prompt: list[int]
    options: dict
    config: InferenceConfig
    spaced: bool
    tally: _Tally


@dataclass(frozen=True)
class _Decoded:
    """A batch's segments per window, each window's quality, the text tokens heard, whether a window fell back to
    sampling."""

    segments: list[list[Segment]]
    quality: list[WindowQuality]
    heard: list[int]
    fell_back: bool


def _window_warnings(window: Window, name: str, cut: str | None, skipped: int) -> list[str]:
    """What the client should know about a window whose text is kept: its decoding was cut short (``cut`` says
    why), or its token budget left out sampled decodings of the temperature fallback."""
    where = f"{name} ({window.offset:.1f}-{window.offset + len(window.samples) / SAMPLE_RATE:.1f} s)"
    warnings = [f"{where}: decoding cut short ({cut}); its text may be incomplete"] if cut else []
    if skipped:
        warnings.append(f"{where}: {skipped} sampled decoding(s) of the temperature fallback skipped, budget spent")
    return warnings


class WhisperTranscriber:
    """Whisper and its optional assistant, loaded once; ``transcribe`` turns a waveform into a ``Transcript``."""

    def __init__(self, whisper: Whisper):
        self.whisper = whisper
        self.generator = Generator(whisper)
        self.fallback = TemperatureFallback(self.generator)
        self.timer = WordTimer(whisper)

    def _assists(self, config: InferenceConfig, batch_size: int) -> bool:
        """Whether a batch is decoded with the assistant: always when asked, for "auto" a single greedy window."""
        if self.whisper.assistant is None or config.assisted is False:
            return False
        return config.assisted is True or (batch_size == 1 and config.temperature == 0 and config.beam_size == 1)

    @torch.inference_mode()
    def transcribe(
        self,
        waveform: np.ndarray,
        config: InferenceConfig,
        options: RecognitionOptions | None = None,
        progress: Progress | None = None,
        on_batch: Callable[[Transcript], None] | None = None,
        speech: Sequence[Turn] | None = None,
    ) -> Transcript:
        """Transcribe a 16 kHz mono waveform window by window, batching windows when not assisted.

        ``generate`` picks the tokens (SDPA attention, nothing kept per step; ``decoding`` for the assistant);
        one teacher-forced decoder pass per batch then dates and scores them (``timing``) and gives the
        log-probabilities of Whisper's no-speech rule. A model decoded without timestamp tokens decodes again the
        holes its text left in the ``speech`` turns of the diarization, when given (``find_holes``).
        ``on_batch`` gets the transcript so far after each batch. ``options``: what ``config`` asks of Whisper,
        as ``speech.validation`` checked it (checked here when not given).
        """
        whisper = self.whisper
        options = options or recognition_options(whisper, config)
        windows = split_windows(waveform, config.chunk_length_s)
        language, probability = options.language, 1.0
        if language is None:
            language, probability = detect_language(whisper, windows[:LANGUAGE_WINDOWS], config.no_speech_threshold)
        spaced = is_spaced(language, options.task)
        generate_options: dict = {"return_timestamps": whisper.timestamps, "return_segments": True}
        generate_options["return_dict_in_generate"] = True
        if whisper.multilingual:
            generate_options.update(language=language, task=options.task)
        context, segments, tally, done = options.prompt, [], _Tally(), 0
        speech_index = None if speech is None else TurnIndex(speech)
        counts = whisper.model.count_drafts() if whisper.assistant is not None else DraftCounts()

        def transcript() -> Transcript:
            decoding = tally.decoding(len(windows), counts)
            return Transcript(tuple(segments), language, probability, decoding, tuple(tally.warnings), spaced)

        for batch in batched(windows, config.effective_batch_size):
            earlier = [whisper.generation_config.prev_sot_token_id, *context] if context else []
            prompt = earlier + whisper.prompt(language, options.task)
            batch_options = generate_options
            if earlier:
                batch_options = {**generate_options, "prompt_ids": torch.tensor(earlier, device=whisper.device)}
            names = [f"window {done + i + 1} of {len(windows)}" for i in range(len(batch))]
            request = _Request(prompt, batch_options, config, spaced, tally)
            decoded = self._decode(batch, done, names, request)
            if not whisper.timestamps and speech_index is not None:
                decoded = self._fill_holes(batch, decoded, done, names, request, speech_index)
            segments += [segment for window in decoded.segments for segment in window]
            if config.condition_on_previous_text:
                context = [] if decoded.fell_back else (context + decoded.heard)[-whisper.max_context :]
            done += len(batch)
            if on_batch is not None:
                on_batch(transcript())
            if progress is not None:
                progress("transcription", done, len(windows))
        return transcript()

    def _decode(self, batch: list[Window], first: int, names: list[str], request: _Request) -> _Decoded:
        """Decode ``batch`` (its first window the recording's ``first``) after the ``request``'s prompt: each
        window's segments with a word (sentences, for a model decoded without timestamp tokens) and the text tokens
        heard. The request's tally counts the decodings and gathers the warnings, naming each window by ``names``."""
        config, tally, whisper = request.config, request.tally, self.whisper
        inputs = whisper.features([window.samples for window in batch], attention_mask=True)
        features = inputs.input_features.to(whisper.device, whisper.dtype)
        assistant = {"assistant_model": whisper.assistant} if self._assists(config, len(batch)) else {}
        tally.assisted += len(batch) if assistant else 0
        mel_frames = inputs.attention_mask.sum(dim=-1).tolist()
        attention_mask = inputs.attention_mask.to(whisper.device)
        with whisper.aligner.keeping_encoder_passes():
            started = time.perf_counter()
            batch_input = BatchInput(features, attention_mask, request.options, request.prompt, mel_frames, first)
            rows = list(range(len(batch)))
            windows_segments = self.generator.generate(batch_input, rows, config.temperature, **assistant)
            if config.beam_size > 1:
                windows_segments = self.generator.search_beams(batch_input, windows_segments, config)
            fell_back = self.fallback(batch_input, windows_segments, config)
            tally.seconds += time.perf_counter() - started
            tally.count(fell_back)
            dated = self.timer.date(
                features, mel_frames, fell_back.segments, fell_back.temperatures, request.prompt, config
            )
        decoded: list[list[Segment]] = []
        heard: list[int] = []
        for i, (window, dated_window) in enumerate(zip(batch, dated, strict=True)):
            decoded.append([])
            for dated_segment in dated_window.segments:
                whole = self.timer.segment(window, dated_segment, request.spaced, dated_window.quality)
                parts = [whole] if whisper.timestamps else sentences(whole.words, request.spaced, dated_window.quality)
                decoded[-1] += [part for part in parts if has_word(part.text)]
                if has_word(whole.text):
                    tokens = dated_segment.segment["tokens"].tolist()
                    heard += [token for token in tokens if token < whisper.end_of_text]
            if decoded[-1]:
                cut = self.generator.cut_short(fell_back.segments[i], mel_frames[i])
                tally.truncated += cut is not None
                tally.warnings += _window_warnings(window, names[i], cut, fell_back.skipped[i])
        quality = [dated_window.quality for dated_window in dated]
        return _Decoded(decoded, quality, heard, fell_back.windows > 0)

    def _fill_holes(
        self,
        batch: list[Window],
        decoded: _Decoded,
        first: int,
        names: list[str],
        request: _Request,
        speech: TurnIndex,
        rounds: int = _HOLE_ROUNDS,
    ) -> _Decoded:
        """``decoded`` with the sentences of each window's holes (``find_holes``), decoded as windows of their own, and
        so on for their holes, ``rounds`` deep. Without timestamp tokens Whisper may go from one sentence to one
        seconds later, leaving out the speech between; its alignment then dates the later sentence's first word at
        the hole's start."""
        words = [[word for segment in window for word in segment.words] for window in decoded.segments]
        found = [find_holes(window, window_words, speech) for window, window_words in zip(batch, words, strict=True)]
        holes = [hole for window_holes in found for hole in window_holes.windows]
        if not holes:
            return decoded
        owners = [i for i, window_holes in enumerate(found) for _ in window_holes.windows]
        hole_names = [f"{names[i]}, {hole.offset:.1f}-{hole.end:.1f} s" for i, hole in zip(owners, holes, strict=True)]
        filled = self._decode(holes, first, hole_names, request)
        if rounds > 1:
            filled = self._fill_holes(holes, filled, first, hole_names, request, speech, rounds - 1)
        request.tally.holes += len(holes)
        merged = {i: list(found[i].words) for i in owners}
        for i, hole_segments in zip(owners, filled.segments, strict=True):
            merged[i] += [word for segment in hole_segments for word in segment.words]
        segments = list(decoded.segments)
        for i, window_words in merged.items():
            window_words.sort(key=lambda word: word.start)
            parts = sentences(window_words, request.spaced, decoded.quality[i])
            segments[i] = [part for part in parts if has_word(part.text)]
        heard = decoded.heard + filled.heard
        return _Decoded(segments, decoded.quality, heard, decoded.fell_back or filled.fell_back)
