"""Encoding server events and decoding client events, with the errors a client gets for bad input."""

from __future__ import annotations

import itertools
import secrets
from typing import Any

from pydantic import ValidationError

from rtc_agent.errors import AgentError
from rtc_agent.protocol.events.base import ClientEvent, ServerEvent
from rtc_agent.protocol.events.catalogue import CLIENT_EVENTS
from rtc_agent.protocol.events.session import Error, ErrorBody
from rtc_agent.protocol.json_limits import DEFAULT_MAX_DEPTH, DEFAULT_MAX_NUMBER_CHARS, JSONLimitError, loads


class ProtocolError(AgentError):
    """A client message that cannot be taken. The session goes on; the client gets an ``error`` event.

    Codes: ``message_too_large``, ``invalid_json``, ``invalid_event`` (not an object, no type, bad fields),
    ``unknown_event``.
    """

    type = "invalid_request_error"
    code = "invalid_event"
    status = 400

    def __init__(self, message: str, *, code: str, event_id: str | None = None) -> None:
        super().__init__(message, code=code)
        self.event_id = event_id


def decode(raw: str | bytes, *, max_bytes: int, max_depth: int = DEFAULT_MAX_DEPTH,
           max_number_chars: int = DEFAULT_MAX_NUMBER_CHARS) -> ClientEvent:
    """Parse and validate one client message. Raises :class:`ProtocolError` and nothing else.

    JSON nested deeper than ``max_depth`` or with a number literal longer than ``max_number_chars`` is refused
    with code ``invalid_json`` before Python converts it (see :mod:`rtc_agent.protocol.json_limits`).
    """
    size = len(raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw)
    if size > max_bytes:
        raise ProtocolError(f"message of {size} bytes exceeds the limit of {max_bytes}", code="message_too_large")
    try:
        data = loads(raw, max_depth=max_depth, max_number_chars=max_number_chars)
    except JSONLimitError as exc:
        raise ProtocolError(f"message refused: {exc}", code="invalid_json") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ProtocolError(f"message is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ProtocolError("an event must be a JSON object", code="invalid_event")
    event_type = data.get("type")
    raw_id = data.get("event_id")
    event_id = raw_id if isinstance(raw_id, str) else None
    if not isinstance(event_type, str) or not event_type:
        raise ProtocolError("an event needs a string 'type'", code="invalid_event", event_id=event_id)
    cls = CLIENT_EVENTS.get(event_type)
    if cls is None:
        raise ProtocolError(f"unknown event type {event_type!r}", code="unknown_event", event_id=event_id)
    try:
        return cls.model_validate(data)
    except RecursionError:
        raise ProtocolError(f"invalid {event_type}: nested too deeply", code="invalid_event",
                            event_id=event_id) from None
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'event'}: {err['msg']}" for err in exc.errors()[:5]
        )
        raise ProtocolError(f"invalid {event_type}: {problems}", code="invalid_event", event_id=event_id) from None


class EventIds:
    """Server event ids: a per-session random prefix and a counter, so ids are unique and ordered."""

    def __init__(self) -> None:
        self._prefix = "evt_" + secrets.token_hex(4)
        self._counter = itertools.count(1)

    def next(self) -> str:
        return f"{self._prefix}_{next(self._counter)}"


def encode(event: ServerEvent, *, event_id: str, session_ms: int) -> dict[str, Any]:
    """The wire form of a server event: its fields plus ``event_id`` and ``session_ms``."""
    data = event.model_dump(mode="json", exclude_none=False)
    data["event_id"] = event_id
    data["session_ms"] = int(session_ms)
    return data


def error_event(exc: AgentError, *, event_id: str | None = None) -> Error:
    """The ``error`` event for an exception a client should hear about."""
    return Error(error=ErrorBody(type=exc.type, code=exc.code, message=exc.message,
                                 event_id=event_id or getattr(exc, "event_id", None)))
