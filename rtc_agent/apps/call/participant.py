"""One participant of a call room: who it is, what it wants, and how the room reaches its session."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from rtc_agent.apps.base import AppContext
from rtc_agent.apps.call.signal_relay import SignalBucket
from rtc_agent.protocol import ServerEvent

log = logging.getLogger(__name__)


@dataclass
class Participant:
    """One participant: its session context (``ctx``: emit, speech, spawn, now_ms, settings, worker), its
    languages (``language`` spoken, ``listen_language`` read and heard) and what it asked for."""

    id: str
    name: str
    language: str
    listen_language: str
    ctx: AppContext
    captions: bool = True
    interpret: bool = True
    listen_speech: bool = True  # false: translations as text only, no synthesis for this listener
    mic_muted: bool = False
    camera_muted: bool = False
    joined_at: float = field(default_factory=time.time)
    bucket: SignalBucket = field(default_factory=SignalBucket)  # its room.signal rate
    joined_mono: float = field(default_factory=time.monotonic)
    #: SFU rooms: ``speaker`` (publishes to the SFU) or ``listener`` (publishes nothing, is not a tile)
    role: str = "speaker"
    hand_raised: bool = False
    #: SFU rooms: its Janus publisher id once published (speakers)
    feed_id: int | None = None
    #: SFU rooms: the interpreter feed of its listen language, where its interpretation is spoken instead of on
    #: its own session's track (set by :mod:`rtc_agent.apps.call.sfu`)
    feed_speech: Any = None
    #: SFU rooms: where the audio the SFU forwards of this speaker enters its captions pipeline
    feed_audio: Any = None
    #: SFU rooms: the room's bridge to its Janus room (:class:`~rtc_agent.apps.call.sfu.SfuBridge`); None: mesh
    sfu: Any = None

    @property
    def speech_route(self) -> tuple[str, Any]:
        """``(key, sink)`` where its interpretation is spoken: its language's interpreter feed (shared by every
        listener of the language, so the key is the feed's) or its own session's track."""
        if self.feed_speech is not None:
            return f"feed:{self.listen_language}", self.feed_speech
        return self.id, self.ctx.speech

    @property
    def hears_speech(self) -> bool:
        """Whether interpretation is spoken for it (it asked for it, and its session or its language's interpreter
        feed can carry audio)."""
        return self.interpret and self.listen_speech and self.speech_route[1] is not None

    @property
    def tag(self) -> dict[str, str]:
        """How events name this participant as their ``speaker``."""
        return {"participant_id": self.id, "name": self.name}

    def public(self) -> dict[str, Any]:
        """What the other participants see of it (``room.joined``, ``room.participant.*``)."""
        return {"participant_id": self.id, "name": self.name, "language": self.language,
                "listen_language": self.listen_language, "mic_muted": self.mic_muted,
                "camera_muted": self.camera_muted, "interpret": self.interpret,
                "listen_speech": self.listen_speech, "role": self.role, "hand_raised": self.hand_raised,
                **({"feed_id": self.feed_id} if self.role == "speaker" else {})}

    def send(self, event: ServerEvent) -> None:
        """``event`` to its session; never raises (one dead channel must not stop a fan-out)."""
        try:
            self.ctx.emit(event)
        except Exception:
            log.exception("sending %s to participant %s failed", event.type, self.id)
