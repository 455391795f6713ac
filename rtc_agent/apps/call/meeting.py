"""One meeting of a call room (:class:`Meeting`) and meeting ids; the book of meetings is
:mod:`rtc_agent.apps.call.meetings`, which re-exports these names."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from rtc_agent.apps.call.transcript import Transcript
from rtc_agent.errors import AgentError, InvalidRequest

MEETING_ID = re.compile(r"^mtg_[0-9a-f]{16}$")
# A session joins its room some seconds after its client token was checked (the offer is applied and candidates
# gathered first, up to 10 s each): a meeting stays current this much longer than the tokens from its links.
SESSION_SETUP_MARGIN_S = 30.0
MAX_GONE_IDS = 10000  # ended meetings whose links are still live, remembered so those links stay refused


class MeetingEnded(AgentError):
    type = "invalid_request_error"
    code = "meeting_ended"
    status = 410


def new_meeting_id() -> str:
    return "mtg_" + secrets.token_hex(8)


def check_meeting_id(value: Any) -> str:
    """``value`` if it is a meeting id, else 400 ``invalid_meeting``."""
    if not isinstance(value, str) or not MEETING_ID.match(value):
        raise InvalidRequest("meeting must be a meeting id (mtg_ and 16 hex digits)", code="invalid_meeting")
    return value


@dataclass
class Meeting:
    """The current meeting of a room name. ``room`` is its :class:`~rtc_agent.apps.call.room.Room` once someone
    joined here (kept while idle, so a resumed meeting keeps its clock); ``transcript`` is the meeting's (the room
    writes into it); ``joined``: someone joined it (here, or on the server it was restored from)."""

    id: str
    name: str
    room: Any = None
    links_until: float = 0.0  # latest expiry of its join links
    tokens_until: float = 0.0  # latest expiry of the client tokens exchanged from those links
    emptied_at: float | None = None  # when the last participant left (None while live or pending)
    joined: bool = False
    transcript: Transcript = field(default_factory=lambda: Transcript(""))

    @property
    def state(self) -> str:
        if not self.joined:
            return "pending"
        return "idle" if self.emptied_at is not None else "live"

    def record(self) -> dict[str, Any]:
        """What the meeting directory of the state store keeps of it."""
        return {"id": self.id, "name": self.name, "joined": self.joined, "links_until": self.links_until,
                "tokens_until": self.tokens_until, "emptied_at": self.emptied_at,
                "created_at": self.transcript.created_at}


def number(value: Any) -> float | None:
    """``value`` as a float when it is a JSON number (not a bool), else None."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
