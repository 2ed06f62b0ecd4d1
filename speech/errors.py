"""Exceptions of the project. Request errors carry the HTTP status a server should answer with."""


class EndpointError(Exception):
    """Base class of the project's errors."""

    status_code = 500


class RequestError(EndpointError, ValueError):
    """The request is wrong; the message names the problem."""

    status_code = 400


class InvalidParametersError(RequestError):
    """``parameters`` failed validation (unknown key, wrong type, out of range, contradictory)."""

    status_code = 422


class InvalidAudioError(RequestError):
    """``inputs`` is not decodable audio (bad base64, not an audio format, corrupt)."""

    status_code = 415


class AudioTooShortError(RequestError):
    """The audio is empty or shorter than the minimum duration."""

    status_code = 400


class AudioTooLongError(RequestError):
    """The audio or the request body exceeds a configured limit."""

    status_code = 413


class RequestCancelledError(RequestError):
    """The client went away before its request was done; the work stopped at the next checkpoint."""

    status_code = 499


class ModelLoadError(EndpointError):
    """A configured model could not be loaded or does not fit the rest of the configuration."""


class InferenceError(EndpointError):
    """A model failed while processing a valid request (server side, e.g. out of memory)."""


class InferenceTimeoutError(InferenceError):
    """Processing a request took longer than ``INFERENCE_TIMEOUT_S``; the work stopped at the next checkpoint."""

    status_code = 504


class ServiceUnavailableError(EndpointError):
    """The server cannot take the request now (models still loading, or every worker and queue slot busy)."""

    status_code = 503
    retry_after_s = 5
