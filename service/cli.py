"""Command line: transcribe and diarize files, or run the local server.

python -m service.cli transcribe                                  # the pyannote sample call, as JSON
python -m service.cli transcribe call.mp3 meeting.wav --format srt --out subtitles/ --num-speakers 2
python -m service.cli transcribe --endpoint URL --out out/ *.wav  # the same, on a deployed endpoint (resumable)
python -m service.cli transcribe --consistent-speakers --format txt calls/*.wav  # one voice, one label in every file
python -m service.cli serve                                       # http://127.0.0.1:8000 (HOST / PORT)

``transcribe`` takes the endpoint's request parameters as options (``--return-timestamps word``...); known speaker
references are audio files, known speaker embeddings a JSON file (a response's ``speaker_embeddings``).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from pathlib import Path

from tqdm import tqdm

from config import InferenceConfig, ServerSettings
from speech.audio import pyannote_sample_path
from speech.errors import EndpointError
from speech.formats import WRITERS


def _add_parameter_options(parser: argparse.ArgumentParser) -> None:
    """One option per request parameter, documented by its ``InferenceConfig`` docstring (``response_format``
    aside: ``--format`` writes the files)."""
    group = parser.add_argument_group("request parameters (as in the endpoint's 'parameters')")
    for name, field in InferenceConfig.model_fields.items():
        if name == "response_format":
            continue
        flag = "--" + name.replace("_", "-")
        if field.annotation is bool:
            group.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS, help=field.description
            )
        elif name == "known_speaker_embeddings":
            group.add_argument(flag, default=argparse.SUPPRESS, type=Path, metavar="JSON_FILE", help=field.description)
        elif name.startswith("known_speaker_"):
            metavar = "FILE" if name == "known_speaker_references" else "NAME"
            group.add_argument(flag, default=argparse.SUPPRESS, nargs="+", metavar=metavar, help=field.description)
        else:
            group.add_argument(flag, default=argparse.SUPPRESS, metavar=name.upper(), help=field.description)


def _request_parameters(args: argparse.Namespace) -> dict:
    """The request parameters of the options; reference files read (``OSError`` if one cannot be)."""
    parameters = {name: getattr(args, name) for name in InferenceConfig.model_fields if hasattr(args, name)}
    if "known_speaker_references" in parameters:
        parameters["known_speaker_references"] = [
            base64.b64encode(Path(path).read_bytes()).decode() for path in parameters["known_speaker_references"]
        ]
    if "known_speaker_embeddings" in parameters:
        parameters["known_speaker_embeddings"] = json.loads(parameters["known_speaker_embeddings"].read_text())
    return parameters


class _ProgressBar:
    """A progress hook drawing one bar per stage on stderr (only when stderr is a terminal)."""

    def __init__(self, name: str):
        self.name, self.stage, self.bar = name, None, None

    def __call__(self, stage: str, completed: int, total: int) -> None:
        if stage != self.stage:
            self.close()
            self.stage = stage
            self.bar = tqdm(total=total, desc=f"{self.name}: {stage}", unit="step", leave=False, disable=None)
        self.bar.total = total
        self.bar.update(completed - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def transcribe(args: argparse.Namespace) -> int:
    try:
        parameters = _request_parameters(args)
    except (OSError, ValueError) as error:
        print(f"a known speaker file could not be read: {error}", file=sys.stderr)
        return 2
    if args.format in ("srt", "vtt"):
        parameters.setdefault("return_timestamps", "word")  # cue timing follows the words
    if args.consistent_speakers:
        parameters["return_embeddings"] = True
    try:
        InferenceConfig.from_parameters(parameters)
    except EndpointError as error:
        print(error, file=sys.stderr)
        return 2
    if args.endpoint:
        return _transcribe_at_endpoint(args, parameters)
    from handler import EndpointHandler

    handler = EndpointHandler()
    writer = WRITERS[args.format]
    status = 0
    voices = _Voices(parameters) if args.consistent_speakers else None
    for path in args.files or [pyannote_sample_path()]:
        progress = _ProgressBar(path.name)
        request = parameters if voices is None else voices.parameters()
        try:
            with path.open("rb") as audio:  # decoded from the file (up to MAX_FILE_BYTES), not read whole
                response = handler({"inputs": audio, "parameters": request}, progress=progress)
        except (OSError, EndpointError) as error:
            print(f"{path}: {error}", file=sys.stderr)
            status = 1
            continue
        finally:
            progress.close()
        if voices is not None:
            voices.add(response)
        output = writer(response, path.stem)
        if args.out is None:
            sys.stdout.write(output)
        else:
            args.out.mkdir(parents=True, exist_ok=True)
            target = args.out / f"{path.stem}.{args.format}"
            target.write_text(output, encoding="utf-8")
            print(f"{path} -> {target}", file=sys.stderr)
    return status


class _Voices:
    """``--consistent-speakers``: the voiceprints of the files so far, sent with the next file as known speakers,
    so that a voice heard before keeps its label and a new voice gets a label of its own."""

    def __init__(self, parameters: dict):
        self.base = parameters
        given = parameters.get("known_speaker_embeddings", [])
        self.named = {*parameters.get("known_speaker_names", []), *(known["speaker"] for known in given)}
        self.known: dict[str, dict] = {}

    def parameters(self) -> dict:
        known = [*self.base.get("known_speaker_embeddings", []), *self.known.values()]
        return {**self.base, "known_speaker_embeddings": known} if known else self.base

    def add(self, response: dict) -> None:
        for voiceprint in response.get("speaker_embeddings", []):
            if voiceprint["speaker"] not in self.named:
                self.known.setdefault(voiceprint["speaker"], voiceprint)


def _transcribe_at_endpoint(args: argparse.Namespace, parameters: dict) -> int:
    from service.endpoint_client import EndpointClient, transcribe_files

    try:
        client = EndpointClient(args.endpoint, args.token or os.environ.get("HF_TOKEN") or None)
        files = args.files or [pyannote_sample_path()]
        result = transcribe_files(client, files, args.out, args.format, parameters, args.concurrency)
    except ValueError as error:  # a bad URL, two files with one stem (parameters were checked already)
        print(error, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: the outputs written are complete; run the same command again to resume", file=sys.stderr)
        return 130
    print(result.summary(), file=sys.stderr)
    return 1 if result.failed else 0


def serve(args: argparse.Namespace) -> int:
    import logging

    import uvicorn

    from service.server import create_app
    from service.server.auth import ApiKeys, exposure_problem

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # its lines quote whole webhook URLs, tokens included
    settings = ServerSettings()
    host = args.host or settings.host
    port = settings.port if args.port is None else args.port
    problem = exposure_problem(host, ApiKeys(settings.keys()), settings.allow_unauthenticated)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    uvicorn.run(create_app(server_settings=settings), host=host, port=port, access_log=False)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service.cli", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("transcribe", help="transcribe and diarize audio files")
    run.add_argument("files", nargs="*", type=Path, help="audio files (default: the pyannote sample)")
    run.add_argument("--format", choices=sorted(WRITERS), default="json", help="output format (default: json)")
    run.add_argument("--out", type=Path, help="write FILE_STEM.FORMAT files into this folder instead of stdout")
    remote = run.add_argument_group("on a deployed endpoint (needs --out; files whose output exists are skipped)")
    remote.add_argument("--endpoint", metavar="URL", help="send the files to this endpoint instead of loading models")
    remote.add_argument("--token", help="bearer token for the endpoint (default: HF_TOKEN)")
    remote.add_argument("--concurrency", type=int, default=4, metavar="N", help="requests in flight (default: 4)")
    run.add_argument(
        "--consistent-speakers",
        action="store_true",
        help="label the same voice the same way in every file: the files are transcribed in order, each with the "
        "voiceprints of the files before it as known speakers (not with --endpoint)",
    )
    _add_parameter_options(run)
    run.set_defaults(command_function=transcribe)
    server = commands.add_parser("serve", help="run the local server")
    server.add_argument("--host", help="address to listen on (default: HOST or 127.0.0.1)")
    server.add_argument("--port", type=int, help="port to listen on (default: PORT or 8000)")
    server.set_defaults(command_function=serve)
    args = parser.parse_args(argv)
    if args.command == "transcribe" and args.endpoint and (args.out is None or args.concurrency < 1):
        run.error("--endpoint needs --out DIR and a --concurrency of at least 1")
    if args.command == "transcribe" and args.endpoint and args.consistent_speakers:
        run.error("--consistent-speakers runs the files one after another on the models here, not with --endpoint")
    return args.command_function(args)


if __name__ == "__main__":
    sys.exit(main())
