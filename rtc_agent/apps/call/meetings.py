"""Meetings: the instances of a call room, what join links are bound to, and the transcripts of ended ones.

A room name is reused; each time people meet under it is a *meeting*, with its own id (``mtg_`` + 16 hex digits)
and transcript. A name has at most one *current* meeting, in one of three states:

- *pending*: made by the first join link (``POST /v1/rooms``) while the name had no current meeting; nobody
  joined yet. It ends (silently: no transcript) when its last link, and every client token exchanged from its
  links, has expired.
- *live*: someone is in it. The first participant of a name with no current meeting (no link: API key, page
  sign-in, open mode) makes a new live meeting; everyone who joins the name, with or without a link, joins the
  current one.
- *idle*: the last participant left. It is still the current meeting (anyone who joins the name, a reconnecting
  page included, resumes it with the same transcript) until ``room_rejoin_grace_s`` has passed since then
  **and** every client token exchanged from its links has expired; then it has *ended*.

Every join link is minted for the current meeting of its name (its token scope: ``{room, meeting}``); a link of
a meeting that is no longer current is refused with 410 ``meeting_ended`` when it is exchanged for a client token.
Because a meeting stays current while any client token exchanged from its links lives, such a token (whose session
only names the room) can only ever join its own meeting.

Ended meetings with transcript lines stay readable, by meeting id, for ``room_transcript_ttl_s`` and at most
``room_transcripts_kept`` of them (the oldest go first); then they answer 404 and are freed. Expiry is checked
whenever the book is used (:meth:`MeetingBook.sweep`), with the book's ``clock`` (scripted in tests).
"""

from __future__ import annotations

import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rtc_agent.apps.call.transcript import Transcript
from rtc_agent.errors import AgentError, InvalidRequest, NotFound

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
    joined (kept while idle, so a resumed meeting keeps its transcript and clock)."""

    id: str
    name: str
    room: Any = None
    links_until: float = 0.0  # latest expiry of its join links
    tokens_until: float = 0.0  # latest expiry of the client tokens exchanged from those links
    emptied_at: float | None = None  # when the last participant left (None while live or pending)

    @property
    def state(self) -> str:
        if self.room is None:
            return "pending"
        return "idle" if self.emptied_at is not None else "live"


class MeetingBook:
    """The current meeting of every room name of one server, and the transcripts of ended meetings."""

    def __init__(self, settings: Any, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.clock = clock
        self.current: dict[str, Meeting] = {}
        self.ended: OrderedDict[str, tuple[str, Transcript, float]] = OrderedDict()  # id -> (name, transcript, expiry)
        # ids of the meetings that ended here, until their last link expires: never restored (see restore)
        self.gone: OrderedDict[str, float] = OrderedDict()

    @property
    def grace_s(self) -> float:
        return float(self.settings.room_rejoin_grace_s)

    @property
    def ttl_s(self) -> float:
        return float(self.settings.room_transcript_ttl_s)

    @property
    def kept(self) -> int:
        return int(self.settings.room_transcripts_kept)

    # --- lifecycle --------------------------------------------------------------------------------------

    def _over(self, meeting: Meeting, now: float) -> bool:
        if meeting.room is None:
            return now >= max(meeting.links_until, meeting.tokens_until)
        if meeting.emptied_at is None or meeting.room.participants:
            return False
        return now >= max(meeting.emptied_at + self.grace_s, meeting.tokens_until)

    def sweep(self) -> None:
        """End the current meetings that are over; free the ended transcripts past their TTL."""
        now = self.clock()
        for meeting in [m for m in self.current.values() if self._over(m, now)]:
            self._end(meeting, now)
        for meeting_id in [k for k, (_, _, expiry) in self.ended.items() if expiry <= now]:
            del self.ended[meeting_id]
        for meeting_id in [k for k, until in self.gone.items() if until <= now]:
            del self.gone[meeting_id]

    def _end(self, meeting: Meeting, now: float) -> None:
        if self.current.get(meeting.name) is meeting:
            del self.current[meeting.name]
        if meeting.links_until > now:
            self.gone[meeting.id] = meeting.links_until
            while len(self.gone) > MAX_GONE_IDS:
                self.gone.popitem(last=False)
        transcript = meeting.room.transcript if meeting.room is not None else None
        if transcript is None or not transcript.lines or self.kept <= 0 or self.ttl_s <= 0:
            return
        if transcript.ended_at is None:
            transcript.ended_at = now
        self.ended[meeting.id] = (meeting.name, transcript, now + self.ttl_s)
        while len(self.ended) > self.kept:
            self.ended.popitem(last=False)

    def get(self, name: str) -> Meeting | None:
        """The current meeting of ``name`` (pending, live or idle), if any."""
        self.sweep()
        return self.current.get(name)

    def find(self, meeting_id: str) -> Meeting | None:
        """The meeting with this id if it is the current meeting of its name (how a join token, which names its
    meeting, finds it)."""
        self.sweep()
        return next((m for m in self.current.values() if m.id == meeting_id), None)

    def restore(self, meeting_id: str, name: str, links_until: float) -> Meeting | None:
        """The meeting of a join link that this book has never seen (one minted before the server restarted,
        kept by the state store) made current again, pending, under its own id; None when ``name`` already has
        another current meeting or that meeting ended here (its links stay refused)."""
        if not MEETING_ID.match(meeting_id) or meeting_id in self.gone or meeting_id in self.ended:
            return None
        if self.get(name) is not None:
            return None
        meeting = self.current[name] = Meeting(id=meeting_id, name=name, links_until=links_until)
        return meeting

    def _current_or_new(self, name: str) -> Meeting:
        meeting = self.get(name)
        if meeting is None:
            meeting = self.current[name] = Meeting(id=new_meeting_id(), name=name)
        return meeting

    def for_link(self, name: str) -> Meeting:
        """The meeting a new join link of ``name`` is bound to (made pending if the name has none); call
        :meth:`linked` with the link's lifetime once it is minted."""
        return self._current_or_new(name)

    def linked(self, meeting: Meeting, ttl_s: float) -> None:
        """A join link of ``meeting`` valid for ``ttl_s`` more seconds was minted."""
        meeting.links_until = max(meeting.links_until, self.clock() + ttl_s)

    def bound(self, name: str, meeting_id: Any) -> Meeting:
        """The meeting a join link of ``name`` bound to ``meeting_id`` admits to: 410 once it is not current."""
        meeting = self.get(name)
        if meeting is None or meeting.id != meeting_id:
            raise MeetingEnded(f"the meeting of this join link (room {name!r}) has ended; ask for a new link")
        return meeting

    def exchanged(self, meeting: Meeting, ttl_s: float) -> None:
        """A client token that may join ``meeting`` for ``ttl_s`` more seconds is minted from one of its links:
        the meeting stays current until then (and :data:`SESSION_SETUP_MARGIN_S` more)."""
        meeting.tokens_until = max(meeting.tokens_until, self.clock() + ttl_s + SESSION_SETUP_MARGIN_S)

    def for_join(self, name: str) -> Meeting:
        """The meeting a participant joining ``name`` enters: the current one, else a new one."""
        meeting = self._current_or_new(name)
        meeting.emptied_at = None
        return meeting

    def emptied(self, meeting: Meeting) -> None:
        """The last participant of ``meeting`` left: it is idle from now."""
        meeting.emptied_at = self.clock()

    # --- transcripts ------------------------------------------------------------------------------------

    def transcript(self, name: str, meeting_id: str | None = None) -> Transcript:
        """The transcript of meeting ``meeting_id`` of ``name`` (current or ended), or without an id the current
        meeting's (once someone joined), else the latest ended one's; 404 when there is none (or it expired)."""
        self.sweep()
        meeting = self.current.get(name)
        if meeting is not None and meeting.room is not None and meeting_id in (None, meeting.id):
            return meeting.room.transcript
        if meeting_id is not None:
            entry = self.ended.get(meeting_id)
            if entry is None or entry[0] != name:
                raise NotFound(f"no meeting {meeting_id!r} of room {name!r} (live or recently ended)",
                               code="meeting_not_found")
            return entry[1]
        for ended_name, transcript, _ in reversed(self.ended.values()):
            if ended_name == name:
                return transcript
        raise NotFound(f"no room {name!r} (live or recently ended)", code="room_not_found")

