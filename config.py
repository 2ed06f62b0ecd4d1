"""Settings: which models the endpoint loads (environment) and the options of one request (``parameters``)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Annotated, Literal

import torch
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from speech.errors import InvalidParametersError
from speech.speakers.voiceprints import MATCH_THRESHOLD, MAX_AUDIO_REFERENCES, MAX_EMBEDDING_REFERENCES
from tools.offline_bundle import BUNDLE_DIR, DIARIZATION_DIR_NAME, WHISPER_DIR_NAME


class ModelSettings(BaseSettings):
    """Models and limits of the endpoint, read from environment variables (e.g. ``ASR_MODEL``).

    With no environment set, everything runs on the embedded offline bundle (``python -m tools.offline_bundle``).
    """

    model_config = SettingsConfigDict(extra="ignore", use_attribute_docstrings=True)

    asr_model: str = str(BUNDLE_DIR / WHISPER_DIR_NAME)
    """Whisper checkpoint: a hub id (e.g. ``openai/whisper-large-v3``) or a local folder."""

    assistant_model: str | None = None
    """Assistant for speculative decoding: a decoder-only draft (``WhisperForCausalLM``) or a full Whisper
    (e.g. ``distil-whisper/distil-large-v3``) sharing the main model's tokenizer; empty = none. Unset: the
    draft the bundle has for ``ASR_MODEL`` (the folder ``<ASR_MODEL>-draft``: the model's own decoder, its
    output projection in int8 on CPU), else none."""

    diarization_model: str | None = str(BUNDLE_DIR / DIARIZATION_DIR_NAME)
    """pyannote pipeline: a hub id (e.g. ``pyannote/speaker-diarization-community-1``) or a local folder with
    ``config.yaml``; empty = no diarization (every word gets ``speaker: null``)."""

    diarization_single_pass: bool | None = None
    """Run the CAM++ embedding network once over the recording, in 12 s tiles, instead of once per 10 s window:
    about 3x less diarization time, the same quality on the evaluation recordings (``docs/benchmarks.md``). Unset
    = whenever the pipeline's embedding is CAM++ (the offline default); ``true`` = an error for other pipelines;
    ``false`` = per window, as pyannote."""

    diarization_steps: bool = True
    """After the clustering, look for the voices it missed and give each single-speaker stretch to the speaker it
    sounds like (``speech.speakers.missed_speakers``, ``speech.speakers.resegmentation``), with any pyannote
    ``SpeakerDiarization`` pipeline, community-1's included; ``false`` = the pipeline's turns as they come."""

    warm_up: bool | None = None
    """Run a real recording (pyannote's 30 s sample) through the endpoint at load, with plain and with assisted
    decoding, so that the first request does not pay for loading the device's kernels; unset = on GPU only."""

    hf_token: SecretStr | None = None
    """Hugging Face token, needed for gated models such as pyannote's pipelines."""

    device: str = "auto"
    """Torch device (``cpu``, ``cuda``, ``cuda:1``...); ``auto`` = the first GPU if there is one, else the CPU."""

    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    """Whisper weights' dtype; ``auto`` = float16 on GPU, float32 on CPU."""

    max_request_bytes: int = Field(default=200 * 1024 * 1024, ge=1)
    """Largest accepted audio file, in bytes (checked before base64 decoding)."""

    max_file_bytes: int = Field(default=4 * 1024**3, ge=1)
    """Largest audio file handed in as an open file rather than bytes, in bytes: a job's upload (``POST /jobs``,
    kept on disk as it arrives) and the CLI's files. Long recordings are big: 2 hours of 16 kHz mono WAV is 230 MB,
    of 48 kHz stereo 1.4 GB."""

    max_audio_duration_s: float = Field(default=4 * 3600, gt=0)
    """Longest accepted recording, in seconds (checked while decoding)."""

    decode_timeout_s: float = Field(default=120.0, gt=0)
    """Longest time decoding one file may take, in seconds (checked between decoded frames)."""

    inference_timeout_s: float | None = Field(default=3600.0, gt=0)
    """Longest time one request may spend in the models, in seconds (checked between batches); unset = no limit."""

    @field_validator("assistant_model", "diarization_model", mode="before")
    @classmethod
    def _empty_means_none(cls, value: object) -> object:
        return None if isinstance(value, str) and value.strip().lower() in ("", "none") else value

    @model_validator(mode="after")
    def _draft_of_the_asr_model(self) -> ModelSettings:
        if "assistant_model" not in self.model_fields_set:
            draft = Path(f"{self.asr_model}-draft")
            self.assistant_model = str(draft) if draft.is_dir() else None
        return self

    @property
    def torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

    @property
    def torch_dtype(self) -> torch.dtype:
        if self.dtype == "auto":
            return torch.float16 if self.torch_device.type == "cuda" else torch.float32
        return getattr(torch, self.dtype)

    @property
    def warms_up(self) -> bool:
        return self.torch_device.type != "cpu" if self.warm_up is None else self.warm_up

    @property
    def token(self) -> str | None:
        return self.hf_token.get_secret_value() if self.hf_token else None


SpeakerName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=64)]


class KnownSpeakerEmbedding(BaseModel):
    """A voiceprint as the response's ``speaker_embeddings`` gives it; ``speaker`` is the name to give."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    speaker: SpeakerName
    model: str = Field(max_length=200)
    embedding: list[float] = Field(min_length=1, max_length=8192)


MAX_SPEAKERS = 255
"""The largest speaker-count hint: pyannote counts the speakers of each frame in 8 bits."""


class InferenceConfig(BaseModel):
    """Options of one request, given as ``parameters`` in the request body. Unknown keys are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    task: Literal["transcribe", "translate"] = "transcribe"
    """``transcribe`` keeps the spoken language; ``translate`` outputs English (multilingual models only)."""

    language: str | None = None
    """Spoken language as a code or name (``en``, ``french``). One language per request: every window is decoded
    in it. Unset = detected from speech (multilingual models): the first windows, up to three, that Whisper's
    no-speech probability calls speech vote with their language probabilities. With ``task: translate`` it is
    the language spoken, and the text is English."""

    batch_size: int | None = Field(default=None, ge=1, le=64)
    """Audio windows decoded together; unset = 8, or 1 with ``assisted: true`` or ``condition_on_previous_text``
    (which allow no other value)."""

    temperature: float = Field(default=0.0, ge=0.0, le=1.0)
    """Sampling temperature; 0 = deterministic decoding (greedy, or beam search with ``beam_size`` > 1)."""

    beam_size: int = Field(default=1, ge=1, le=10)
    """Beam search width at temperature 0 (Whisper's and faster-whisper's ``beam_size``); 1 = greedy. 5 makes
    fewer errors on noisy or unusual voices and decodes several times slower, without the assistant."""

    assisted: Literal[True, False, "auto"] = "auto"
    """Speculative decoding with the assistant model (``ASSISTANT_MODEL``): the same text, fewer steps of the
    main decoder. ``true`` decodes every window with it, one at a time, and so the holes decoded again (an error
    if none is loaded; the temperature fallback samples without it); ``auto`` uses it where it is faster: a batch
    of a single window, greedy; ``false`` never."""

    chunk_length_s: float = Field(default=30.0, ge=5.0, le=30.0)
    """Longest audio window Whisper decodes at once, in seconds; long audio is cut at quiet points."""

    no_speech_threshold: float | None = Field(default=0.6, ge=0.0, le=1.0)
    """A window whose no-speech probability is above this and whose ``logprob_threshold`` test fails is dropped
    as silence or noise (Whisper's rule); unset = never drop."""

    logprob_threshold: float = Field(default=-1.0, le=0.0)
    """Average token log-probability under which a decoding counts as unreliable."""

    compression_ratio_threshold: float | None = Field(default=2.4, gt=1.0)
    """A window whose text compresses better than this with gzip (a decoding stuck repeating itself) is decoded
    again with sampling at rising temperatures (0.2 up to 1.0, Whisper's fallback) until a decoding is neither
    repetitive nor below ``logprob_threshold``; if none is, the non-repetitive one with the highest average
    log-probability replaces it (the first stays if all repeat themselves). Unset = never."""

    prompt: str | None = Field(default=None, max_length=2000)
    """Text Whisper reads before each window, as if it had been said just before: names, terms and spelling to
    follow (Whisper's ``initial_prompt``; at most 223 tokens)."""

    condition_on_previous_text: bool = False
    """Each window reads the text of the windows before it (after ``prompt``; Whisper's long-form setting): more
    consistent names and style, windows decoded one at a time. After a window that needed the temperature
    fallback, the next one starts afresh (no earlier text, no prompt), so a repetition does not spread."""

    return_timestamps: Literal["chunk", "word"] = "chunk"
    """``word`` adds ``words: [{word, start, end, speaker}]`` to the response."""

    response_format: Literal["json", "txt", "srt", "vtt", "rttm"] = "json"
    """Also write the transcript as SubRip or WebVTT subtitles (a cue never spans two speakers), RTTM speaker
    turns or ``SPEAKER: text`` lines, returned as a string under that name in the JSON response (e.g.
    ``"srt": "1\\n00:00:00,497 --> ..."``): Inference Endpoints answer JSON only."""

    multichannel: bool = False
    """Transcribe and diarize each channel of the recording on its own (a call with one side per channel), then
    merge them in time order: every word, segment and turn carries its ``channel`` and speaker labels name it
    (``CH0`` for a channel of one speaker, ``CH1_SPEAKER_00``... for one of several). Speech heard on several
    channels (bleed, line echo) goes to the loudest. The speaker-count hints bound each channel. At most 8
    channels; a mono recording runs as channel 0, with a warning. Unset = the channels are mixed down."""

    num_speakers: int | None = Field(default=None, ge=1, le=MAX_SPEAKERS)
    """Exact number of speakers, when known. Excludes ``min_speakers``/``max_speakers``."""

    min_speakers: int | None = Field(default=None, ge=1, le=MAX_SPEAKERS)
    """Lower bound on the number of speakers."""

    max_speakers: int | None = Field(default=None, ge=1, le=MAX_SPEAKERS)
    """Upper bound on the number of speakers."""

    known_speaker_names: list[SpeakerName] | None = Field(default=None, max_length=MAX_AUDIO_REFERENCES)
    """Names of the voices in ``known_speaker_references``, in the same order (OpenAI's ``known_speaker_names``):
    a diarized speaker whose voice matches one takes its name instead of ``SPEAKER_xx``."""

    known_speaker_references: list[str] | None = Field(default=None, max_length=MAX_AUDIO_REFERENCES, exclude=True)
    """Audio of each known speaker alone, base64 or a ``data:audio/...;base64,`` URL, 2 to 10 s and at most 2 MiB
    each, in any format ``inputs`` takes (OpenAI's ``known_speaker_references``)."""

    known_speaker_embeddings: list[KnownSpeakerEmbedding] | None = Field(
        default=None, max_length=MAX_EMBEDDING_REFERENCES, exclude=True
    )
    """Known speakers as voiceprints of earlier responses (``speaker_embeddings`` entries, ``speaker`` being the
    name to give), of this endpoint's embedding model: the same person gets the same name across recordings."""

    speaker_match_threshold: float = Field(default=MATCH_THRESHOLD, gt=0.0, le=1.0)
    """Cosine similarity from which a diarized speaker takes a known speaker's name (calibrated on the offline
    default's CAM++ embedding; other embedding models need their own)."""

    return_embeddings: bool = False
    """Add ``speaker_embeddings``: each speaker's voiceprint (an L2-normalised embedding, with the model it came
    from), to compare speakers across recordings or pass back as ``known_speaker_embeddings``."""

    @field_validator("assisted", mode="before")
    @classmethod
    def _parse_assisted(cls, value: object) -> object:
        """Query strings and form fields give text: ``true``/``false`` as booleans."""
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        return value

    @field_validator("language")
    @classmethod
    def _normalise_language(cls, value: str | None) -> str | None:
        return value.strip().lower() or None if value is not None else None

    @model_validator(mode="after")
    def _check_speaker_hints(self) -> InferenceConfig:
        if self.num_speakers is not None and (self.min_speakers is not None or self.max_speakers is not None):
            raise ValueError("num_speakers excludes min_speakers and max_speakers")
        if self.min_speakers is not None and self.max_speakers is not None and self.min_speakers > self.max_speakers:
            raise ValueError(f"min_speakers ({self.min_speakers}) is larger than max_speakers ({self.max_speakers})")
        if len(self.known_speaker_names or []) != len(self.known_speaker_references or []):
            raise ValueError("known_speaker_names and known_speaker_references must have the same length")
        names = [*(self.known_speaker_names or []), *(k.speaker for k in self.known_speaker_embeddings or [])]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"known speaker names given more than once: {', '.join(repeated)}")
        if self.beam_size > 1 and self.temperature > 0:
            raise ValueError("beam_size applies to deterministic decoding: use temperature 0 with beam_size > 1")
        if self.beam_size > 1 and self.assisted is True:
            raise ValueError("assisted decoding is greedy: beam_size must be 1")
        one_at_a_time = {
            "assisted": self.assisted is True,
            "condition_on_previous_text": self.condition_on_previous_text,
        }
        for name, applies in one_at_a_time.items():
            if applies and self.batch_size not in (None, 1):
                raise ValueError(f"{name} decodes one window at a time: batch_size must be 1, not {self.batch_size}")
        return self

    @property
    def effective_batch_size(self) -> int:
        return self.batch_size or (1 if self.assisted is True or self.condition_on_previous_text else 8)

    @classmethod
    def from_parameters(cls, parameters: object) -> InferenceConfig:
        """Validate a request's ``parameters``; raise ``InvalidParametersError`` naming every problem."""
        if parameters is None:
            parameters = {}
        if not isinstance(parameters, dict):
            raise InvalidParametersError(f"parameters: expected an object, got {type(parameters).__name__}")
        try:
            return cls.model_validate(parameters)
        except ValidationError as error:
            raise InvalidParametersError("parameters: " + "; ".join(_describe(e) for e in error.errors())) from None


def _describe(error: dict) -> str:
    location = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        return f"unknown parameter {location!r}"
    message = error["msg"].removeprefix("Value error, ")
    return f"{location}: {message}" if location else message


class ServerSettings(BaseSettings):
    """The local server (``python -m service.cli serve``), read from environment variables (e.g. ``PORT``)."""

    model_config = SettingsConfigDict(extra="ignore", use_attribute_docstrings=True)

    host: str = "127.0.0.1"
    """Address to listen on; a non-loopback one (``0.0.0.0``) needs ``API_KEYS`` or ``ALLOW_UNAUTHENTICATED``."""

    port: int = Field(default=8000, ge=0, le=65535)
    """TCP port to listen on (0 = any free port)."""

    workers: int = Field(default=1, ge=1)
    """Requests processed at the same time (each holds a copy of its audio and activations, not of the models)."""

    queue_length: int = Field(default=8, ge=0)
    """Requests allowed to wait for a worker; beyond that the server answers 503 with ``Retry-After``."""

    jobs_dir: Path = Path.home() / ".local" / "share" / "speaker-transcripts" / "jobs"
    """Folder of the jobs (``POST /jobs``): their state, audio until it has run, and results; kept across restarts."""

    demo_job_min_duration_s: float = Field(default=180.0, ge=0)
    """The demo page (``/ui``) sends recordings at least this long as jobs, with a progress bar; shorter ones as
    one request."""

    api_keys: SecretStr = SecretStr("")
    """Keys that may use the server, comma-separated: every route but ``/health`` and the ``/ui`` page then needs
    ``Authorization: Bearer <key>``, and each key sees only its own jobs. Empty: no key needed, which is only
    allowed on a loopback address unless ``ALLOW_UNAUTHENTICATED`` is true."""

    api_keys_file: Path | None = None
    """A file of more keys, one per line (blank lines and ``#`` comments skipped)."""

    allow_unauthenticated: bool = False
    """Listen on a non-loopback ``HOST`` without API keys (anyone who can reach the port may use the server)."""

    jobs_max_queued: int = Field(default=16, ge=1)
    """Jobs a key may have queued or running at once; one more is answered 429 with ``Retry-After``."""

    jobs_ttl_s: float = Field(default=7 * 24 * 3600, gt=0)
    """Finished jobs, with their results, are removed this long after they finish (the job's ``expires_at``)."""

    webhook_secret: SecretStr | None = None
    """Key that signs the jobs' webhooks (Standard Webhooks: ``whsec_`` and base64); without it ``webhook_url`` is
    refused."""

    webhook_allowed_hosts: str = ""
    """Hosts, comma-separated, that webhooks may be sent to although they are (or resolve to) a loopback, private
    or link-local address; any other such host is refused."""

    def keys(self) -> list[str]:
        """The API keys of ``API_KEYS`` and ``API_KEYS_FILE``."""
        keys = self.api_keys.get_secret_value().split(",")
        if self.api_keys_file is not None:
            lines = self.api_keys_file.read_text().splitlines()
            keys += [line for line in lines if not line.strip().startswith("#")]
        return [key.strip() for key in keys if key.strip()]

    @field_validator("webhook_secret")
    @classmethod
    def _standard_webhooks_secret(cls, secret: SecretStr | None) -> SecretStr | None:
        if secret is None or not secret.get_secret_value():
            return None
        try:
            base64.b64decode(secret.get_secret_value().removeprefix("whsec_"), validate=True)
        except ValueError:
            raise ValueError("expected whsec_ followed by base64 (Standard Webhooks)") from None
        return secret
