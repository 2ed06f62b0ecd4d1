"""Hugging Face Inference Endpoints custom handler: speaker-attributed transcripts from one request."""

from __future__ import annotations

import os
import time

os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "0")  # no telemetry unless the operator turns it on

from pathlib import Path

import torch
import transformers

from config import InferenceConfig, ModelSettings
from service.streaming import Emit, LiveTranscript
from speech.asr.transcriber import Transcript, WhisperTranscriber
from speech.attribution import attribute
from speech.audio import decode, pyannote_sample_path, request_bytes
from speech.errors import EndpointError, InferenceError, InferenceTimeoutError, ModelLoadError, RequestError
from speech.formats import WRITERS
from speech.speakers.pipeline import diarize, load_pipeline
from speech.speakers.voiceprints import SpeakerEmbedder, identify, references
from speech.types import NO_DIARIZATION, Diarization, Progress, SpeakerSegment
from tools.offline_bundle import BUNDLE_DIR

transformers.logging.set_verbosity_error()  # generate()'s notices about options it sets itself
transformers.logging.disable_progress_bar()


class EndpointHandler:
    """Loads Whisper, the optional assistant and the diarization pipeline once (and warms them up on GPU: see
    ``ModelSettings.warm_up``); each call serves one request.

    ``path`` is the repository folder the Inference Endpoints toolkit passes; models come from ``ModelSettings``.
    """

    def __init__(self, path: str = "", settings: ModelSettings | None = None):
        self.settings = settings or ModelSettings()
        for model in (self.settings.asr_model, self.settings.assistant_model, self.settings.diarization_model):
            if model and Path(model).is_relative_to(BUNDLE_DIR) and not Path(model).exists():
                raise ModelLoadError(f"{model} is missing: build the offline bundle with `make bundle`")
        device, dtype, token = self.settings.torch_device, self.settings.torch_dtype, self.settings.token
        self.transcriber = WhisperTranscriber(
            self.settings.asr_model, self.settings.assistant_model, device, dtype, token
        )
        self.diarization = (
            load_pipeline(self.settings.diarization_model, token, device, self.settings.diarization_single_pass)
            if self.settings.diarization_model
            else None
        )
        self.embedder = SpeakerEmbedder(self.diarization) if self.diarization is not None else None
        if self.settings.warms_up:
            sample = pyannote_sample_path().read_bytes()
            for assisted in (False, "auto"):  # both decoding paths: their first use loads different kernels
                self({"inputs": sample, "parameters": {"assisted": assisted}})

    def __call__(self, data: dict, progress: Progress | None = None, emit: Emit | None = None) -> dict:
        """``{"inputs": base64 text | bytes, "parameters": {...}}`` -> text, chunks and speaker turns.

        ``progress(stage, completed, total)`` is called before decoding and as diarization and transcription
        advance (every batch); an exception it raises stops the request there (e.g. when the client has gone).
        With ``emit``, the transcript also goes out while it is decoded (``streaming.LiveTranscript``): the
        diarization runs first, so each batch of windows is attributed to its final speakers at once.
        Every failure comes out as an ``EndpointError`` whose message stands alone (the Inference Endpoints
        toolkit answers ``{"error": str(exception)}``); nothing else escapes.
        """
        try:
            return self._serve(data, progress, emit)
        except EndpointError:
            raise
        except torch.OutOfMemoryError:
            raise InferenceError("out of memory while processing the recording; try a shorter one") from None
        except Exception as error:
            raise InferenceError(f"processing the request failed ({type(error).__name__})") from error

    def _serve(self, data: dict, progress: Progress | None, emit: Emit | None) -> dict:
        """One request, from validation to the response; ``__call__`` turns its failures into project errors."""
        if not isinstance(data, dict) or "inputs" not in data:
            raise RequestError('the request must be an object with "inputs" (base64 audio) and optional "parameters"')
        config = InferenceConfig.from_parameters(data.get("parameters"))
        checkpoint = self._checkpoint(progress)
        checkpoint("decoding", 0, 1)
        known = references(config, self.embedder, self.settings.max_audio_duration_s, self.settings.decode_timeout_s)
        data_bytes = request_bytes(data["inputs"], self.settings.max_request_bytes)
        audio = decode(data_bytes, self.settings.max_audio_duration_s, self.settings.decode_timeout_s)
        self.transcriber.validate(config)
        diarization = (
            diarize(
                self.diarization,
                audio.waveform,
                config.num_speakers,
                config.min_speakers,
                config.max_speakers,
                checkpoint,
            )
            if self.diarization is not None
            else NO_DIARIZATION
        )
        identified = identify(diarization, known, config.speaker_match_threshold, self.embedder and self.embedder.model)
        diarization = identified.diarization

        def merge(transcript: Transcript) -> tuple[Transcript, int, list[str | None], list[SpeakerSegment]]:
            """The transcript less its segments away from speech (with diarization) and their number, each word's
            speaker, and the speaker turns."""
            unspoken = 0
            if self.diarization is not None:
                transcript, unspoken = transcript.within_speech(diarization.turns)
            separator = " " if transcript.spaced else ""
            word_speakers, turns = attribute(
                transcript.words, diarization.turns, audio.duration, diarization.overlaps, separator
            )
            return transcript, unspoken, word_speakers, turns

        live = LiveTranscript(emit) if emit is not None else None

        def decoded(partial: Transcript) -> None:
            kept, _, word_speakers, turns = merge(partial)
            live.update(kept.text, word_speakers, turns, final=False)

        transcript = self.transcriber.transcribe(
            audio.waveform,
            config,
            checkpoint,
            decoded if live is not None else None,
            diarization.turns if self.diarization is not None else None,
        )
        checkpoint("merge", 0, 1)
        warnings = list(transcript.warnings)
        transcript, unspoken, word_speakers, speakers = merge(transcript)
        if live is not None:
            live.update(transcript.text, word_speakers, speakers, final=True)
        if self.diarization is not None:
            if unspoken:
                warnings.append(f"{unspoken} transcribed segment(s) away from any detected speech were left out")
            found = len({turn.speaker for turn in diarization.turns})
            warnings += _speaker_count_warnings(config, found)
        response = {
            "text": transcript.text,
            "chunks": [{"text": c.text, "timestamp": [c.start, c.end]} for c in transcript.chunks],
            "speakers": [
                {
                    "speaker": s.speaker,
                    "text": s.text,
                    "timestamp": [round(s.start, 3), round(s.end, 3)],
                    "confidence": _confidence(diarization, s.speaker, s.start, s.end),
                }
                for s in speakers
            ],
            "overlaps": [
                {"speakers": list(o.speakers), "timestamp": [round(o.start, 3), round(o.end, 3)]}
                for o in diarization.overlaps
            ],
            "language": transcript.language,
            "language_probability": round(transcript.language_probability, 3),
            "duration": round(audio.duration, 3),
            "decoding": transcript.decoding.to_dict(),
            "warnings": warnings,
            "parameters": {
                **config.model_dump(),
                "batch_size": config.effective_batch_size,
                "language": transcript.language,
            },
            **identified.response_fields(config),
        }
        words = [
            {
                "word": w.text,
                "start": w.start,
                "end": w.end,
                "speaker": speaker,
                "speaker_confidence": _confidence(diarization, speaker, w.start, w.end),
            }
            for w, speaker in zip(transcript.words, word_speakers, strict=True)
        ]
        if config.response_format != "json":  # subtitle cues follow the words, asked for or not
            response[config.response_format] = WRITERS[config.response_format]({**response, "words": words}, "audio")
        if config.return_timestamps == "word":
            response["words"] = words
        return response

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


def _confidence(diarization: Diarization, speaker: str | None, start: float | None, end: float | None) -> float | None:
    """How sure the assignment of ``speaker`` to [start, end] is, from 0 to 1 (``speaker_confidence``)."""
    return None if diarization.evidence is None else diarization.evidence.confidence(speaker, start, end)


def _speaker_count_warnings(config: InferenceConfig, found: int) -> list[str]:
    """Say when the speaker-count hints could not be met (e.g. a short recording cannot hold 12 voices)."""
    low = config.num_speakers or config.min_speakers
    high = config.num_speakers or config.max_speakers
    if (low is None or found >= low) and (high is None or found <= high):
        return []
    names = ("num_speakers", "min_speakers", "max_speakers")
    asked = ", ".join(f"{name}={getattr(config, name)}" for name in names if getattr(config, name) is not None)
    return [f"{asked} could not be met: {found} speaker(s) found in the recording"]
