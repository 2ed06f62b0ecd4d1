"""Speech recognition with Whisper (transformers), optionally assisted by a smaller draft model."""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from transformers import AutoConfig, WhisperForCausalLM, WhisperForConditionalGeneration, WhisperProcessor
from transformers.generation.logits_process import LogitsProcessorList
from transformers.models.whisper.tokenization_whisper import LANGUAGES, TO_LANGUAGE_CODE, _split_tokens_on_unicode

from config import InferenceConfig
from speech.asr.alignment import FRAME_S, MEL_FRAME_S, CrossAttentionAligner, DecoderPass, token_times
from speech.asr.decoding import (
    MIN_TOKENS,
    DraftCounts,
    GumbelSampling,
    TokenBudget,
    WeightMajorProjection,
    WhisperForDraftedGeneration,
    WindowRows,
    is_looping,
    token_limit,
)
from speech.audio import SAMPLE_RATE
from speech.errors import InvalidParametersError, ModelLoadError
from speech.formats import ends_sentence, is_spaced
from speech.speakers.turns import TurnIndex
from speech.types import Chunk, Progress, Turn

_QUIET_SEARCH_S = 5.0  # a long recording is cut at the quietest point of the last seconds of each window
_ENERGY_FRAME_S = 0.02
_ENERGY_SMOOTHING_S = 0.2
_MAX_MEDIAN_WORD_S = 0.7  # a word lasts at most twice its segment's median word duration (median capped at this)
_SPEECH_MARGIN_S = 0.5  # word timings from the alignment lag or lead the diarization's speech turns by up to this
_FALLBACK_TEMPERATURE_STEP = 0.2
_WINDOW_BUDGET = 1.5  # tokens a window's decodings (first and sampled) may generate in all, in its token limits
_LANGUAGE_WINDOWS = 3  # the language is detected on the first windows (faster-whisper's language_detection_segments)
_HOLE_S = 1.0  # a pause between the words of a window decoded without timestamp tokens that may hide left-out speech
_HOLE_SPEECH_S = 0.5  # ... does if the diarization finds this much speech in it
_HOLE_ROUNDS = 3  # the holes of a hole's text are decoded again, this many times deep


@dataclass(frozen=True)
class Window:
    """A stretch of the recording decoded as one Whisper input; ``offset`` in seconds."""

    offset: float
    samples: np.ndarray

    @property
    def end(self) -> float:
        return self.offset + len(self.samples) / SAMPLE_RATE


@dataclass(frozen=True)
class _BatchInput:
    """Windows decoded together: their features and attention mask, ``generate``'s options, the decoder
    prompt (earlier text, start of transcript, language, task) their tokens follow, each window's length in mel
    frames and the index of the first window in the recording."""

    features: torch.Tensor
    attention_mask: torch.Tensor
    options: dict
    prompt: list[int]
    frames: list[int]
    first: int


@dataclass(frozen=True)
class Decoding:
    """How the windows were decoded: how many with the assistant, its drafted and accepted tokens, how many were
    decoded again because their text repeated itself or was cut short (temperature fallback), the sampled
    decodings that took and those their token budget left out, how many windows kept a decoding cut short
    (``decoding.TokenBudget``), how many holes in the text were decoded again (``find_holes``), the time."""

    windows: int
    assisted_windows: int
    drafted_tokens: int
    accepted_tokens: int
    fallback_windows: int
    fallback_decodings: int
    fallback_decodings_skipped: int
    truncated_windows: int
    holes: int
    seconds: float

    def to_dict(self) -> dict:
        rate = self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else None
        return {
            "assisted": self.assisted_windows > 0,
            "windows": self.windows,
            "assisted_windows": self.assisted_windows,
            "drafted_tokens": self.drafted_tokens,
            "accepted_tokens": self.accepted_tokens,
            "acceptance_rate": None if rate is None else round(rate, 3),
            "fallback_windows": self.fallback_windows,
            "fallback_decodings": self.fallback_decodings,
            "fallback_decodings_skipped": self.fallback_decodings_skipped,
            "truncated_windows": self.truncated_windows,
            "holes": self.holes,
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class Segment:
    """A Whisper segment: its text and timestamps (``chunk``) and its words."""

    chunk: Chunk
    words: list[Chunk]

    def is_near(self, turns: TurnIndex, margin_s: float) -> bool:
        """Whether a word of this segment lies within ``margin_s`` of one of the speech ``turns``."""
        return any(turns.overlapping(word.start - margin_s, word.end + margin_s) for word in self.words)


@dataclass(frozen=True)
class Transcript:
    """What Whisper heard, in time order: its segments with their words, and the language.

    ``language_probability``: the detected language's probability among the model's languages; 1.0 when the
    language was given or the model is English-only.
    """

    segments: list[Segment]
    language: str
    language_probability: float
    decoding: Decoding
    warnings: tuple[str, ...] = ()
    """What the client should know about how the audio was decoded (e.g. a window cut short)."""
    spaced: bool = True
    """Whether the text separates words with spaces: not for languages written without them (``formats.is_spaced``)."""

    @property
    def chunks(self) -> list[Chunk]:
        return [segment.chunk for segment in self.segments]

    @property
    def words(self) -> list[Chunk]:
        return [word for segment in self.segments for word in segment.words]

    @property
    def text(self) -> str:
        return (" " if self.spaced else "").join(chunk.text for chunk in self.chunks)

    def within_speech(self, turns: Sequence[Turn]) -> tuple[Transcript, int]:
        """This transcript without the segments that lie away from every speech turn of the diarization (what
        Whisper makes up from noise), and the number of segments left out."""
        index = TurnIndex(turns)
        kept = [segment for segment in self.segments if segment.is_near(index, _SPEECH_MARGIN_S)]
        return replace(self, segments=kept), len(self.segments) - len(kept)


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


def _has_word(text: str) -> bool:
    """Whether ``text`` has a letter or digit (not just "." or "...")."""
    return any(character.isalnum() for character in text)


def _sentences(words: Sequence[Chunk], spaced: bool) -> list[Segment]:
    """``words`` (of a window decoded without timestamp tokens) cut after each word that ends a sentence, each part
    timed by its words."""
    parts: list[list[Chunk]] = [[]]
    for word in words:
        parts[-1].append(word)
        if ends_sentence(word.text):
            parts.append([])
    joiner = " " if spaced else ""
    return [
        Segment(Chunk(joiner.join(w.text for w in words), words[0].start, words[-1].end), words)
        for words in parts
        if words
    ]


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

    def count(self, fallback: _Fallback) -> None:
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
    """A batch's segments per window, the text tokens heard, whether a window fell back to sampling."""

    segments: list[list[Segment]]
    heard: list[int]
    fell_back: bool


@dataclass(frozen=True)
class Holes:
    """A window's words (a sentence's first word dated at a hole moved to the hole's end) and its holes."""

    words: list[Chunk]
    windows: list[Window]


def find_holes(window: Window, words: list[Chunk], speech: TurnIndex) -> Holes:
    """The pauses of ``_HOLE_S`` or more between a window's ``words`` (and its ends) that hold ``_HOLE_SPEECH_S`` of
    ``speech``, as windows to decode again (in pauses without speech, Whisper makes up text: "Thank you." in a
    ringing tone). A sentence's first word alone before a hole is where the alignment put the next sentence's
    first word when the text jumped over the hole: it moves to the hole's end."""
    if not words:
        return Holes([], [])
    words = list(words)
    for i in range(len(words) - 1):
        opens = i == 0 or ends_sentence(words[i - 1].text)
        if opens and not ends_sentence(words[i].text) and words[i + 1].start - words[i].end >= _HOLE_S:
            length = words[i].end - words[i].start
            words[i] = replace(words[i], start=round(words[i + 1].start - length, 3), end=words[i + 1].start)
    bounds = [window.offset, *(time for word in words for time in (word.start, word.end)), window.end]
    holes = []
    for start, end in zip(bounds[::2], bounds[1::2], strict=True):
        if end - start >= _HOLE_S and speech.covered(start, end) >= _HOLE_SPEECH_S:
            first, last = round((start - window.offset) * SAMPLE_RATE), round((end - window.offset) * SAMPLE_RATE)
            holes.append(Window(start, window.samples[first:last]))
    return Holes(words, holes)


@dataclass(frozen=True)
class _Pass:
    """The segments one pass of ``generate`` decoded in a window, starting ``seek`` mel frames into it."""

    segments: list[dict]
    seek: int

    @property
    def tokens(self) -> list[int]:
        return [token for segment in self.segments for token in segment["tokens"].tolist()]

    def dated_segments(self, attention: torch.Tensor, mel_frames: int, lead: int) -> list[tuple[dict, np.ndarray]]:
        """Each segment with its tokens' start times in the window; ``attention`` has a row per token from ``lead``
        rows before the first (the prompt's <|notimestamps|>, which takes the audio before the first word as a
        timestamp token would)."""
        rows = attention[:, : lead + len(self.tokens)]
        times = token_times(rows, mel_frames - self.seek)[lead:] + self.seek * MEL_FRAME_S
        bounds = np.cumsum([0] + [len(segment["tokens"]) for segment in self.segments])
        return [(segment, times[a:b]) for segment, a, b in zip(self.segments, bounds[:-1], bounds[1:], strict=True)]


def _passes(segments: list[dict], timestamp_begin: int) -> list[_Pass]:
    """Group a window's segments by the pass of ``generate`` that decoded them (token indices restart per pass)."""
    groups: list[list[dict]] = []
    for segment in segments:
        if groups and segment["idxs"][0] >= groups[-1][-1]["idxs"][1]:
            groups[-1].append(segment)
        else:
            groups.append([segment])
    passes = []
    for group in groups:
        opening = int(group[0]["tokens"][0]) - timestamp_begin  # the pass's first token is a timestamp
        start = float(group[0]["start"]) - max(0, opening) * FRAME_S
        passes.append(_Pass(group, 0 if not passes else round(start / MEL_FRAME_S)))
    return passes


@dataclass(frozen=True)
class _Fallback:
    """What the temperature fallback left of a batch: each window's segments, how many windows it decoded again,
    the sampled decodings it ran and, per window, those its token budget left out."""

    segments: list[list[dict]]
    windows: int
    decodings: int
    skipped: list[int]


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
            WhisperForDraftedGeneration.from_pretrained(model, dtype=dtype, token=token, attn_implementation="sdpa")
            .to(device)
            .eval()
        )
        if device.type == "cpu":
            self.model.proj_out = WeightMajorProjection(self.model.proj_out)
        self.multilingual = bool(getattr(self.model.generation_config, "is_multilingual", False))
        # A model whose timestamp tokens do not mark time (the bundle's Whisper base: ``offline_bundle.BASE``) is
        # decoded without them; its segments are sentences timed by their words' alignment.
        self.timestamps = getattr(self.model.generation_config, "timestamp_tokens", True)
        self.aligner = CrossAttentionAligner(self.model)
        self.model.encode = self.aligner.encode  # the fallback's and beams' windows are encoded once
        self.assistant = self._load_assistant(assistant, token) if assistant else None
        if self.assistant is not None:
            self.model.set_assistant(self.assistant)

    def _load_assistant(self, name: str, token: str | None) -> torch.nn.Module:
        """Load a full Whisper or a decoder-only (distil-whisper style) draft model compatible with the main one."""
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

    def _generation_options(self, config: InferenceConfig, windows: list[Window]) -> tuple[dict, str, float]:
        """Keyword arguments for ``generate`` (the assistant aside), the recording's spoken language (given, or
        detected on its first ``windows``) and its probability. With ``task: translate`` the text is English."""
        if config.assisted is True and self.assistant is None:
            raise InvalidParametersError(
                "parameters: assisted decoding was asked for, but no assistant model is loaded (set ASSISTANT_MODEL)"
            )
        options: dict = {
            "return_timestamps": self.timestamps,
            "return_segments": True,
            "return_dict_in_generate": True,
        }
        if not self.multilingual:
            if config.task == "translate":
                raise InvalidParametersError(
                    "parameters: task 'translate' needs a multilingual model; this one is English-only"
                )
            if config.language is not None and self.language_code(config.language) != "en":
                raise InvalidParametersError(f"parameters: language {config.language!r}: this model is English-only")
            return options, "en", 1.0
        if config.language is not None:
            language, probability = self.language_code(config.language), 1.0
        else:
            language, probability = self._detect_language(windows[:_LANGUAGE_WINDOWS], config.no_speech_threshold)
        options.update(language=language, task=config.task)
        return options, language, probability

    def _detect_language(self, windows: list[Window], no_speech_threshold: float | None) -> tuple[str, float]:
        """Whisper's language detection, on speech: one decoder step after start of transcript on each window gives
        the probabilities of the language tokens and of the no-speech token. The windows whose no-speech
        probability is at most ``no_speech_threshold`` (all of them when none is, or with no threshold) vote: their
        language probabilities are summed. The winner, with its average probability over the voting windows."""
        generation = self.model.generation_config
        features = self.processor.feature_extractor(
            [window.samples for window in windows], sampling_rate=SAMPLE_RATE, return_tensors="pt"
        ).input_features.to(self.device, self.dtype)
        start = torch.full((len(windows), 1), self._start, device=self.device)
        logits = self.model(input_features=features, decoder_input_ids=start, use_cache=False).logits[:, -1].float()
        language_ids = torch.tensor(list(generation.lang_to_id.values()), device=logits.device)
        probabilities = logits[:, language_ids].softmax(dim=-1)
        if no_speech_threshold is not None:
            no_speech = logits.softmax(dim=-1)[:, generation.no_timestamps_token_id - 1]
            if bool((no_speech <= no_speech_threshold).any()):
                probabilities = probabilities[no_speech <= no_speech_threshold]
        votes = probabilities.sum(dim=0)
        best = int(votes.argmax())
        token = self.processor.tokenizer.convert_ids_to_tokens(int(language_ids[best]))
        return token.strip("<|>"), float(votes[best]) / len(probabilities)

    def _assists(self, config: InferenceConfig, batch_size: int) -> bool:
        """Whether a batch is decoded with the assistant: always when asked, for "auto" a single greedy window."""
        if self.assistant is None or config.assisted is False:
            return False
        return config.assisted is True or (batch_size == 1 and config.temperature == 0 and config.beam_size == 1)

    def validate(self, config: InferenceConfig) -> None:
        """Raise the ``InvalidParametersError`` that ``transcribe`` would raise for ``config`` alone (prompt, language,
        task, assistant), before any audio is processed."""
        self._prompt_tokens(config.prompt)
        self._generation_options(config.model_copy(update={"language": config.language or "en"}), [])

    @torch.inference_mode()
    def transcribe(
        self,
        waveform: np.ndarray,
        config: InferenceConfig,
        progress: Progress | None = None,
        on_batch: Callable[[Transcript], None] | None = None,
        speech: Sequence[Turn] | None = None,
    ) -> Transcript:
        """Transcribe a 16 kHz mono waveform window by window, batching windows when not assisted.

        ``generate`` picks the tokens (SDPA attention, nothing kept per step; ``decoding`` for the assistant);
        one teacher-forced decoder pass per batch then dates them (``alignment``) and gives the
        log-probabilities of Whisper's no-speech rule. A model decoded without timestamp tokens decodes again the
        holes its text left in the ``speech`` turns of the diarization, when given (``find_holes``).
        ``on_batch`` gets the transcript so far after each batch.
        """
        windows = split_windows(waveform, config.chunk_length_s)
        context = self._prompt_tokens(config.prompt)
        segments: list[Segment] = []
        tally = _Tally()
        options: dict | None = None
        language, language_probability, spaced = "en", 1.0, True
        speech_index = None if speech is None else TurnIndex(speech)
        done = 0
        counts = self.model.count_drafts() if self.assistant is not None else DraftCounts()

        def transcript() -> Transcript:
            decoding = tally.decoding(len(windows), counts)
            return Transcript(
                list(segments), language, language_probability, decoding, tuple(tally.warnings), spaced=spaced
            )

        for batch in _batched(windows, config.effective_batch_size):
            if options is None:
                options, language, language_probability = self._generation_options(config, windows)
                spaced = is_spaced(language, config.task)
            earlier = [self.model.generation_config.prev_sot_token_id, *context] if context else []
            prompt = earlier + self._prompt(language, config.task)
            batch_options = {**options, "prompt_ids": torch.tensor(earlier, device=self.device)} if earlier else options
            names = [f"window {done + i + 1} of {len(windows)}" for i in range(len(batch))]
            request = _Request(prompt, batch_options, config, spaced, tally)
            decoded = self._decode(batch, done, names, request)
            if not self.timestamps and speech_index is not None:
                decoded = self._fill_holes(batch, decoded, done, names, request, speech_index)
            segments += [segment for window in decoded.segments for segment in window]
            if config.condition_on_previous_text:
                context = [] if decoded.fell_back else (context + decoded.heard)[-self._max_context :]
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
        config, tally = request.config, request.tally
        inputs = self.processor.feature_extractor(
            [window.samples for window in batch],
            sampling_rate=SAMPLE_RATE,
            return_tensors="pt",
            return_attention_mask=True,
        )
        features = inputs.input_features.to(self.device, self.dtype)
        assistant = {"assistant_model": self.assistant} if self._assists(config, len(batch)) else {}
        tally.assisted += len(batch) if assistant else 0
        mel_frames = inputs.attention_mask.sum(dim=-1).tolist()
        attention_mask = inputs.attention_mask.to(self.device)
        with self.aligner.keeping_encoder_passes():
            started = time.perf_counter()
            batch_input = _BatchInput(features, attention_mask, request.options, request.prompt, mel_frames, first)
            windows_segments = self._generate(batch_input, list(range(len(batch))), config.temperature, **assistant)
            if config.beam_size > 1:
                windows_segments = self._search_beams(batch_input, windows_segments, config)
            fell_back = self._fall_back(batch_input, windows_segments, config)
            tally.seconds += time.perf_counter() - started
            tally.count(fell_back)
            dated = self._date_tokens(features, mel_frames, fell_back.segments, request.prompt, config)
        decoded: list[list[Segment]] = []
        heard: list[int] = []
        for i, (window, window_segments) in enumerate(zip(batch, dated, strict=True)):
            decoded.append([])
            for segment, times in window_segments:
                whole = self._segment(window, segment, times, request.spaced)
                parts = [whole] if self.timestamps else _sentences(whole.words, request.spaced)
                decoded[-1] += [part for part in parts if _has_word(part.chunk.text)]
                if _has_word(whole.chunk.text):
                    heard += [token for token in segment["tokens"].tolist() if token < self._end_of_text]
            if decoded[-1]:
                cut = self._cut_short(fell_back.segments[i], mel_frames[i])
                tally.truncated += cut is not None
                tally.warnings += _window_warnings(window, names[i], cut, fell_back.skipped[i])
        return _Decoded(decoded, heard, fell_back.windows > 0)

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
            segments[i] = [part for part in _sentences(window_words, request.spaced) if _has_word(part.chunk.text)]
        return _Decoded(segments, decoded.heard + filled.heard, decoded.fell_back or filled.fell_back)

    def _search_beams(
        self, batch: _BatchInput, segments: list[list[dict]], config: InferenceConfig
    ) -> list[list[dict]]:
        """Beam search (``beam_size``) on the windows whose greedy decoding has a word (a letter or digit) and is
        speech by Whisper's no-speech rule. On silence and noise a beam follows a repetition to the token limit
        (about 30 s a window with tiny.en on a CPU) where greedy decoding stops at once."""
        windows = [i for i, window in enumerate(segments) if _has_word(self._text(window))]
        speech = [i for i, heard in zip(windows, self._heard(batch, segments, windows, config), strict=True) if heard]
        if not speech:
            return segments
        beamed = self._generate(batch, speech, num_beams=config.beam_size)
        segments = list(segments)
        for i, window in zip(speech, beamed, strict=True):
            segments[i] = window
        return segments

    def _fall_back(self, batch: _BatchInput, segments: list[list[dict]], config: InferenceConfig) -> _Fallback:
        """Whisper's temperature fallback: windows whose text is repetitive (``compression_ratio_threshold``, or a
        loop that ``TokenBudget`` cut short) are decoded again with sampling at rising temperatures, without the
        assistant or beams, until a decoding is not cut short and passes both the compression and the
        ``logprob_threshold`` test. Where none does, the sampled decoding that was not cut short, does not repeat
        itself and has the highest average log-probability replaces the window's (as faster-whisper picks); where
        there is none, the first stays. A window's decodings share ``_WINDOW_BUDGET`` times its token limit: each
        sampled one may use what the earlier ones left, and once that is under ``MIN_TOKENS`` the window's
        remaining temperatures are skipped."""
        threshold = config.compression_ratio_threshold
        failing = [i for i, window in enumerate(segments) if self._fails(window, threshold)]
        if failing and config.no_speech_threshold is not None:  # Whisper's rule: silence is not decoded again
            speech = self._heard(batch, segments, failing, config)
            failing = [i for i, is_speech in zip(failing, speech, strict=True) if is_speech]
        skipped = [0] * len(segments)
        if not failing:
            return _Fallback(segments, 0, 0, skipped)
        segments, temperature = list(segments), config.temperature
        retried, decodings = len(failing), 0
        spare = [
            int(_WINDOW_BUDGET * token_limit(frames)) - sum(len(segment["tokens"]) for segment in window)
            for frames, window in zip(batch.frames, segments, strict=True)
        ]
        unsure: dict[int, tuple[float, list[dict]]] = {}
        while failing and temperature < 1.0:
            temperature = min(1.0, round(temperature + _FALLBACK_TEMPERATURE_STEP, 6))
            affordable = [i for i in failing if spare[i] >= MIN_TOKENS]
            for i in set(failing) - set(affordable):
                skipped[i] += 1
            decodings += len(affordable)
            still = self._sample_again(batch, segments, affordable, temperature, config, unsure, spare)
            failing = sorted(set(failing) - set(affordable) | set(still))
        for i in failing:
            if i in unsure:
                segments[i] = unsure[i][1]
        return _Fallback(segments, retried, decodings, skipped)

    def _fails(self, window: list[dict], threshold: float | None) -> bool:
        """Whether a window's decoding needs the temperature fallback (``threshold`` set): repetitive text, by gzip or
        by the loop check (which cuts a loop before gzip can see it). One cut at its token limit but not repetitive
        is dense speech, which sampling would not make shorter."""
        if threshold is None:
            return False
        passes = _passes(window, self._timestamp_begin)
        looping = any(is_looping(decoding_pass.tokens, self._end_of_text) for decoding_pass in passes)
        return looping or self._compression_ratio(window) > threshold

    def _sample_again(
        self,
        batch: _BatchInput,
        segments: list[list[dict]],
        failing: list[int],
        temperature: float,
        config: InferenceConfig,
        unsure: dict[int, tuple[float, list[dict]]],
        spare: list[int],
    ) -> list[int]:
        """Decode the ``failing`` windows with sampling at ``temperature``, each within its ``spare`` tokens (less
        what this decoding uses); a decoding that is not cut short and passes the compression and log-probability
        tests replaces the window's ``segments``, one that only fails the log-probability test is kept in
        ``unsure`` (window -> average log-probability, segments) if it is the best so far. Returns the windows
        that still fail."""
        if not failing:
            return []
        sampled = self._generate(batch, failing, temperature, [spare[i] for i in failing])
        tokens, first = self._first_pass(batch.features[failing], sampled, batch.prompt)
        still = []
        for row, (i, window) in enumerate(zip(failing, sampled, strict=True)):
            cut = self._cut_short(window, batch.frames[i], spare[i])
            spare[i] -= sum(len(segment["tokens"]) for segment in window)
            if cut or self._compression_ratio(window) > config.compression_ratio_threshold:
                still.append(i)
                continue
            logprob = self._average_logprob(first.hidden[row], len(batch.prompt), tokens[row])
            if logprob >= config.logprob_threshold:
                segments[i] = window
            else:
                still.append(i)
                if i not in unsure or logprob > unsure[i][0]:
                    unsure[i] = (logprob, window)
        return still

    def _generate(
        self,
        batch: _BatchInput,
        rows: list[int],
        temperature: float = 0.0,
        spare: list[int] | None = None,
        **options,
    ) -> list[list[dict]]:
        """Decode the windows ``rows`` of ``batch`` with ``options`` over the batch's own: greedy (or beams), or
        sampled at ``temperature`` (``GumbelSampling``, seeded by window and temperature), every pass within its
        token limit (``TokenBudget``; at most ``spare`` tokens per window when given). Their segments."""
        windows = WindowRows([batch.frames[i] for i in rows])
        timestamp_begin = self._timestamp_begin if self.timestamps else None
        processors = LogitsProcessorList([TokenBudget(windows, timestamp_begin, self._end_of_text, spare)])
        if temperature > 0:
            seeds = [(batch.first + i) * 1000 + round(temperature * 100) for i in rows]
            processors.append(GumbelSampling(windows, temperature, seeds))
        output = self.model.generate(
            batch.features[rows],
            attention_mask=batch.attention_mask[rows],
            logits_processor=processors,
            monitor_progress=windows,
            **{**batch.options, **options},
        )
        if self.timestamps:
            return output["segments"]
        return [self._untimed(sequence, len(batch.prompt)) for sequence in output["sequences"]]

    def _untimed(self, sequence: torch.Tensor, prompt_length: int) -> list[dict]:
        """A window decoded without timestamps as ``generate``'s segments: one for all its text, if any."""
        tokens = sequence[prompt_length:]
        ends = (tokens == self._end_of_text).nonzero()
        tokens = tokens[: int(ends[0]) if len(ends) else len(tokens)]
        if not len(tokens):
            return []
        return [{"tokens": tokens, "start": 0.0, "end": 0.0, "idxs": (prompt_length, prompt_length + len(tokens))}]

    def _cut_short(self, window: list[dict], frames: int, spare: int | None = None) -> str | None:
        """Why ``TokenBudget`` cut a window's decoding short (``frames`` long, at most ``spare`` tokens a pass), or
        None: a pass reached its token limit, or its text ends in a repetition loop."""
        for decoding_pass in _passes(window, self._timestamp_begin):
            left = frames - decoding_pass.seek
            limit = token_limit(left) if spare is None else min(token_limit(left), spare)
            if len(decoding_pass.tokens) >= limit:
                return f"the limit of {limit} tokens for {left * MEL_FRAME_S:.1f} s of audio was reached"
            if is_looping(decoding_pass.tokens, self._end_of_text):
                return "the same words repeated over and over"
        return None

    def _heard(
        self, batch: _BatchInput, segments: list[list[dict]], rows: list[int], config: InferenceConfig
    ) -> list[bool]:
        """Whether Whisper's no-speech rule calls each of the windows ``rows`` speech, given their ``segments``."""
        if not rows:
            return []
        windows = [segments[i] for i in rows]
        tokens, first = self._first_pass(batch.features[rows], windows, batch.prompt)
        return self._is_speech(first.hidden, batch.prompt, tokens, config)

    def _first_pass(
        self, features: torch.Tensor, windows: list[list[dict]], prompt: list[int]
    ) -> tuple[list[list[int]], DecoderPass]:
        """The tokens of each window's first ``generate`` pass, and a teacher-forced decoder pass over them."""
        tokens = [_passes(window, self._timestamp_begin)[0].tokens if window else [] for window in windows]
        return tokens, self.aligner.decode([prompt + t for t in tokens], self.aligner.encode(features))

    @property
    def _timestamp_begin(self) -> int:
        return self.model.generation_config.no_timestamps_token_id + 1

    @property
    def _start(self) -> int:
        return self.model.generation_config.decoder_start_token_id

    @property
    def _end_of_text(self) -> int:
        return self.model.generation_config.eos_token_id

    @property
    def _max_context(self) -> int:
        """Tokens of earlier text a window may read (Whisper's: half its context, less the start-of-previous token)."""
        return self.model.config.max_target_positions // 2 - 1

    def _prompt_tokens(self, prompt: str | None) -> list[int]:
        """The text tokens of the request's ``prompt``; an error if it is longer than a window may read or spells
        out a special token (``<|endoftext|>``...)."""
        if not prompt or not prompt.strip():
            return []
        try:
            tokens = self.processor.tokenizer.get_prompt_ids(prompt).tolist()[1:]  # after start of previous
        except ValueError as error:
            raise InvalidParametersError(f"parameters: prompt: {error}") from None
        if len(tokens) > self._max_context:
            raise InvalidParametersError(
                f"parameters: prompt is {len(tokens)} tokens long; Whisper reads at most {self._max_context}"
            )
        return tokens

    def _text(self, window: list[dict]) -> str:
        tokens = [token for segment in window for token in segment["tokens"].tolist()]
        return self.processor.tokenizer.decode(tokens, skip_special_tokens=True)

    def _compression_ratio(self, window: list[dict]) -> float:
        """How much gzip shrinks the window's text: about 1.5-2 for speech, well above 2.4 for a repetition loop."""
        text = self._text(window).encode()
        return len(text) / len(zlib.compress(text)) if text else 0.0

    def _average_logprob(self, hidden: torch.Tensor, prompt_length: int, tokens: list[int]) -> float:
        """Average log-probability of ``tokens`` and the end of text after them, from a teacher-forced pass's
        last hidden states (one row per position of prompt and tokens)."""
        scored = torch.tensor([*tokens, self._end_of_text], device=hidden.device)
        logits = self.model.proj_out(hidden[prompt_length - 1 : prompt_length + len(tokens)])
        return float(logits.float().log_softmax(dim=-1).gather(1, scored[:, None]).mean())

    def _prompt(self, language: str, task: str) -> list[int]:
        """The tokens each window starts with after any earlier text: start of transcript, then language and task
        if multilingual."""
        generation = self.model.generation_config
        prompt = [self._start]
        if self.multilingual:
            prompt += [generation.lang_to_id[f"<|{language}|>"], generation.task_to_id[task]]
        return prompt if self.timestamps else [*prompt, generation.no_timestamps_token_id]

    def _date_tokens(
        self,
        features: torch.Tensor,
        mel_frames: list[int],
        segments: list[list[dict]],
        prompt: list[int],
        config: InferenceConfig,
    ) -> list[list[tuple[dict, np.ndarray]]]:
        """Each window's segments with their tokens' start times (seconds into the window); none if non-speech.

        ``generate`` decodes a window in passes: when a pass ends on an unfinished segment, the next one starts
        at that segment's opening timestamp, on the window's features from there on, padded with zeros (as
        ``generate`` cuts them); the encoder outputs come from ``generate``'s own passes (``CrossAttentionAligner``).
        """
        passes = [_passes(window_segments, self._timestamp_begin) for window_segments in segments]

        first_tokens, first = self._first_pass(features, segments, prompt)
        lead = 0 if self.timestamps else 1
        speech = self._is_speech(first.hidden, prompt, first_tokens, config)
        dated: list[list[tuple[dict, np.ndarray]]] = []
        later: list[tuple[int, _Pass]] = []
        for i, window in enumerate(passes):
            dated.append([])
            if window and speech[i]:
                attention = first.attention[i, :, len(prompt) - lead :]
                dated[i].extend(window[0].dated_segments(attention, mel_frames[i], lead))
                later.extend((i, decoding_pass) for decoding_pass in window[1:])
        if later:
            cuts = [torch.nn.functional.pad(features[i, :, p.seek :], (0, p.seek)) for i, p in later]
            encoder_output = self.aligner.encode(torch.stack(cuts))
            decoded = self.aligner.decode([prompt + p.tokens for _, p in later], encoder_output)
            for row, (i, p) in enumerate(later):
                dated[i].extend(p.dated_segments(decoded.attention[row, :, len(prompt) :], mel_frames[i], 0))
        return dated

    def _is_speech(
        self, hidden: torch.Tensor, prompt: list[int], tokens: list[list[int]], config: InferenceConfig
    ) -> list[bool]:
        """Whisper's rule per window: non-speech when the no-speech probability is above ``no_speech_threshold``
        and the decoding's average log-probability (raw logits, end of text included) below ``logprob_threshold``."""
        if config.no_speech_threshold is None:
            return [True] * len(tokens)
        no_speech_token = self.model.generation_config.no_timestamps_token_id - 1
        start = prompt.index(self._start)
        no_speech = self.model.proj_out(hidden[:, start]).float().softmax(dim=-1)[:, no_speech_token].tolist()
        return [
            no_speech[i] <= config.no_speech_threshold
            or not window_tokens
            or self._average_logprob(hidden[i], len(prompt), window_tokens) >= config.logprob_threshold
            for i, window_tokens in enumerate(tokens)
        ]

    def _segment(self, window: Window, segment: dict, token_starts: np.ndarray, spaced: bool) -> Segment:
        """A Whisper segment and its words, in recording time.

        Words are split as Whisper splits them (``_words``); a word lasts from its first token's time to the next
        token's, by the cross-attention alignment (``alignment_heads``). The segment's text is its words joined by
        spaces, or, in a language written without spaces, the text Whisper decoded.
        """
        tokenizer = self.processor.tokenizer
        length = len(window.samples) / SAMPLE_RATE
        tokens = segment["tokens"].tolist()
        times = [min(max(float(t), 0.0), length) for t in token_starts.tolist()]
        texts = [i for i, token in enumerate(tokens) if token < tokenizer.eos_token_id]  # no timestamps or controls
        runs: list[tuple[list[int], float, float]] = []
        for word in self._words([tokens[i] for i in texts], spaced):
            first, last = texts[word[0]], texts[word[-1]]
            end = times[last + 1] if last + 1 < len(times) else times[last]
            runs.append(([tokens[texts[i]] for i in word], times[first], end))
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
        text = " ".join(word.text for word in words) if spaced else tokenizer.decode([tokens[i] for i in texts]).strip()
        return Segment(Chunk(text, round(window.offset + start, 3), round(window.offset + end, 3)), words)

    def _words(self, tokens: list[int], spaced: bool) -> list[list[int]]:
        """The positions of the text ``tokens`` grouped into words as Whisper groups them: a run of tokens starting
        with a space (punctuation stays with its word) or, in a language written without spaces, each run that
        decodes to whole characters (one without a letter or digit, punctuation, joins the word before)."""
        tokenizer = self.processor.tokenizer
        words: list[list[int]] = []
        if spaced:
            for i, piece in enumerate(tokenizer.convert_ids_to_tokens(tokens)):
                if words and not piece.startswith("Ġ"):
                    words[-1].append(i)
                else:
                    words.append([i])
            return words
        for text, _, positions in zip(*_split_tokens_on_unicode(tokenizer, tokens), strict=True):
            if words and not _has_word(text):
                words[-1] += positions
            else:
                words.append(positions)
        return words
