"""Random-weight Whisper checkpoints shaped like the production models, built offline.

large-v3, large-v3-turbo and a distil-large-v3-style draft keep what the code reads off a checkpoint: 128 mel bins,
the 51,866-token vocabulary with ``<|yue|>`` and large-v3's special-token ids, the decoder depths, the alignment
heads (openai/whisper-large-v3's and -turbo's ``generation_config.json``), 20 attention heads, 1500 encoder positions
and 448 decoder positions. Widths and the encoder's depth, which the code does not read, are tiny, or with
``full_size`` the production ones (d_model 1280, 32 encoder layers: what the GPU check times). The tokenizer is the
bundle's whisper-base one with ``<|yue|>`` inserted after ``<|su|>``, as large-v3's was made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer
from transformers import (
    GenerationConfig,
    WhisperConfig,
    WhisperFeatureExtractor,
    WhisperForCausalLM,
    WhisperForConditionalGeneration,
    WhisperProcessor,
    WhisperTokenizerFast,
)

VOCAB_SIZE = 51866
MEL_BINS = 128
YUE = 50358
"""``<|yue|>``'s id: large-v3's new language; every special token from here on is one further than in v2."""
LARGE_V3_IDS = {
    "<|endoftext|>": 50257,
    "<|startoftranscript|>": 50258,
    "<|en|>": 50259,
    "<|su|>": 50357,
    "<|yue|>": YUE,
    "<|translate|>": 50359,
    "<|transcribe|>": 50360,
    "<|startoflm|>": 50361,
    "<|startofprev|>": 50362,
    "<|nospeech|>": 50363,
    "<|notimestamps|>": 50364,
    "<|0.00|>": 50365,
    "<|30.00|>": 51865,
}
_TIMESTAMPS = 1501  # <|0.00|> ... <|30.00|>
_HEADS = 20
_TINY = (80, 2)  # d_model (20 heads of 4), encoder layers
_FULL = (1280, 32)


@dataclass(frozen=True)
class Shape:
    """A production Whisper's decoder depth and alignment heads (decoder layer, head)."""

    name: str
    decoder_layers: int
    alignment_heads: tuple[tuple[int, int], ...]


LARGE_V3 = Shape(
    "whisper-large-v3",
    32,
    ((7, 0), (10, 17), (12, 18), (13, 12), (16, 1), (17, 14), (19, 11), (21, 4), (24, 1), (25, 6)),
)
LARGE_V3_TURBO = Shape("whisper-large-v3-turbo", 4, ((2, 4), (2, 11), (3, 3), (3, 6), (3, 11), (3, 14)))
DISTIL_DECODER_LAYERS = 2


def large_v3_tokenizer(base: Path) -> WhisperTokenizerFast:
    """large-v3's tokenizer from whisper-base's (``base``): the same byte-pair vocabulary and merges, then the
    special tokens in large-v3's order (``<|yue|>`` after ``<|su|>``, ``<|nospeech|>``) and the timestamps."""
    v2 = WhisperTokenizerFast.from_pretrained(base)
    spec = json.loads(v2.backend_tokenizer.to_str())
    spec.update(added_tokens=[], post_processor=None)  # the byte-pair vocabulary and merges alone
    end = "<|endoftext|>"
    tokenizer = WhisperTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(spec)), unk_token=end, bos_token=end, eos_token=end
    )
    first, su = v2.convert_tokens_to_ids(["<|en|>", "<|su|>"])
    languages = v2.convert_ids_to_tokens(list(range(first, su + 1)))
    tasks = ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>"]
    special = ["<|startoftranscript|>", *languages, "<|yue|>", *tasks, "<|nospeech|>", "<|notimestamps|>"]
    tokenizer.add_special_tokens({"additional_special_tokens": special})
    timestamps = [f"<|{i * 0.02:.2f}|>" for i in range(_TIMESTAMPS)]
    tokenizer.add_tokens([AddedToken(t, lstrip=False, rstrip=False, normalized=False) for t in timestamps])
    tokenizer.set_prefix_tokens()  # the post-processor: start of transcript, no timestamps
    ids = dict(zip(LARGE_V3_IDS, tokenizer.convert_tokens_to_ids(list(LARGE_V3_IDS)), strict=True))
    if ids != LARGE_V3_IDS or len(tokenizer) != VOCAB_SIZE:
        raise RuntimeError(f"not large-v3's token ids: {ids}, {len(tokenizer)} tokens")
    return tokenizer


def _generation_config(shape: Shape, tokenizer: WhisperTokenizerFast, base: Path) -> GenerationConfig:
    """large-v3's generation config: its ids, languages, suppression lists (v2's, shifted past ``<|yue|>``) and
    ``shape``'s alignment heads."""
    v2 = GenerationConfig.from_pretrained(base)
    token_id = tokenizer.convert_tokens_to_ids
    languages = tokenizer.convert_ids_to_tokens(list(range(LARGE_V3_IDS["<|en|>"], YUE + 1)))
    return GenerationConfig(
        alignment_heads=[list(head) for head in shape.alignment_heads],
        begin_suppress_tokens=[220, LARGE_V3_IDS["<|endoftext|>"]],
        suppress_tokens=[token + (token >= YUE) for token in v2.suppress_tokens],
        bos_token_id=token_id("<|endoftext|>"),
        eos_token_id=token_id("<|endoftext|>"),
        pad_token_id=token_id("<|endoftext|>"),
        decoder_start_token_id=token_id("<|startoftranscript|>"),
        no_timestamps_token_id=token_id("<|notimestamps|>"),
        prev_sot_token_id=token_id("<|startofprev|>"),
        is_multilingual=True,
        lang_to_id={language: token_id(language) for language in languages},
        task_to_id={task: token_id(f"<|{task}|>") for task in ("transcribe", "translate")},
        max_initial_timestamp_index=50,
        max_length=448,
        return_timestamps=False,
    )


def _config(decoder_layers: int, full_size: bool, **overrides) -> WhisperConfig:
    d_model, encoder_layers = _FULL if full_size else _TINY
    return WhisperConfig(
        vocab_size=VOCAB_SIZE,
        num_mel_bins=MEL_BINS,
        d_model=d_model,
        encoder_layers=encoder_layers,
        decoder_layers=decoder_layers,
        encoder_attention_heads=_HEADS,
        decoder_attention_heads=_HEADS,
        encoder_ffn_dim=4 * d_model,
        decoder_ffn_dim=4 * d_model,
        max_source_positions=1500,
        max_target_positions=448,
        bos_token_id=LARGE_V3_IDS["<|endoftext|>"],
        eos_token_id=LARGE_V3_IDS["<|endoftext|>"],
        pad_token_id=LARGE_V3_IDS["<|endoftext|>"],
        decoder_start_token_id=LARGE_V3_IDS["<|startoftranscript|>"],
        **overrides,
    )


def build_whisper(shape: Shape, base: Path, target: Path, full_size: bool = False, seed: int = 0) -> Path:
    """A random-weight Whisper of ``shape`` (tokenizer and suppression lists from whisper-base ``base``) at
    ``target``, with its processor; ``full_size`` in float16, as the hub's checkpoints."""
    tokenizer = large_v3_tokenizer(base)
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(_config(shape.decoder_layers, full_size))
    model.generation_config = _generation_config(shape, tokenizer, base)
    model.to(torch.float16 if full_size else torch.float32).save_pretrained(target)
    WhisperProcessor(WhisperFeatureExtractor(feature_size=MEL_BINS), tokenizer).save_pretrained(target)
    return target


def build_draft(target: Path, full_size: bool = False, seed: int = 1) -> Path:
    """A distil-large-v3-style draft at ``target``: a 2-layer decoder saved as ``WhisperForCausalLM`` (as the
    speculative-decoding blog loads distil-large-v3), reading the main model's encoder output."""
    torch.manual_seed(seed)
    config = _config(DISTIL_DECODER_LAYERS, full_size, architectures=["WhisperForCausalLM"])
    WhisperForCausalLM(config).to(torch.float16 if full_size else torch.float32).save_pretrained(target)
    return target
