"""Models by Hugging Face hub id: a failure to load one becomes a ``ModelLoadError`` that names the model, the file
and what to do (gated model without a token, no such repository, a file missing from an offline cache, no network).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from huggingface_hub import constants, try_to_load_from_cache
from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

from speech.errors import ModelLoadError

WHISPER_FILES = ("config.json", "preprocessor_config.json", "tokenizer_config.json", "generation_config.json")
"""Files every Whisper checkpoint on the hub has (the weights come in one of several names)."""


@contextmanager
def loading(kind: str, model: str, files: Callable[[], list[str]] = lambda: []) -> Iterator[None]:
    """Turn what loading ``model`` (a ``kind`` of model: "ASR model", "diarization pipeline"...) raises into a
    ``ModelLoadError``; ``files()``: the files it needs, to name the first one that a local cache lacks."""
    try:
        yield
    except ModelLoadError:
        raise
    except Exception as error:
        raise ModelLoadError(explain(kind, model, error, files)) from error


def explain(kind: str, model: str, error: Exception, files: Callable[[], list[str]]) -> str:
    """What went wrong loading ``model``, and what to do about it."""
    name = f"{kind} {model!r}"
    if Path(model).exists():
        return f"{name}: the folder could not be loaded ({type(error).__name__}: {error})"
    causes = _chain(error)
    if any(isinstance(cause, GatedRepoError) for cause in causes) or "gated" in str(error).lower():
        return (
            f"{name} is gated on the Hugging Face hub: accept its conditions at https://hf.co/{model} with your "
            "account and set HF_TOKEN to a token of that account"
        )
    if any(isinstance(cause, RepositoryNotFoundError) for cause in causes):
        return f"{name}: no such model on the Hugging Face hub, or a private one (check the id, or set HF_TOKEN)"
    needed = _safe(files)
    missing = next((file for file in needed if not isinstance(try_to_load_from_cache(model, file), str)), None)
    if needed and missing is None:  # every file is there: not a download problem
        return f"{name} could not be loaded ({type(error).__name__}: {error})"
    where = f"{missing} is not" if missing else "its files are not all"
    if constants.HF_HUB_OFFLINE:
        return (
            f"{name}: {where} in the local Hugging Face cache ({constants.HF_HUB_CACHE}) and HF_HUB_OFFLINE forbids "
            f"downloading: download it once with `huggingface-cli download {model}` (HF_TOKEN for a gated model), "
            "or unset HF_HUB_OFFLINE"
        )
    return (
        f"{name}: {where} in the local Hugging Face cache and downloading failed ({type(error).__name__}: {error}); "
        "check the network and the id, or download it beforehand with `huggingface-cli download` and set "
        "HF_HUB_OFFLINE=1"
    )


def pipeline_files(model: str) -> list[str]:
    """The files a pyannote pipeline repository needs: its ``config.yaml`` and those of its ``$model/`` parts."""
    import yaml

    config = try_to_load_from_cache(model, "config.yaml")
    if not isinstance(config, str):
        return ["config.yaml"]
    params = yaml.safe_load(Path(config).read_text()).get("pipeline", {}).get("params", {})
    parts = {key: str(value).removeprefix("$model/") for key, value in params.items() if str(value).startswith("$")}
    needed = {"plda": ("xvec_transform.npz", "plda.npz")}
    return [f"{folder}/{file}" for key, folder in parts.items() for file in needed.get(key, ("pytorch_model.bin",))]


def _chain(error: BaseException) -> list[BaseException]:
    causes: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in causes:
        causes.append(current)
        current = current.__cause__ or current.__context__
    return causes


def _safe(files: Callable[[], list[str]]) -> list[str]:
    try:
        return files()
    except Exception:  # naming the missing file is a courtesy: the error is explained without it
        return []
