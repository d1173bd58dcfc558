"""OpenAI's error object, which every /v1 route refuses in (serving.app's handlers, serving.wire's 431):

    {"error": {"message": "one sentence", "type": "invalid_request_error", "param": "n", "code": null}}

The other routes keep TGI's {"error": "one sentence"}.
"""

from __future__ import annotations

from typing import Any

ERROR_CODES = {404: "not_found", 413: "request_too_large", 503: "server_busy"}


def speaks_openai(path: str) -> bool:
    return path == "/v1" or path.startswith("/v1/")


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error object: the sentence, its type (invalid_request_error for a 4xx, server_error else), the
    field it is about (or None) and a code where the status says one."""
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": ERROR_CODES.get(status)}}
