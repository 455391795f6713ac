"""Endpoint URLs of OpenAI-compatible servers, from the base URL a user gives."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from rtc_agent.redact import redact_url


def openai_endpoint(url: str | None, path: str, what: str) -> str:
    """The full URL of ``path`` (e.g. ``/chat/completions``) under the server's ``/v1``: ``http://h:8000``,
    ``http://h:8000/v1`` and the full endpoint URL all give ``http://h:8000/v1<path>``. A query string (some
    gateways take ``?api-version=...`` or a key there) stays at the end, after the path.

    Raises ``ValueError`` naming ``what`` (e.g. ``"LLM URL"``) for a missing or non-HTTP URL; the message shows the
    URL redacted (no user-info, no query values).
    """
    raw = (url or "").strip()
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what} must be an http:// or https:// URL (host[:port][/v1]), got {redact_url(raw)!r}")
    base = parts.path.rstrip("/")
    if base.endswith(path):
        full = base
    elif base.endswith("/v1"):
        full = base + path
    else:
        full = base + "/v1" + path
    return urlunsplit((parts.scheme, parts.netloc, full, parts.query, ""))
