"""Endpoint URLs of OpenAI-compatible servers, from the base URL a user gives."""

from __future__ import annotations

from urllib.parse import urlsplit


def openai_endpoint(url: str | None, path: str, what: str) -> str:
    """The full URL of ``path`` (e.g. ``/chat/completions``) under the server's ``/v1``: ``http://h:8000``,
    ``http://h:8000/v1`` and the full endpoint URL all give ``http://h:8000/v1<path>``.

    Raises ``ValueError`` naming ``what`` (e.g. ``"LLM URL"``) for a missing or non-HTTP URL.
    """
    base = (url or "").strip().rstrip("/")
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what} must be an http:// or https:// URL (host[:port][/v1]), got {url!r}")
    if base.endswith(path):
        return base
    if base.endswith("/v1"):
        return base + path
    return base + "/v1" + path
