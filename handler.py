"""Hugging Face Inference Endpoints custom handler: speaker-attributed transcripts from one request.

A request goes one way: validate (every parameter, before any audio is decoded) -> decode -> diarize -> identify
(known speakers) -> transcribe -> attribute (words to speakers) -> serialize (``speech.formats``).
"""

from __future__ import annotations

import dataclasses
import os
import time

os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "0")  # no telemetry unless the operator turns it on

from pathlib import Path

import numpy as np
import torch
import transformers

from config import InferenceConfig, ModelSettings
from service.streaming import Emit, LiveTranscript
from speech import heap
from speech.asr.model import Whisper
from speech.asr.transcriber import WhisperTranscriber
from speech.attribution import attribute_transcript
from speech.audio import Audio, decode, pyannote_sample_path
from speech.channels import label_channel, merge_diarizations, merge_transcripts, suppress_crosstalk
from speech.errors import EndpointError, InferenceError, InferenceTimeoutError, ModelLoadError
from speech.formats import toolkit_json
from speech.speakers.pipeline import diarize, load_pipeline
from speech.speakers.voiceprints import Identification, SpeakerEmbedder, identify
from speech.types import NO_DIARIZATION, AttributedWord, Diarization, Progress, Response, SpeakerSegment, Transcript
from speech.validation import ValidRequest, validate
from tools.offline_bundle import BUNDLE_DIR

transformers.logging.set_verbosity_error()  # generate()'s notices about options it sets itself
transformers.logging.disable_progress_bar()


class EndpointHandler:
    """Loads Whisper, the optional assistant and the diarization pipeline once (and warms them up on GPU: see
    ``ModelSettings.warm_up``); each call serves one request.

    ``path`` is the repository folder the Inference Endpoints toolkit passes; models come from ``ModelSettings``.
    """

    def __init__(self, path: str = "", settings: ModelSettings | None = None):
        self.settings = settings = settings or ModelSettings()
        for model in (settings.asr_model, settings.assistant_model, settings.diarization_model):
            if model and Path(model).is_relative_to(BUNDLE_DIR) and not Path(model).exists():
                raise ModelLoadError(f"{model} is missing: build the offline bundle with `make bundle`")
        device, dtype, token = settings.torch_device, settings.torch_dtype, settings.token
        self.whisper = Whisper(settings.asr_model, settings.assistant_model, device, dtype, token)
        self.transcriber = WhisperTranscriber(self.whisper)
        self.diarization = (
            load_pipeline(
                settings.diarization_model, token, device, settings.diarization_single_pass, settings.diarization_steps
            )
            if settings.diarization_model
            else None
        )
        self.embedder = SpeakerEmbedder(self.diarization) if self.diarization is not None else None
        if self.settings.warms_up:
            sample = pyannote_sample_path().read_bytes()
            for assisted in (False, "auto"):  # both decoding paths: their first use loads different kernels
                self({"inputs": sample, "parameters": {"assisted": assisted}})

    def __call__(self, data: dict, progress: Progress | None = None, emit: Emit | None = None) -> dict:
        """``{"inputs": base64 text | bytes, "parameters": {...}}`` -> the toolkit JSON: text, chunks and speaker
        turns (``speech.formats.toolkit_json``); see ``respond``."""
        return toolkit_json(self.respond(data, progress, emit))

    def respond(self, data: dict, progress: Progress | None = None, emit: Emit | None = None) -> Response:
        """One request, as a typed ``Response``.

        ``progress(stage, completed, total)`` is called before decoding and as diarization and transcription
        advance (every batch); an exception it raises stops the request there (e.g. when the client has gone).
        With ``emit``, the transcript also goes out while it is decoded (``service.streaming.LiveTranscript``): the
        diarization runs first, so each batch of windows is attributed to its final speakers at once.
        Every failure comes out as an ``EndpointError`` whose message stands alone (the Inference Endpoints
        toolkit answers ``{"error": str(exception)}``); nothing else escapes.
        """
        try:
            return self._respond(data, self._checkpoint(progress), emit)
        except EndpointError:
            raise
        except torch.OutOfMemoryError:
            raise InferenceError("out of memory while processing the recording; try a shorter one") from None
        except Exception as error:
            raise InferenceError(f"processing the request failed ({type(error).__name__})") from error

    def _respond(self, data: dict, checkpoint: Progress, emit: Emit | None) -> Response:
        """validate -> decode -> diarize -> identify -> transcribe -> attribute; with ``multichannel``, each
        channel is diarized and transcribed on its own (``speech.channels``)."""
        request = validate(data, self.whisper, self.embedder, self.settings)
        config, settings = request.config, self.settings
        checkpoint("decoding", 0, 1)
        audio = decode(  # 16 bits in a mapped file: read as it is worked through, let go of at every batch
            request.audio,
            settings.max_audio_duration_s,
            settings.decode_timeout_s,
            channels=config.multichannel,
            pcm16=True,
        )
        checkpoint = _releasing(audio, checkpoint)
        channels, notes = audio.channels, []
        if len(channels) > 1:
            suppress_crosstalk(audio.waveform)
        elif config.multichannel:
            notes.append("multichannel: the recording has a single channel; it was transcribed as channel 0")
        diarization = self._diarize(channels, config, checkpoint)
        model = self.embedder and self.embedder.model
        identified = identify(diarization, request.known, config.speaker_match_threshold, model)
        live = LiveTranscript(emit) if emit is not None else None

        def decoded(partial: Transcript) -> None:
            kept, word_speakers, turns = self._attribute(partial, identified.diarization)
            live.update(kept.text, word_speakers, turns, final=False)

        on_batch = decoded if live is not None and not config.multichannel else None  # channels: streamed at the end
        heard: dict[int, Transcript] = {}
        for channel, waveform in enumerate(channels):
            mark = channel if config.multichannel else None
            speech = [turn for turn in identified.diarization.turns if turn.channel == mark]
            heard[channel] = self.transcriber.transcribe(
                waveform,
                config,
                request.recognition,
                checkpoint,
                on_batch,
                None if self.diarization is None else speech,
            )
        checkpoint("merge", 0, 1)
        return self._response(request, self._merged(heard, config), identified, audio.duration, live, notes)

    def _diarize(self, channels: list[np.ndarray], config: InferenceConfig, checkpoint: Progress) -> Diarization:
        """Who speaks when: in the recording, or in each channel apart with ``multichannel``."""
        if self.diarization is None:
            return NO_DIARIZATION
        hints = (config.num_speakers, config.min_speakers, config.max_speakers)
        found = [diarize(self.diarization, waveform, *hints, checkpoint) for waveform in channels]
        if not config.multichannel:
            return found[0]
        return merge_diarizations([label_channel(d, channel) for channel, d in enumerate(found)])

    @staticmethod
    def _merged(heard: dict[int, Transcript], config: InferenceConfig) -> Transcript:
        """The transcript of the recording: of its one mix, or of its channels (``multichannel``)."""
        return merge_transcripts(heard) if config.multichannel else heard[0]

    def _attribute(
        self, transcript: Transcript, diarization: Diarization
    ) -> tuple[Transcript, list[str | None], list[SpeakerSegment]]:
        """The transcript less its segments away from speech (with diarization), each word's speaker, and the
        speaker turns."""
        return attribute_transcript(transcript, diarization, self.diarization is not None)

    def _response(
        self,
        request: ValidRequest,
        heard: Transcript,
        identified: Identification,
        duration: float,
        live: LiveTranscript | None,
        notes: list[str],
    ) -> Response:
        """The words attributed to the identified speakers, with what the client should know."""
        config, diarization = request.config, identified.diarization
        transcript, word_speakers, turns = self._attribute(heard, diarization)
        if live is not None:
            live.update(transcript.text, word_speakers, turns, final=True)
        warnings = notes + list(transcript.warnings)
        if self.diarization is not None:
            unspoken = len(heard.segments) - len(transcript.segments)
            if unspoken:
                warnings.append(f"{unspoken} transcribed segment(s) away from any detected speech were left out")
            warnings += _speaker_count_warnings(config, len({turn.speaker for turn in diarization.turns}))
            warnings += diarization.notes
            warnings += self._threshold_warnings(request)
        words = tuple(
            AttributedWord(word, speaker, diarization.confidence(speaker, word.start, word.end))
            for word, speaker in zip(transcript.words, word_speakers, strict=True)
        )
        turns = tuple(
            dataclasses.replace(turn, confidence=diarization.confidence(turn.speaker, turn.start, turn.end))
            for turn in turns
        )
        parameters = {**config.model_dump(), "batch_size": config.effective_batch_size}
        parameters["language"] = transcript.language
        voiceprints = tuple(identified.voiceprints) if config.return_embeddings else None
        overlaps = tuple(diarization.overlaps)
        return Response(
            transcript,
            words,
            turns,
            overlaps,
            duration,
            tuple(warnings),
            parameters,
            tuple(identified.matches),
            voiceprints,
        )

    def _threshold_warnings(self, request: ValidRequest) -> list[str]:
        """Say when known speakers were matched with the default threshold of another embedding model."""
        config = request.config
        if (
            not request.known
            or self.embedder.threshold is not None
            or "speaker_match_threshold" in config.model_fields_set
        ):
            return []
        return [
            f"speaker_match_threshold {config.speaker_match_threshold:g} is calibrated for the CAM++ embedding of "
            f"the offline default, not for this pipeline's ({self.embedder.model}): names may be missed or wrong; "
            "calibrate one with bench/calibrate_voiceprints.py (docs/deployment.md) and pass it"
        ]

    def _checkpoint(self, progress: Progress | None) -> Progress:
        """A progress hook that also enforces ``inference_timeout_s``, then calls the caller's ``progress``."""
        limit = self.settings.inference_timeout_s
        deadline = None if limit is None else time.monotonic() + limit

        def checkpoint(stage: str, completed: int, total: int) -> None:
            if deadline is not None and time.monotonic() > deadline:
                raise InferenceTimeoutError(f"processing took longer than the {limit:g} s limit (during {stage})")
            if progress is not None:
                progress(stage, completed, total)

        return checkpoint


def _releasing(audio: Audio, checkpoint: Progress) -> Progress:
    """``checkpoint``, first letting go of the recording's pages read so far (``Audio.release``) and of the heaps'
    free pages (``speech.heap.trim``): at every batch, so the process holds what is in use, not all it has touched."""

    def step(stage: str, completed: int, total: int) -> None:
        audio.release()
        heap.trim()
        checkpoint(stage, completed, total)

    return step


def _speaker_count_warnings(config: InferenceConfig, found: int) -> list[str]:
    """Say when the speaker-count hints could not be met (e.g. a short recording cannot hold 12 voices)."""
    low = config.num_speakers or config.min_speakers
    high = config.num_speakers or config.max_speakers
    if (low is None or found >= low) and (high is None or found <= high):
        return []
    names = ("num_speakers", "min_speakers", "max_speakers")
    asked = ", ".join(f"{name}={getattr(config, name)}" for name in names if getattr(config, name) is not None)
    return [f"{asked} could not be met: {found} speaker(s) found in the recording"]
