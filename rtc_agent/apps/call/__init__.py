"""The ``call`` app and its rooms: membership, fan-out of events, shared interpretation, transcripts.

- :mod:`rtc_agent.apps.call.app`: :class:`CallApp`, one participant's session in a room.
- :mod:`rtc_agent.apps.call.room_registry`: :class:`RoomRegistry`, the rooms and meetings of one server (made by
  the composition root; the app reaches it through its session context, ``ctx.rooms``).
- :mod:`rtc_agent.apps.call.room`: :class:`~rtc_agent.apps.call.room.Room`, one meeting's membership, captions and
  interpretation pairs; :mod:`rtc_agent.apps.call.participant`: one participant;
  :mod:`rtc_agent.apps.call.signal_relay`: what a ``room.signal`` may carry, and how fast.
- :mod:`rtc_agent.apps.call.interpretation`: one interpretation pipeline per (speaker, target language), shared by
  all listeners of that language (``translation.*``, ``caption.translation`` and one synthesis fanned out to their
  speech tracks by :mod:`rtc_agent.apps.call.speech_fanout`).
- :mod:`rtc_agent.apps.call.meetings`: meetings (the instances of a room name) that join links are bound to, when
  one ends, and how long ended meetings' transcripts stay readable.
- :mod:`rtc_agent.apps.call.names`: display names unique among a room's live participants (``Ana``, ``Ana (2)``).
- :mod:`rtc_agent.apps.call.transcript`: the speaker-labelled transcript and its WebVTT / JSON exports.
- :mod:`rtc_agent.apps.call.meeting_store` and :mod:`rtc_agent.apps.call.transcript_store`: meetings and their
  transcripts in the state store (a restart, another node), written in order by
  :mod:`rtc_agent.apps.call.store_journal`.

The HTTP routes (``POST /v1/rooms`` join links, ``GET /v1/rooms/{room}/transcript.vtt|json``) are
:mod:`rtc_agent.server.room_links`. Nothing here imports aiortc: media arrives from the session as 16 kHz arrays.
"""

from rtc_agent.apps.call.app import CallApp
from rtc_agent.apps.call.meetings import MeetingEnded, check_meeting_id
from rtc_agent.apps.call.room import check_room_name
from rtc_agent.apps.call.room_registry import RoomRegistry

__all__ = ["CallApp", "MeetingEnded", "RoomRegistry", "check_meeting_id", "check_room_name"]
