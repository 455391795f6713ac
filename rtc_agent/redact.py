"""Keep secrets out of everything that leaves the server: events, HTTP bodies, ``/health`` and logs.

Secrets reach text in three ways, and each has its own mask:

- **URLs** (``--llm-url http://user:pass@gpu:8000/v1?api_key=...``): :func:`redact_url` drops the user-info and
  replaces the value of every query parameter (bar a few harmless ones such as ``transport``) with ``***``;
  scheme, host, port and path stay, so the message still says which server failed.
- **Credentials in free text** (an upstream error body that echoes our ``Authorization: Bearer ...``, a
  ``"api_key": "..."`` in a JSON dump, ``?token=...`` in an access-log request line): :func:`redact_text` finds
  URLs, bearer/basic credentials and ``name=value`` / ``"name": "value"`` pairs whose name says key, token,
  secret, password, signature or auth, and masks their values.
- **Known values**: anything passed to :func:`register_secret` (the settings' API keys, TURN secret, engine API
  keys; :func:`register_settings_secrets` does them all) is masked wherever it appears, also percent-encoded.

:func:`install_log_redaction` applies :func:`redact_text` to every log record's message, exception text and stack
text (a log-record factory, so handlers added later, pytest's ``caplog`` included, only ever see redacted records).

Contract: every function here is total (never raises on odd input), idempotent (redacting twice gives the same
text) and thread-safe. Masks are ``***``. Values shorter than :data:`MIN_SECRET_LEN` characters are not registered
(masking every ``"ab"`` would garble text; such a secret is no secret).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

__all__ = [
    "MIN_SECRET_LEN",
    "REDACTED",
    "install_log_redaction",
    "redact_data",
    "redact_text",
    "redact_url",
    "register_secret",
    "register_settings_secrets",
    "register_url_secrets",
    "uninstall_log_redaction",
    "unregister_secret",
    "url_secrets",
]

REDACTED = "***"
MIN_SECRET_LEN = 4
# query parameters whose values are never secret and useful to see (TURN URLs carry ?transport=udp)
SAFE_QUERY_KEYS = frozenset({"transport", "api-version", "api_version"})
# name parts (split on _ - .) that mark a value as secret; "tokens" (max_tokens) and "keys" are not among them
_SECRET_PARTS = frozenset({
    "key", "apikey", "token", "secret", "password", "passwd", "pwd", "sig", "signature", "auth",
    "authorization", "credential", "credentials", "cookie", "jwt", "bearer", "sas",
})
_SECRET_SUFFIXES = ("token", "secret", "password", "apikey", "signature")

_URL_RE = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]{1,15}://[^\s<>\"'`]+")
_URL_TRAILING = ".,;:!?)]}"
# a credential has a digit, a capital or a base64 sign: "Bearer sk-9x..." is masked, "basic authentication" is not
_BEARER_RE = re.compile(r"\b([Bb]earer|[Bb]asic|BEARER|BASIC)(\s+)(?=[a-z._~\-]*[A-Z0-9+/=])([A-Za-z0-9._~+/=\-]{8,})")
_PAIR_RE = re.compile(r"(?i)(?<![\w.\-])([a-z][\w.\-]{0,63}?)([\"']?\s*[:=]\s*[\"']?)(?!\*\*\*)"
                      r"([^\s\"'&,;<>{}()\[\]]+)")

_lock = threading.Lock()
_secrets: dict[str, int] = {}  # value -> registration count
_secret_re: re.Pattern[str] | None = None
_previous_factory: Callable[..., logging.LogRecord] | None = None  # set while install_log_redaction is in effect


# --- registered secrets --------------------------------------------------------------------------------------

def _rebuild() -> None:
    global _secret_re
    forms: set[str] = set()
    for value in _secrets:
        forms.add(value)
        forms.add(quote(value, safe=""))
    ordered = sorted(forms, key=len, reverse=True)
    _secret_re = re.compile("|".join(map(re.escape, ordered))) if ordered else None


def register_secret(value: str | None) -> None:
    """Mask ``value`` (and its percent-encoded form) in everything :func:`redact_text` sees from now on.

    Empty values and values shorter than :data:`MIN_SECRET_LEN` are ignored. Registering twice is harmless.
    """
    if not isinstance(value, str):
        return
    value = value.strip()
    if len(value) < MIN_SECRET_LEN:
        return
    with _lock:
        _secrets[value] = _secrets.get(value, 0) + 1
        _rebuild()


def unregister_secret(value: str | None) -> None:
    """Undo one :func:`register_secret` of ``value`` (for tests and rotated keys)."""
    if not isinstance(value, str):
        return
    value = value.strip()
    with _lock:
        count = _secrets.get(value, 0)
        if count <= 1:
            _secrets.pop(value, None)
        else:
            _secrets[value] = count - 1
        _rebuild()


def url_secrets(url: str) -> list[str]:
    """The user-info password and the values of secret-named query parameters of ``url``."""
    out: list[str] = []
    try:
        parts = urlsplit(url.strip())
        if parts.password:
            out.append(parts.password)
        for piece in re.split(r"[&;]", parts.query):
            name, sep, value = piece.partition("=")
            if sep and value and _is_secret_name(name):
                out.append(value)
    except ValueError:
        pass
    return out


def register_url_secrets(url: str | None) -> None:
    """Register the secrets inside ``url`` (see :func:`url_secrets`): engines call it for the URL they are given,
    so its password and key show up masked even in text that does not look like a URL (``nonnumeric port:
    'pass@host'``)."""
    if isinstance(url, str):
        for secret in url_secrets(url):
            register_secret(secret)


def register_settings_secrets(settings: Any) -> None:
    """Register every secret a :class:`~rtc_agent.config.Settings` holds: the fields marked ``secret`` (strings or
    lists of strings: API keys, TURN secret and credential, engine API keys) and the passwords and secret query
    values inside every ``*_url`` / ``*_urls`` field."""
    if not dataclasses.is_dataclass(settings):
        return
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name, None)
        values: Iterable[Any] = value if isinstance(value, list | tuple) else [value]
        if f.metadata.get("secret"):
            for v in values:
                register_secret(v)
        if f.name.endswith(("_url", "_urls")):
            for v in values:
                if isinstance(v, str):
                    register_url_secrets(v)


def _mask_registered(text: str) -> str:
    pattern = _secret_re
    return pattern.sub(REDACTED, text) if pattern is not None else text


# --- URLs and text -------------------------------------------------------------------------------------------

def _is_secret_name(name: str) -> bool:
    lowered = name.lower().strip("\"' ")
    if not lowered:
        return False
    parts = [p for p in re.split(r"[_.\-]", lowered) if p]
    return any(p in _SECRET_PARTS or p.endswith(_SECRET_SUFFIXES) for p in parts)


def _redact_query(query: str) -> str:
    pieces = []
    for piece in query.split("&"):
        name, sep, value = piece.partition("=")
        if not sep:
            pieces.append(REDACTED if piece else piece)  # a bare ?TOKEN
        elif value and name.lower() not in SAFE_QUERY_KEYS and value != REDACTED:
            pieces.append(f"{name}={REDACTED}")
        else:
            pieces.append(piece)
    return "&".join(pieces)


def redact_url(url: str) -> str:
    """``url`` without user-info and with every query value (bar ``transport``/``api-version``) as ``***``;
    scheme, host, port and path are kept. A fragment of ``name=value`` pairs is treated like a query. Registered
    secrets are masked anywhere in it. Never raises: a URL that cannot be parsed is masked heuristically."""
    if not isinstance(url, str) or not url:
        return url
    try:
        parts = urlsplit(url)
        netloc = parts.netloc.rpartition("@")[2]
        query = _redact_query(parts.query) if parts.query else ""
        fragment = _redact_query(parts.fragment) if "=" in parts.fragment else parts.fragment
        out = urlunsplit((parts.scheme, netloc, parts.path, query, fragment))
    except ValueError:  # e.g. an invalid port or IPv6 literal
        out = re.sub(r"//[^/?#]*@", "//", url)
        head, sep, tail = out.partition("?")
        out = head + (sep + _redact_query(tail) if sep else "")
    return _mask_registered(out)


def _redact_url_match(match: re.Match[str]) -> str:
    found = match.group(0)
    end = len(found)
    while end and found[end - 1] in _URL_TRAILING:
        closing = found[end - 1]
        opening = {")": "(", "]": "["}.get(closing)
        if opening and found[:end - 1].count(opening) > found[:end - 1].count(closing):
            break  # the bracket belongs to the URL
        end -= 1
    return redact_url(found[:end]) + found[end:]


def _redact_pair(match: re.Match[str]) -> str:
    name, sep, value = match.groups()
    if value.lower() in ("bearer", "basic"):  # an auth scheme: the credential after it is _BEARER_RE's
        return match.group(0)
    if _is_secret_name(name) and value != REDACTED:
        return f"{name}{sep}{REDACTED}"
    return match.group(0)


def redact_text(text: str, extra_secrets: Iterable[str | None] = ()) -> str:
    """``text`` with URLs redacted (:func:`redact_url`), ``Bearer``/``Basic`` credentials masked, the values of
    ``name=value`` / ``name: value`` / ``"name": "value"`` pairs whose name is secret-like (``Authorization``,
    ``api_key``, ``X-Api-Key``, ``token``, ``password``, ``sig``, ...) masked, and every registered secret masked.
    ``extra_secrets``: more literal values to mask in this call only (an engine's own API key). Non-strings are
    returned unchanged."""
    if not isinstance(text, str) or not text:
        return text
    out = _mask_registered(text)
    for secret in extra_secrets:
        if isinstance(secret, str) and len(secret.strip()) >= MIN_SECRET_LEN:
            out = out.replace(secret.strip(), REDACTED)
    if "://" in out:
        out = _URL_RE.sub(_redact_url_match, out)
    out = _BEARER_RE.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", out)
    if "=" in out or ":" in out:
        out = _PAIR_RE.sub(_redact_pair, out)
    return out


def redact_data(value: Any) -> Any:
    """A copy of a JSON-like value (dicts, lists, tuples, strings, numbers) with :func:`redact_text` applied to
    every string, keys included. Other objects are returned as they are."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {redact_text(k) if isinstance(k, str) else k: redact_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_data(v) for v in value]
    if isinstance(value, tuple):
        return tuple(redact_data(v) for v in value)
    return value


# --- logs ----------------------------------------------------------------------------------------------------

def _redact_record(record: logging.LogRecord) -> None:
    if record.__dict__.get("_rtc_redacted") == (id(record.msg), id(record.args)):
        return  # already done (the factory ran and nothing replaced msg since)
    try:
        message = record.getMessage()
    except Exception:  # a bad format string: leave it to logging's own error report
        return
    redacted = redact_text(message)
    if redacted != message:
        record.msg, record.args = redacted, None
    if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
        with contextlib.suppress(Exception):
            record.exc_text = redact_text(logging.Formatter().formatException(record.exc_info))
    elif record.exc_text:
        record.exc_text = redact_text(record.exc_text)
    if record.stack_info:
        record.stack_info = redact_text(record.stack_info)
    record._rtc_redacted = (id(record.msg), id(record.args))


class RedactingFilter(logging.Filter):
    """A handler filter that redacts records made without the log-record factory (``logging.makeLogRecord``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        _redact_record(record)
        return True


def install_log_redaction() -> None:
    """Redact every log record from now on: wraps the log-record factory (so every handler, present or added
    later, sees redacted ``msg``, ``exc_text`` and ``stack_info``) and adds a :class:`RedactingFilter` to the
    root logger's handlers. Idempotent; call it once logging is configured (``setup_logging``)."""
    global _previous_factory
    with _lock:
        if _previous_factory is None:
            previous = logging.getLogRecordFactory()

            def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
                record = previous(*args, **kwargs)
                _redact_record(record)
                return record

            logging.setLogRecordFactory(factory)
            _previous_factory = previous
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())


def uninstall_log_redaction() -> None:
    """Undo :func:`install_log_redaction` (for tests): the previous record factory, no filters on root handlers."""
    global _previous_factory
    with _lock:
        if _previous_factory is not None:
            logging.setLogRecordFactory(_previous_factory)
            _previous_factory = None
    for handler in logging.getLogger().handlers:
        for f in [f for f in handler.filters if isinstance(f, RedactingFilter)]:
            handler.removeFilter(f)
