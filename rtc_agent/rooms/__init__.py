"""Call rooms (app ``call``): membership, fan-out of events, shared interpretation, transcripts.

- :mod:`rtc_agent.rooms.room`: :class:`Room`, :class:`Participant`, :class:`RoomRegistry` (one per server, found
  with :func:`registry_for` from the server settings), signal relay with validation and rate limits.
- :mod:`rtc_agent.rooms.interpretation`: one interpretation pipeline per (speaker, target language), shared by all
  listeners of that language (``translation.*``, ``caption.translation`` and one synthesis fanned out to their
  speech tracks).
- :mod:`rtc_agent.rooms.meetings`: meetings (the instances of a room name) that join links are bound to, when one
  ends, and how long ended meetings' transcripts stay readable.
- :mod:`rtc_agent.rooms.names`: display names unique among a room's live participants (``Ana``, ``Ana (2)``).
- :mod:`rtc_agent.rooms.transcript`: the speaker-labelled transcript and its WebVTT / JSON exports.
- :mod:`rtc_agent.rooms.routes`: ``POST /v1/rooms`` (join links) and ``GET /v1/rooms/{room}/transcript.vtt|json``.

Nothing here imports aiortc: media arrives from the session as 16 kHz arrays through the ``call`` app.
"""
