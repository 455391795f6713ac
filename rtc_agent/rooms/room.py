"""Rooms of the ``call`` app: membership, events to participants, signal relay, captions and interpretation.

A room exists while it has participants (at most ``max_room_participants``; one more gets 409 ``room_full``).
Every participant is one session of the ``call`` app, which hands the room its :class:`Participant` (how to
reach that session: ``emit``, its speech track, ``spawn``). The room

- announces membership: ``room.joined`` to the newcomer, ``room.participant.joined`` / ``.left`` / ``.updated``
  to the others;
- relays ``room.signal`` (browser-to-browser media signaling) after validating it: ``kind`` offer/answer/candidate,
  ``to`` another participant of the room, ``payload`` at most :data:`MAX_SIGNAL_BYTES` of JSON, at most
  :data:`SIGNAL_BURST` signals at once and :data:`SIGNAL_RATE` per second per sender; ``from`` is always set by
  the server;
- sends each speaker's ``caption.partial`` / ``caption.final`` to every participant who wants captions, with
  ``speaker {participant_id, name}``, and keeps the finals in the room's :class:`Transcript`;
- keeps one :class:`PairInterpreter` per (speaker, target language) where a listener's ``listen_language``
  differs from the speaker's ``language`` (an ``auto`` speaker is not interpreted: its language is unknown).

Display names are unique among a room's live participants (:mod:`rtc_agent.rooms.names`: ``Ana``, ``Ana (2)``).

The :class:`RoomRegistry` of a server is found from its settings object (:func:`registry_for`), so the ``call``
app, which only sees its session's context, and the HTTP routes share it. ``registry.rooms`` holds the live rooms;
each :class:`Room` is one meeting (:mod:`rtc_agent.rooms.meetings`: what join links are bound to, when a meeting
ends, how long ended meetings' transcripts stay).
"""

from __future__ import annotations

import json
import logging
import re
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rtc_agent.errors import AgentError, InvalidRequest, NotFound, PayloadTooLarge, RateLimited
from rtc_agent.protocol import ServerEvent
from rtc_agent.protocol.events import (
    CaptionFinal,
    CaptionPartial,
    CaptionTranslation,
    RoomJoined,
    RoomParticipantJoined,
    RoomParticipantLeft,
    RoomParticipantUpdated,
    RoomSignal,
)
from rtc_agent.rooms.meetings import Meeting, MeetingBook
from rtc_agent.rooms.names import unique_name
from rtc_agent.rooms.transcript import Transcript, TranscriptLine

log = logging.getLogger(__name__)

ROOM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
MAX_SIGNAL_BYTES = 32 * 1024  # an SDP offer with audio + video is 4-12 KB
SIGNAL_RATE = 30.0  # signals per second per sender (refill)
SIGNAL_BURST = 120  # an offer plus a burst of trickled candidates for every peer
SEGMENTS_KEPT = 64  # caption segments remembered per speaker, to attach translations to


class RoomFull(AgentError):
    type = "invalid_request_error"
    code = "room_full"
    status = 409


def check_room_name(value: Any) -> str:
    if not isinstance(value, str) or not ROOM_NAME.match(value):
        raise InvalidRequest("room must be 1-64 letters, digits, '-' or '_' (starting with a letter or digit)",
                             code="invalid_config")
    return value


CANDIDATE_KEYS = {"candidate": str, "sdpMid": str, "sdpMLineIndex": int, "usernameFragment": str}


def _clean_payload(kind: str, payload: Any) -> Any:
    """The relayed payload: only the fields a browser uses, with their types checked (``invalid_signal``)."""
    if kind in ("offer", "answer"):
        ok = (isinstance(payload, dict) and isinstance(payload.get("sdp"), str) and payload["sdp"].strip()
              and payload.get("type", kind) == kind)
        if not ok:
            raise InvalidRequest(f"a {kind} signal needs payload {{type: {kind!r}, sdp: '...'}}", code="invalid_signal")
        return {"type": kind, "sdp": payload["sdp"]}
    if payload is None:  # the end of candidates
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("candidate", ""), str):
        raise InvalidRequest("a candidate signal needs an RTCIceCandidateInit payload (or null)", code="invalid_signal")
    out = {}
    for key, kind_of in CANDIDATE_KEYS.items():
        value = payload.get(key)
        if value is None:
            continue
        if not isinstance(value, kind_of) or isinstance(value, bool):
            raise InvalidRequest(f"candidate field {key} has the wrong type", code="invalid_signal")
        out[key] = value
    return out


class _Bucket:
    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self.tokens = float(burst)
        self.at = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


@dataclass
class Participant:
    """One participant: its session context (``ctx``: emit, speech, spawn, now_ms, settings, worker)."""

    id: str
    name: str
    language: str
    listen_language: str
    ctx: Any
    captions: bool = True
    interpret: bool = True
    mic_muted: bool = False
    camera_muted: bool = False
    joined_at: float = field(default_factory=time.time)
    bucket: _Bucket = field(default_factory=lambda: _Bucket(SIGNAL_RATE, SIGNAL_BURST))
    joined_mono: float = field(default_factory=time.monotonic)

    @property
    def tag(self) -> dict[str, str]:
        return {"participant_id": self.id, "name": self.name}

    def public(self) -> dict[str, Any]:
        return {"participant_id": self.id, "name": self.name, "language": self.language,
                "listen_language": self.listen_language, "mic_muted": self.mic_muted,
                "camera_muted": self.camera_muted, "interpret": self.interpret}

    def send(self, event: ServerEvent) -> None:
        try:
            self.ctx.emit(event)
        except Exception:  # one participant's dead channel must not stop the fan-out
            log.exception("sending %s to participant %s failed", event.type, self.id)


def _base(language: str) -> str:
    return language.split("-")[0].lower()


class Room:
    """One meeting of the room ``name`` (``meeting_id``) while it is live or idle."""

    def __init__(self, name: str, registry: RoomRegistry, meeting_id: str = "") -> None:
        self.name = name
        self.registry = registry
        self.meeting_id = meeting_id
        self.participants: dict[str, Participant] = {}
        self.pairs: dict[tuple[str, str], Any] = {}  # (speaker id, target) -> PairInterpreter
        self.transcript = Transcript(name, meeting_id)
        self.created = time.monotonic()
        self._segments: dict[str, OrderedDict[str, tuple[int, int | None]]] = {}

    # --- membership -------------------------------------------------------------------------------------

    def join(self, p: Participant) -> None:
        if p.id in self.participants:
            return
        if len(self.participants) >= self.registry.max_participants:
            raise RoomFull(f"room {self.name!r} is full ({self.registry.max_participants} participants)")
        others = list(self.participants.values())
        p.name = self.free_name(p.name, p.id)
        self.participants[p.id] = p
        self.transcript.participants[p.id] = {"participant_id": p.id, "name": p.name, "language": p.language,
                                             "joined_at": p.joined_at}
        p.send(RoomJoined(room=self.name, participant_id=p.id,
                          participants=[x.public() for x in self.participants.values()]))
        for other in others:
            other.send(RoomParticipantJoined(room=self.name, participant=p.public()))
        self.reconcile()

    def leave(self, participant_id: str, reason: str | None = None) -> None:
        p = self.participants.pop(participant_id, None)
        if p is None:
            return
        self._segments.pop(participant_id, None)
        info = self.transcript.participants.get(participant_id)
        if info is not None:
            info["left_at"] = time.time()
        for other in self.participants.values():
            other.send(RoomParticipantLeft(room=self.name, participant_id=p.id, name=p.name, reason=reason))
        self.reconcile()
        if not self.participants:
            self.registry.ended(self)

    def free_name(self, name: str, participant_id: str) -> str:
        """``name``, suffixed if another live participant uses it (:func:`~rtc_agent.rooms.names.unique_name`)."""
        return unique_name(name, (x.name for x in self.participants.values() if x.id != participant_id))

    def update(self, p: Participant) -> None:
        info = self.transcript.participants.get(p.id)
        if info is not None:  # the transcript names people as they are now called and speak
            info.update(name=p.name, language=p.language)
        for other in self.participants.values():
            other.send(RoomParticipantUpdated(room=self.name, participant=p.public()))
        self.reconcile()

    # --- interpretation pairs ---------------------------------------------------------------------------

    def wanted_pairs(self) -> dict[tuple[str, str], list[Participant]]:
        """(speaker, target) -> its listeners, for every listener whose listen language differs."""
        out: dict[tuple[str, str], list[Participant]] = {}
        for speaker in self.participants.values():
            if speaker.language == "auto":
                continue
            for listener in self.participants.values():
                if listener is speaker or _base(listener.listen_language) == _base(speaker.language):
                    continue
                if not self.registry.can_translate(listener.listen_language):
                    continue
                out.setdefault((speaker.id, listener.listen_language), []).append(listener)
        return out

    def reconcile(self) -> None:
        """Start the pairs that are needed now, stop those that are not, and update who hears each."""
        from rtc_agent.rooms.interpretation import PairInterpreter

        wanted = self.wanted_pairs()
        for key in [k for k in self.pairs if k not in wanted]:
            self.pairs.pop(key).close()
        for key, listeners in wanted.items():
            pair = self.pairs.get(key)
            if pair is None:
                speaker = self.participants[key[0]]
                try:
                    pair = PairInterpreter(self, speaker, key[1])
                except AgentError as exc:
                    log.warning("room %s: no interpretation %s -> %s: %s", self.name, speaker.language, key[1], exc)
                    continue
                pair.start()
                self.pairs[key] = pair
            pair.set_listeners(listeners)

    # --- media and events -------------------------------------------------------------------------------

    def push_audio(self, speaker_id: str, audio: np.ndarray, start_ms: int) -> None:
        for (sid, _), pair in list(self.pairs.items()):
            if sid == speaker_id:
                pair.push_audio(audio, start_ms)

    def room_ms(self, p: Participant, audio_ms: int) -> int:
        """A position on ``p``'s session clock as ms since the room started."""
        now_room = int((time.monotonic() - self.created) * 1000)
        return max(0, now_room - max(0, p.ctx.now_ms() - audio_ms))

    def on_caption(self, speaker: Participant, event: CaptionPartial | CaptionFinal) -> None:
        segments = self._segments.setdefault(speaker.id, OrderedDict())
        final = isinstance(event, CaptionFinal)
        segments[event.segment_id] = (event.audio_start_ms, event.audio_end_ms if final else None)
        while len(segments) > SEGMENTS_KEPT:
            segments.popitem(last=False)
        tagged = event.model_copy(update={"speaker": speaker.tag})
        for p in self.participants.values():
            if p.captions or p is speaker:
                p.send(tagged)
        if final and event.text.strip():
            start = self.room_ms(speaker, event.audio_start_ms)
            end = self.room_ms(speaker, event.audio_end_ms)
            self.transcript.add(TranscriptLine(
                segment_id=event.segment_id, participant_id=speaker.id, name=speaker.name,
                language=event.language or (None if speaker.language == "auto" else speaker.language),
                text=event.text.strip(), start_ms=start, end_ms=end,
                at=self.transcript.created_at + start / 1000))

    def segment_at(self, speaker_id: str, audio_ms: int) -> str:
        """The speaker's caption segment that holds ``audio_ms`` (or the last one that started before it)."""
        best = None
        for segment_id, (start, _end) in self._segments.get(speaker_id, {}).items():
            if start <= audio_ms:
                best = segment_id
        return best or f"{speaker_id}_t{audio_ms}"

    def on_translation(self, speaker: Participant, event: CaptionTranslation) -> None:
        self.transcript.add_translation(speaker.id, event.segment_id, event.language, event.text)
        self.send_to_language(event.language, event, exclude=speaker.id, captions_only=True)

    def send_to_language(self, language: str, event: ServerEvent, *, exclude: str | None = None,
                         captions_only: bool = False) -> None:
        """``event`` to the listeners of ``language`` (only those who want captions, with ``captions_only``)."""
        for p in self.participants.values():
            if p.id != exclude and p.listen_language == language and (p.captions or not captions_only):
                p.send(event)

    def relay_signal(self, sender: Participant, to: str, kind: str, payload: Any) -> None:
        """Validate and relay one ``room.signal``; raises :class:`AgentError` (sent back as an ``error`` event)."""
        if not sender.bucket.take():
            raise RateLimited("too many room.signal messages; slow down", code="signal_rate_limited")
        target = self.participants.get(to)
        if target is None or target is sender:
            raise NotFound(f"no other participant {to!r} in room {self.name!r}", code="unknown_participant")
        try:
            size = len(json.dumps(payload, separators=(",", ":")).encode())
        except (TypeError, ValueError):
            raise InvalidRequest("room.signal payload must be JSON", code="invalid_signal") from None
        if size > MAX_SIGNAL_BYTES:
            raise PayloadTooLarge(f"room.signal payload of {size} bytes exceeds {MAX_SIGNAL_BYTES}",
                                  code="signal_too_large")
        target.send(RoomSignal(to=to, from_=sender.id, kind=kind, payload=_clean_payload(kind, payload)))

    def stats(self) -> dict[str, Any]:
        return {"room": self.name, "meeting_id": self.meeting_id,
                "participants": [p.public() for p in self.participants.values()],
                "interpretation": [pair.stats() for pair in self.pairs.values()]}


class RoomRegistry:
    """The live rooms of one server (``rooms``) and its meetings (``meetings``: current and ended)."""

    def __init__(self, settings: Any, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.rooms: dict[str, Room] = {}
        self.meetings = MeetingBook(settings, clock)

    @property
    def max_participants(self) -> int:
        return int(getattr(self.settings, "max_room_participants", 6))

    def can_translate(self, target: str) -> bool:
        from rtc_agent.engines import st

        return target == "en" or not st.english_only(self.settings)

    def check_room(self, name: str) -> None:
        """Raise :class:`RoomFull` when ``name`` has no free place (checked again at join)."""
        room = self.rooms.get(name)
        if room is not None and len(room.participants) >= self.max_participants:
            raise RoomFull(f"room {name!r} is full ({self.max_participants} participants)")

    def join(self, name: str, participant: Participant) -> Room:
        """Add ``participant`` to the current meeting of ``name`` (a new one if there is none)."""
        meeting: Meeting = self.meetings.for_join(name)
        room = meeting.room
        if room is None:
            room = meeting.room = Room(name, self, meeting.id)
        room.transcript.ended_at = None
        self.rooms[name] = room
        try:
            room.join(participant)
        except AgentError:
            if not room.participants:
                self.ended(room)
            raise
        return room

    def ended(self, room: Room) -> None:
        """``room`` has no participants left: its pipelines stop and its meeting is idle."""
        if self.rooms.get(room.name) is room:
            del self.rooms[room.name]
        for pair in room.pairs.values():
            pair.close()
        room.pairs.clear()
        room.transcript.ended_at = time.time()
        meeting = self.meetings.current.get(room.name)
        if meeting is not None and meeting.room is room:
            self.meetings.emptied(meeting)

    def transcript(self, name: str, meeting_id: str | None = None) -> Transcript:
        """See :meth:`MeetingBook.transcript`."""
        return self.meetings.transcript(name, meeting_id)


_REGISTRIES: dict[int, RoomRegistry] = {}


def registry_for(settings: Any) -> RoomRegistry:
    """The server's room registry, keyed by its settings object (shared by the ``call`` app and the routes)."""
    key = id(settings)
    registry = _REGISTRIES.get(key)
    if registry is None or registry.settings is not settings:
        registry = _REGISTRIES[key] = RoomRegistry(settings)
        weakref.finalize(settings, _REGISTRIES.pop, key, None)
    return registry
