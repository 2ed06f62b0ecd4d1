"""The repository as the Inference Endpoints container runs it, in a virtual environment made from
``requirements.txt`` alone (``make container-test``).

The container's server (huggingface-inference-toolkit 0.5.6) imports its own dependencies first, then loads
``handler.py`` from its path with the repository first on ``sys.path`` and calls ``EndpointHandler(model_dir)``.
For each request it turns the body into ``data`` (JSON; an ``audio/*`` body as ``{"inputs": bytes}``), base64-decodes
``inputs`` itself when the body has ``parameters`` and ``HF_TASK`` is ``automatic-speech-recognition``, merges
query-string parameters (digits to int, true/false to bool) when the body has none, and answers any exception
with 400 ``{"error": str(exception)}``. ``toolkit_predict`` below does the same, written from those facts.
Each scenario runs in a fresh interpreter, as a container would start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent

TOOLKIT = r"""
import base64, importlib.util, json, sys
from pathlib import Path

# The toolkit's own imports, before any handler (transformers 5 removed transformers.file_utils).
from transformers.file_utils import is_tf_available, is_torch_available
from transformers import WhisperForConditionalGeneration, pipeline
from transformers.pipelines import Pipeline
from huggingface_hub import HfApi, login, snapshot_download

MODEL_DIR = sys.argv[1]
spec = importlib.util.spec_from_file_location("handler.EndpointHandler", Path(MODEL_DIR) / "handler.py")
sys.path.insert(0, MODEL_DIR)
module = importlib.util.module_from_spec(spec)
sys.modules["handler.EndpointHandler"] = module
spec.loader.exec_module(module)
handler = module.EndpointHandler(MODEL_DIR)


def convert_params_to_int_or_bool(params):
    for key, value in params.items():
        if value.isnumeric():
            params[key] = int(value)
        if value == "false":
            params[key] = False
        if value == "true":
            params[key] = True
    return params


def toolkit_predict(content_type, body, query, hf_task):
    try:
        if content_type == "application/json":
            data = json.loads(body)
        elif content_type.startswith("audio/"):
            data = {"inputs": bytes(body)}
        else:
            raise Exception(f"Content type {content_type} not supported")
        if "inputs" not in data:
            raise ValueError("Body needs to provide a inputs key")
        if "parameters" in data and hf_task == "automatic-speech-recognition":
            data["inputs"] = base64.b64decode(data["inputs"], validate=True)
        if query and "parameters" not in data:
            data["parameters"] = convert_params_to_int_or_bool(dict(query))
        return 200, json.loads(json.dumps(handler(data), allow_nan=False))
    except Exception as error:
        return 400, {"error": str(error)}
"""


SAMPLE = """
import pyannote.audio
sample = (Path(pyannote.audio.__file__).parent / "sample" / "sample.wav").read_bytes()
encoded = base64.b64encode(sample).decode()
"""


def run(scenario: str, env: dict[str, str] | None = None, prelude: str = "") -> dict:
    """Run ``prelude``, the toolkit emulation and ``scenario`` (which prints one JSON line; ``sample`` holds the
    pyannote sample's bytes, ``encoded`` their base64) in a fresh interpreter, outside the repository."""
    script = prelude + TOOLKIT + SAMPLE + textwrap.dedent(scenario)
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    environment.update(env or {})
    done = subprocess.run(
        [sys.executable, "-c", script, str(REPOSITORY)],
        cwd="/",
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_toolkit_imports_every_body_form_gets_two_speakers_and_errors_stand_alone():
    results = run(
        """
        forms = {
            "base64 with parameters": (
                "application/json", json.dumps({"inputs": encoded, "parameters": {"return_timestamps": "word"}}), {}
            ),
            "base64 without parameters": ("application/json", json.dumps({"inputs": encoded}), {}),
            "raw audio": ("audio/wav", sample, {}),
            "raw audio, query string": ("audio/wav", sample, {"num_speakers": "2", "assisted": "false"}),
            "bad parameter": (
                "application/json", json.dumps({"inputs": encoded, "parameters": {"num_speakers": "two"}}), {}
            ),
            "not audio": ("audio/wav", b"ffconcat version 1.0\\nfile /etc/passwd\\n", {}),
            "subtitles": (
                "application/json", json.dumps({"inputs": encoded, "parameters": {"response_format": "srt"}}), {}
            ),
        }
        results = {}
        for name, (content_type, body, query) in forms.items():
            status, response = toolkit_predict(content_type, body, query, "automatic-speech-recognition")
            results[name] = {"status": status, "response": response}
        print(json.dumps(results))
        """
    )
    for name in ("base64 with parameters", "base64 without parameters", "raw audio", "raw audio, query string"):
        assert results[name]["status"] == 200, (name, results[name]["response"])
        response = results[name]["response"]
        assert len({turn["speaker"] for turn in response["speakers"]}) == 2, name
        assert "Diane" in response["text"], name
    assert results["raw audio, query string"]["response"]["parameters"]["num_speakers"] == 2
    assert results["raw audio, query string"]["response"]["parameters"]["assisted"] is False
    assert "words" in results["base64 with parameters"]["response"]
    bad_parameter, not_audio = results["bad parameter"], results["not audio"]
    assert bad_parameter["status"] == 400 and bad_parameter["response"]["error"].startswith("parameters: num_speakers:")
    assert not_audio["status"] == 400
    assert not_audio["response"]["error"].startswith("inputs: an FFmpeg concat list is not an accepted audio file")
    assert results["subtitles"]["status"] == 200 and "-->" in results["subtitles"]["response"]["srt"]


NO_SPEAKERLAB = """
import sys

class NoSpeakerlab:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "speakerlab":
            raise ModuleNotFoundError("No module named 'speakerlab'")

sys.meta_path.insert(0, NoSpeakerlab())
"""


def test_without_diarization_the_speaker_embedding_package_is_not_needed():
    result = run(
        """
        status, response = toolkit_predict("audio/wav", sample, {}, "custom")
        print(json.dumps({"status": status, "response": response, "loaded": "speakerlab" in sys.modules}))
        """,
        env={"DIARIZATION_MODEL": ""},
        prelude=NO_SPEAKERLAB,
    )
    assert result["status"] == 200 and not result["loaded"]
    assert "Diane" in result["response"]["text"]
    assert {turn["speaker"] for turn in result["response"]["speakers"]} == {None}
