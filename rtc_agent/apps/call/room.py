"""One meeting of a call room: membership, events to participants, signal relay, captions and interpretation.

A room exists while it has participants (at most its host's ``max_participants``; one more gets 409
``room_full``). Every participant is one session of the ``call`` app, which hands the room its
:class:`~rtc_agent.apps.call.participant.Participant` (how to reach that session: ``emit``, its speech track,
``spawn``). The room

- announces membership: ``room.joined`` to the newcomer, ``room.participant.joined`` / ``.left`` / ``.updated``
  to the others;
- relays ``room.signal`` (browser-to-browser media signaling) after validating it
  (:mod:`rtc_agent.apps.call.signal_relay`); ``from`` is always set by the server;
- sends each speaker's ``caption.partial`` / ``caption.final`` to every participant who wants captions, with
  ``speaker {participant_id, name}``, and keeps the finals in the room's :class:`Transcript`;
- keeps one interpretation pair per (speaker, target language) where a listener's ``listen_language`` differs
  from the speaker's ``language`` (an ``auto`` speaker is not interpreted: its language is unknown). Pairs are
  made by the injected ``pair_factory`` (:func:`~rtc_agent.apps.call.pairs.make_pair` on a server: speech or
  text route), which is handed the room as its outlet (``segment_at``, ``segment_text``, ``on_translation``,
  ``send_to_language``), within the host's capacity (``admit_pair``). A listener whose pair cannot be made (no
  engine for its language, no capacity) gets one ``error`` event saying so (``unsupported_language``,
  ``interpretation_unavailable``) until that changes;
- hands each caption to the speaker's pairs (the text route translates finals) and sheds text-route backlog over
  ``room_mt_backlog``: a muted speaker's waiting finals first, then the oldest;
- replays the last ``room_replay_lines`` transcript lines to a newcomer (``caption.final`` and, in its language,
  ``caption.translation`` with ``replayed: true``).

Display names are unique among a room's live participants (:mod:`rtc_agent.apps.call.names`: ``Ana``,
``Ana (2)``). The room's host (:class:`~rtc_agent.apps.call.room_registry.RoomRegistry`) says how many may join
and which languages can be interpreted into, and hears when the room has emptied.
"""

from __future__ import annotations

import logging
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from rtc_agent.apps.call.names import unique_name
from rtc_agent.apps.call.participant import Participant
from rtc_agent.apps.call.signal_relay import relayed_payload
from rtc_agent.apps.call.transcript import Transcript, TranscriptLine
from rtc_agent.errors import AgentError, InvalidRequest, NotFound, RateLimited
from rtc_agent.protocol import ServerEvent, error_event
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

log = logging.getLogger(__name__)

ROOM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
SEGMENTS_KEPT = 64  # caption segments remembered per speaker, to attach translations to


class RoomFull(AgentError):
    type = "invalid_request_error"
    code = "room_full"
    status = 409


def check_room_name(value: Any) -> str:
    """``value`` if it is a room name (1-64 letters, digits, ``-``, ``_``), else 400 ``invalid_config``."""
    if not isinstance(value, str) or not ROOM_NAME.match(value):
        raise InvalidRequest("room must be 1-64 letters, digits, '-' or '_' (starting with a letter or digit)",
                             code="invalid_config")
    return value


class InterpretationPair(Protocol):
    """The interpretation of one speaker into one target language, as the room drives it."""

    def start(self) -> None: ...

    def push_audio(self, audio: np.ndarray, start_ms: int) -> None: ...

    def set_listeners(self, listeners: list[Participant]) -> None: ...

    def on_caption(self, event: CaptionPartial | CaptionFinal) -> None: ...

    def stats(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


#: ``(outlet, speaker, target)`` -> a pair not started yet; raises :class:`AgentError` when there can be none.
PairFactory = Callable[["Room", Participant, str], InterpretationPair]


class RoomHost(Protocol):
    """What a room asks of the registry that holds it."""

    @property
    def max_participants(self) -> int: ...

    @property
    def mt_backlog(self) -> int:
        """Caption finals the room's text-route pairs may hold waiting, all together."""
        ...

    @property
    def replay_lines(self) -> int:
        """Transcript lines a newcomer gets."""
        ...

    def can_translate(self, target: str) -> bool: ...

    def admit_pair(self, room: Room, target: str) -> None:
        """Raise :class:`AgentError` when ``room`` may not start one more pair into ``target`` now."""
        ...

    def ended(self, room: Room) -> None:
        """The room has no participants left."""
        ...


def _base(language: str) -> str:
    return language.split("-")[0].lower()


class Room:
    """One meeting of the room ``name`` (``meeting_id``) while it is live or idle."""

    def __init__(self, name: str, host: RoomHost, meeting_id: str = "", *, pair_factory: PairFactory,
                 transcript: Transcript | None = None) -> None:
        """``transcript``: the meeting's (restored from the state store: the room clock goes on from its
        ``created_at``); a new one by default."""
        self.name = name
        self.host = host
        self.meeting_id = meeting_id
        self.pair_factory = pair_factory
        self.participants: dict[str, Participant] = {}
        self.pairs: dict[tuple[str, str], InterpretationPair] = {}  # (speaker id, target) -> its pair
        self.transcript = transcript if transcript is not None else Transcript(name, meeting_id)
        self.created = time.monotonic() - max(0.0, time.time() - self.transcript.created_at)
        self._segments: dict[str, OrderedDict[str, tuple[int, int | None, str]]] = {}
        self._told: dict[tuple[str, str, str], str] = {}  # (listener, speaker, target) -> the error code sent
        self._announced_gone: set[str] = set()  # members told gone (room.participant.left) who finish their speech
        #: an SFU room's bridge to its Janus room (:mod:`rtc_agent.apps.call.sfu`), adopted from its first member;
        #: None: a browser-to-browser mesh
        self.sfu: Any = None

    @property
    def max_participants(self) -> int:
        """Most members: the host's mesh limit, or the SFU room's speakers plus listeners."""
        return self.sfu.max_participants if self.sfu is not None else self.host.max_participants

    # --- membership -------------------------------------------------------------------------------------

    def join(self, p: Participant) -> None:
        if p.id in self.participants:
            return
        if not self.participants:  # an empty room (re)opens in its first member's mode: its bridge or a mesh
            self.sfu = p.sfu
        if len(self.participants) >= self.max_participants:
            raise RoomFull(f"room {self.name!r} is full ({self.max_participants} participants)")
        others = list(self.participants.values())
        p.name = self.free_name(p.name, p.id)
        self.participants[p.id] = p
        self.transcript.note_participant(p.id, name=p.name, language=p.language, joined_at=p.joined_at)
        sfu = self.sfu  # in an SFU room, past 20 listeners only their count travels (room.sfu.updated)
        p.send(RoomJoined(room=self.name, participant_id=p.id,
                          participants=[x.public() for x in self.participants.values()
                                        if (sfu is None or x is p or sfu.listed(x))
                                        and x.id not in self._announced_gone],
                          **(sfu.joined_fields(p) if sfu is not None else {})))
        for other in others if sfu is None or sfu.listed(p) else ():
            other.send(RoomParticipantJoined(room=self.name, participant=p.public()))
        self.replay(p)
        self.reconcile()

    def announce_leaving(self, participant_id: str, reason: str | None = None) -> None:
        """Tell the others at once that ``participant_id`` is gone (``room.participant.left``) while it still
        finishes its last caption (and that caption's interpretation); :meth:`leave` then only removes it."""
        p = self.participants.get(participant_id)
        if p is None or participant_id in self._announced_gone:
            return
        self._announced_gone.add(participant_id)
        for other in self.participants.values() if self.sfu is None or self.sfu.listed(p) else ():
            if other is not p:
                other.send(RoomParticipantLeft(room=self.name, participant_id=p.id, name=p.name, reason=reason))

    def leave(self, participant_id: str, reason: str | None = None) -> None:
        self.announce_leaving(participant_id, reason)
        self._announced_gone.discard(participant_id)
        p = self.participants.pop(participant_id, None)
        if p is None:
            return
        self._segments.pop(participant_id, None)
        if participant_id in self.transcript.participants:
            self.transcript.note_participant(participant_id, left_at=time.time())
        self.reconcile()
        if not self.participants:
            self.host.ended(self)

    def free_name(self, name: str, participant_id: str) -> str:
        """``name``, suffixed if another live participant uses it (:func:`~rtc_agent.apps.call.names.unique_name`)."""
        return unique_name(name, (x.name for x in self.participants.values()
                                  if x.id != participant_id and x.id not in self._announced_gone))

    def update(self, p: Participant) -> None:
        if p.id in self.transcript.participants:  # the transcript names people as they are now called and speak
            self.transcript.note_participant(p.id, name=p.name, language=p.language)
        for other in self.participants.values():
            other.send(RoomParticipantUpdated(room=self.name, participant=p.public()))
        self.reconcile()

    # --- interpretation pairs ---------------------------------------------------------------------------

    def wanted_pairs(self) -> dict[tuple[str, str], list[Participant]]:
        """(speaker, target) -> its listeners, for every listener whose listen language differs."""
        out: dict[tuple[str, str], list[Participant]] = {}
        for speaker in self.participants.values():
            if speaker.language == "auto" or speaker.role == "listener":  # a listener says nothing
                continue
            for listener in self.participants.values():
                if listener is speaker or _base(listener.listen_language) == _base(speaker.language):
                    continue
                out.setdefault((speaker.id, listener.listen_language), []).append(listener)
        return out

    def reconcile(self) -> None:
        """Start the pairs that are needed now, stop those that are not, update who hears each, and tell the
        listeners of a pair that cannot be had why."""
        wanted = self.wanted_pairs()
        for key in [k for k in self.pairs if k not in wanted]:
            self.pairs.pop(key).close()
        told = dict(self._told)
        self._told = {}
        for key, listeners in wanted.items():
            pair = self.pairs.get(key)
            if pair is None:
                speaker = self.participants[key[0]]
                try:
                    self.host.admit_pair(self, key[1])
                    pair = self.pair_factory(self, speaker, key[1])
                except AgentError as exc:
                    log.info("room %s: no interpretation %s -> %s: %s", self.name, speaker.language, key[1], exc)
                    for listener in listeners:
                        told_key = (listener.id, key[0], key[1])
                        if told.get(told_key) != exc.code:  # once, not on every membership change
                            listener.send(error_event(exc))
                        self._told[told_key] = exc.code
                    continue
                pair.start()
                self.pairs[key] = pair
            pair.set_listeners(listeners)

    def close_pairs(self, speaker_id: str | None = None) -> None:
        """Stop the pairs of ``speaker_id`` (every pair without one)."""
        for key in [k for k in self.pairs if speaker_id is None or k[0] == speaker_id]:
            self.pairs.pop(key).close()

    # --- media and events -------------------------------------------------------------------------------

    def shed(self) -> None:
        """Keep the text route's waiting finals within ``room_mt_backlog``: a muted speaker's go first (its words
        are the least current), then the longest queue's oldest."""
        limit = self.host.mt_backlog
        queued = [pair for pair in self.pairs.values() if getattr(pair, "pending", None)]
        while sum(len(pair.pending) for pair in queued) > limit:
            muted = [p for p in queued if p.pending and getattr(self.participants.get(p.key[0]), "mic_muted", False)]
            victim = muted[0] if muted else max(queued, key=lambda p: len(p.pending))
            victim.drop_oldest("muted" if muted else "behind")

    def replay(self, p: Participant) -> None:
        """The room's recent transcript lines to the newcomer ``p``, each with its translation into ``p``'s
        language when there is one (both marked ``replayed``)."""
        count = self.host.replay_lines
        for line in self.transcript.lines[-count:] if count else []:
            tag = {"participant_id": line.participant_id, "name": line.name}
            if p.captions:
                p.send(CaptionFinal(segment_id=line.segment_id, text=line.text, audio_start_ms=line.start_ms,
                                    audio_end_ms=line.end_ms, language=line.language, speaker=tag, replayed=True))
            translated = line.translations.get(p.listen_language)
            if translated and p.captions:
                p.send(CaptionTranslation(segment_id=line.segment_id, speaker=tag, language=p.listen_language,
                                          text=translated, audio_start_ms=line.start_ms, audio_end_ms=line.end_ms,
                                          source_text=line.text, source_language=line.language, replayed=True))

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
        text = event.text if final else f"{event.committed} {event.tentative}"
        segments[event.segment_id] = (event.audio_start_ms, event.audio_end_ms if final else None,
                                      " ".join(text.split()))
        while len(segments) > SEGMENTS_KEPT:
            segments.popitem(last=False)
        tagged = event.model_copy(update={"speaker": speaker.tag})
        for p in self.participants.values():
            if p.captions or p is speaker:
                p.send(tagged)
        for (sid, _), pair in list(self.pairs.items()):
            if sid == speaker.id:
                pair.on_caption(event)
        self.shed()
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
        for segment_id, (start, _end, _text) in self._segments.get(speaker_id, {}).items():
            if start <= audio_ms:
                best = segment_id
        return best or f"{speaker_id}_t{audio_ms}"

    def segment_text(self, speaker_id: str, segment_id: str) -> str | None:
        """The caption text of ``segment_id`` as far as it is known (the final, else the latest partial)."""
        known = self._segments.get(speaker_id, {}).get(segment_id)
        return (known[2] or None) if known is not None else None

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
        target.send(RoomSignal(to=to, from_=sender.id, kind=kind, payload=relayed_payload(kind, payload)))

    def stats(self) -> dict[str, Any]:
        return {"room": self.name, "meeting_id": self.meeting_id,
                "participants": [p.public() for p in self.participants.values()],
                "interpretation": [pair.stats() for pair in self.pairs.values()]}
