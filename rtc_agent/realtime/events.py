"""OpenAI Realtime (GA) client events: decoding, validation and the ``error`` server event.

:func:`parse_client_event` turns one client message into a checked ``dict`` or raises :class:`RealtimeError`,
which the transport answers with an ``error`` event carrying the offending ``event_id`` (the connection goes on).
Checks, in order: size (``max_bytes``), JSON (with depth and number limits), an object with a string ``type``
that is one of :data:`CLIENT_TYPES`, no unknown top-level fields, and each field's type. Deeper contents
(``session``, ``item``, ``response``) are checked where they are used (:mod:`rtc_agent.realtime.session_config`,
:mod:`rtc_agent.realtime.adapter`), with ``param`` naming the field at fault, as OpenAI does.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from rtc_agent.errors import AgentError
from rtc_agent.protocol import json_limits

__all__ = ["CLIENT_TYPES", "RealtimeError", "error_body", "new_id", "parse_client_event"]

#: client event type -> {field: accepted Python types (``None`` allowed where listed)}; ``event_id`` is common
CLIENT_TYPES: dict[str, dict[str, tuple[type, ...]]] = {
    "session.update": {"session": (dict,)},
    "input_audio_buffer.append": {"audio": (str,)},
    "input_audio_buffer.commit": {},
    "input_audio_buffer.clear": {},
    "conversation.item.create": {"item": (dict,), "previous_item_id": (str, type(None))},
    "conversation.item.retrieve": {"item_id": (str,)},
    "conversation.item.truncate": {"item_id": (str,), "content_index": (int,), "audio_end_ms": (int,)},
    "conversation.item.delete": {"item_id": (str,)},
    "response.create": {"response": (dict, type(None))},
    "response.cancel": {"response_id": (str, type(None))},
    "output_audio_buffer.clear": {},
}
REQUIRED = {"session.update": ("session",), "input_audio_buffer.append": ("audio",),
            "conversation.item.create": ("item",), "conversation.item.retrieve": ("item_id",),
            "conversation.item.truncate": ("item_id", "content_index", "audio_end_ms"),
            "conversation.item.delete": ("item_id",)}
MAX_EVENT_ID = 256


class RealtimeError(AgentError):
    """A client event the server refuses, in OpenAI's terms: ``type``, ``code``, ``message``, ``param`` and the
    ``event_id`` of the client event. Codes used: ``invalid_json``, ``invalid_event``, ``unknown_event``,
    ``unknown_parameter``, ``missing_required_parameter``, ``invalid_type``, ``invalid_value``,
    ``unsupported_parameter``, ``message_too_large`` and the app's own codes."""

    type = "invalid_request_error"
    code = "invalid_value"
    status = 400

    def __init__(self, message: str, *, code: str = "invalid_value", param: str | None = None,
                 event_id: str | None = None) -> None:
        super().__init__(message, code=code, param=param)
        self.event_id = event_id


def new_id(prefix: str) -> str:
    """A fresh id such as ``event_...`` or ``item_...``."""
    return f"{prefix}_{secrets.token_hex(10)}"


def error_body(exc: Exception, event_id: str | None = None) -> dict[str, Any]:
    """The ``error`` server event (without its own ``event_id``) for ``exc``; anything not an
    :class:`AgentError` is a ``server_error``."""
    if not isinstance(exc, AgentError):
        exc = AgentError(f"internal error: {type(exc).__name__}")
    return {"type": "error", "error": {
        "type": exc.type, "code": exc.code, "message": exc.message, "param": getattr(exc, "param", None),
        "event_id": event_id if event_id is not None else getattr(exc, "event_id", None)}}


def parse_client_event(raw: str | bytes, *, max_bytes: int) -> dict[str, Any]:
    """One client message as a checked event ``dict`` (see the module docstring); raises :class:`RealtimeError`."""
    size = len(raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw)
    if size > max_bytes:
        raise RealtimeError(f"the event is {size} bytes; the limit is {max_bytes}", code="message_too_large",
                            event_id=_peek_event_id(raw))
    try:
        data = json_limits.loads(raw)
    except json_limits.JSONLimitError as exc:
        raise RealtimeError(f"the event was refused: {exc}", code="invalid_json") from None
    except (ValueError, RecursionError) as exc:
        raise RealtimeError(f"the event is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise RealtimeError("an event must be a JSON object", code="invalid_event")
    event_id = data.get("event_id")
    if event_id is not None and (not isinstance(event_id, str) or len(event_id) > MAX_EVENT_ID):
        raise RealtimeError(f"event_id must be a string of at most {MAX_EVENT_ID} characters",
                            code="invalid_type", param="event_id")
    kind = data.get("type")
    if not isinstance(kind, str) or not kind:
        raise RealtimeError("an event needs a string 'type'", code="missing_required_parameter", param="type",
                            event_id=event_id)
    fields = CLIENT_TYPES.get(kind)
    if fields is None:
        shown = kind if len(kind) <= 64 else kind[:64] + "..."
        raise RealtimeError(f"Invalid value: {shown!r}. Supported values are: {', '.join(CLIENT_TYPES)}.",
                            code="unknown_event", param="type", event_id=event_id)
    for name, value in data.items():
        if name in ("type", "event_id"):
            continue
        if name not in fields:
            raise RealtimeError(f"Unknown parameter: {name!r}.", code="unknown_parameter", param=name,
                                event_id=event_id)
        kinds = fields[name]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise RealtimeError(f"Invalid type for {name!r}: expected {' or '.join(_type_name(k) for k in kinds)}.",
                                code="invalid_type", param=name, event_id=event_id)
    for name in REQUIRED.get(kind, ()):
        if name not in data:
            raise RealtimeError(f"Missing required parameter: {name!r}.", code="missing_required_parameter",
                                param=name, event_id=event_id)
    for name in ("content_index", "audio_end_ms"):
        if isinstance(data.get(name), int) and data[name] < 0:
            raise RealtimeError(f"{name} must be >= 0", code="invalid_value", param=name, event_id=event_id)
    return data


_EVENT_ID = re.compile(r'"event_id"\s*:\s*"([^"\\]{1,256})"')


def _peek_event_id(raw: str | bytes, window: int = 1024) -> str | None:
    """The ``event_id`` of a message too large to parse, when it is near either end (it usually is)."""
    for part in (raw[:window], raw[-window:]):
        text = part if isinstance(part, str) else part.decode("utf-8", "replace")
        match = _EVENT_ID.search(text)
        if match:
            return match.group(1)
    return None


def _type_name(kind: type) -> str:
    return {dict: "an object", str: "a string", int: "an integer", type(None): "null"}.get(kind, kind.__name__)
