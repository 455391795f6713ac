"""The event catalogue: every event class by its ``type``, one table for each direction."""

from __future__ import annotations

from types import ModuleType
from typing import TypeVar

import rtc_agent.protocol.events.agent as agent_events
import rtc_agent.protocol.events.call as call_events
import rtc_agent.protocol.events.client as client_events
import rtc_agent.protocol.events.media as media_events
import rtc_agent.protocol.events.session as session_events
from rtc_agent.protocol.events.base import ClientEvent, ServerEvent

_Event = TypeVar("_Event", ClientEvent, ServerEvent)


def _by_type(root: type[_Event], *modules: ModuleType) -> dict[str, type[_Event]]:
    """The subclasses of ``root`` with a fixed ``type`` that ``modules`` define, by that type, in the modules'
    order and then in definition order."""
    table: dict[str, type[_Event]] = {}
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, root) and value.__module__ == module.__name__:
                event_type = value.model_fields["type"].default
                if isinstance(event_type, str):
                    table[event_type] = value
    return table


CLIENT_EVENTS: dict[str, type[ClientEvent]] = _by_type(ClientEvent, client_events)
SERVER_EVENTS: dict[str, type[ServerEvent]] = _by_type(
    ServerEvent, session_events, media_events, agent_events, call_events
)
