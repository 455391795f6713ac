"""The ``call`` app: one participant of a call room.

Config ``{room, name, language, listen_language, captions, interpret, listen_speech, mic_muted,
camera_muted}``: ``language`` is what I
speak (a Whisper code or ``auto``), ``listen_language`` what I want to read and hear (default: ``language``;
``auto`` means English), ``captions`` whether I get everyone's captions, ``interpret`` whether I hear the
interpretation of speakers of other languages on this session's audio track, ``listen_speech`` (default true)
false for text only (no synthesis for me), ``mic_muted`` / ``camera_muted`` (default false) how I join (a page
that rejoins keeps its mute state). A ``listen_language`` this server cannot deliver (see
:mod:`rtc_agent.apps.interpret.deliverable`) is refused with ``unsupported_language`` (400 at creation, an
``error`` event on ``session.update``, which then changes nothing).

Media between participants goes browser to browser; this session carries my microphone up (captions of my speech
for everyone, interpretation for listeners of other languages) and interpretation speech down. My speech is
transcribed once by the captions pipeline (:class:`~rtc_agent.apps.captions.CaptionsApp`, vision off) whose
events the room fans out with ``speaker``. Client events: ``room.signal`` (relayed to another participant),
``session.update`` (``language``, ``listen_language``, ``captions``, ``interpret``, ``listen_speech``,
``mic_muted``, ``camera_muted``, ``name``; validated whole before anything changes), ``input_audio_buffer.commit``.

One mute state: ``input_audio.muted {muted}`` and ``session.update {mic_muted}`` set the same participant flag
(whichever comes first; the other changes nothing more); a change ends my utterance in progress at once, is
announced to everyone (``room.participant.updated``) and, while muted, nothing of my microphone reaches the
room (its audio counts as silence, whatever the track sends).

Display names are unique in a room: a ``name`` another live participant already uses gets a suffix (``Ana (2)``,
:mod:`rtc_agent.apps.call.names`) when joining or renaming; the session's config (``session.created`` /
``session.updated``) and its own entry in ``room.joined`` carry the final name.

A listener (``role: "listener"``, SFU rooms only) says nothing: its session has no captions pipeline at all (no
transcriber, no VAD, no place in the captions' decode plans, no engines in ``session.created``); it reads the
speakers' captions and hears the interpretation like everyone.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from rtc_agent.apps.base import App, AppContext
from rtc_agent.apps.call.names import MAX_NAME
from rtc_agent.apps.call.participant import Participant
from rtc_agent.apps.call.room import Room, check_room_name
from rtc_agent.apps.call.sfu import rooms as sfu
from rtc_agent.apps.captions import CaptionsApp
from rtc_agent.apps.captions.app import check_language
from rtc_agent.apps.interpret.deliverable import check_listen
from rtc_agent.apps.limits import show, show_keys
from rtc_agent.errors import InvalidRequest
from rtc_agent.protocol import ClientEvent, ServerEvent
from rtc_agent.protocol.events import (
    CaptionFinal,
    CaptionPartial,
    InputAudioBufferCommit,
    RoomHand,
    RoomSignalClient,
    SessionUpdate,
    SessionUpdated,
)

CONFIG_KEYS = frozenset({"room", "name", "language", "listen_language", "captions", "interpret", "listen_speech",
                         "mic_muted", "camera_muted", "mode", "role"})
LIVE_KEYS = frozenset({"name", "language", "listen_language", "captions", "interpret", "listen_speech", "mic_muted",
                       "camera_muted"})
FLAGS = ("captions", "interpret", "listen_speech")
MUTES = ("mic_muted", "camera_muted")


def _name(value: Any) -> str:
    if value is None:
        return "Guest"
    if not isinstance(value, str):
        raise InvalidRequest(f"name must be a string, got {show(value)}", code="invalid_config")
    clean = " ".join("".join(ch for ch in value if ch.isprintable()).split())[:MAX_NAME]
    return clean or "Guest"


def _flag(config: dict[str, Any], key: str, default: bool) -> bool:
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise InvalidRequest(f"{key} must be true or false, got {show(value)}", code="invalid_config")
    return value


def _listen(value: Any) -> str:
    language = check_language(value)
    return "en" if language == "auto" else language


class _SpeakerContext:
    """The captions pipeline's view of the session: its events go to the room (with ``speaker``)."""

    def __init__(self, app: CallApp) -> None:
        self._app = app
        ctx = app.ctx
        self.session_id = ctx.session_id
        self.speech = None
        self.rooms = None  # the captions pipeline joins no room
        self.worker = ctx.worker
        self.settings = ctx.settings

    @property
    def close_reason(self) -> str | None:
        return getattr(self._app.ctx, "close_reason", None)

    def now_ms(self) -> int:
        return self._app.ctx.now_ms()

    def emit(self, event: ServerEvent) -> None:
        if isinstance(event, CaptionPartial | CaptionFinal) and self._app.room is not None:
            self._app.room.on_caption(self._app.participant, event)
        elif not isinstance(event, SessionUpdated):
            self._app.ctx.emit(event)

    def observe(self, stage: str, seconds: float) -> None:
        self._app.ctx.observe(stage, seconds)

    def spawn(self, coro: Any, name: str) -> asyncio.Task:
        return self._app.ctx.spawn(coro, name)


class CallApp(App):
    name = "call"
    title = "Call"
    description = "A video call for up to six people with live captions and interpretation of everyone."
    uses_video = False  # video goes browser to browser

    def __init__(self, ctx: AppContext, config: dict[str, Any]) -> None:
        super().__init__(ctx, config)
        self.participant = Participant(id=ctx.session_id, name=config["name"], language=config["language"],
                                       listen_language=config["listen_language"], ctx=ctx,
                                       captions=config["captions"], interpret=config["interpret"],
                                       listen_speech=config["listen_speech"], mic_muted=config["mic_muted"],
                                       camera_muted=config["camera_muted"], role=config.get("role", "speaker"))
        self.participant.feed_audio = self._take_audio  # an SFU room's audio of me (rtc_agent.apps.call.sfu)
        self.room: Room | None = None
        self.captions: CaptionsApp | None = None  # a listener's session transcribes nothing
        if self.participant.role != "listener":
            captions_config = CaptionsApp.validate_config({"language": config["language"], "vision": False},
                                                          ctx.settings)
            self.captions = CaptionsApp(_SpeakerContext(self), captions_config)

    @classmethod
    def validate_config(cls, config: dict[str, Any], settings: Any) -> dict[str, Any]:
        unknown = set(config) - CONFIG_KEYS
        if unknown:
            raise InvalidRequest(f"unknown call config keys: {show_keys(unknown)}", code="invalid_config")
        if "room" not in config:
            raise InvalidRequest("a call needs a 'room' name", code="invalid_config")
        language = check_language(config.get("language", "auto"), settings)
        mode, role = sfu.check_mode(config)
        out = {
            "room": check_room_name(config["room"]),
            "name": _name(config.get("name")),
            "language": language,
            "listen_language": _listen(config.get("listen_language", language)),
            **{key: _flag(config, key, True) for key in FLAGS},
            **{key: _flag(config, key, False) for key in MUTES},
            **({"mode": mode} if mode is not None else {}),
            "role": role,
        }
        check_listen(settings, out["listen_language"], language)
        return out

    @classmethod
    def admit(cls, config: dict[str, Any], rooms: Any) -> None:
        """409 ``room_full`` when the room has no free place (checked again when the session joins it)."""
        if rooms is not None:
            rooms.check_room(config["room"])

    def engines(self) -> dict[str, str]:
        return self.captions.engines() if self.captions is not None else {}

    async def start(self) -> None:
        rooms = self.ctx.rooms
        if rooms is None:
            raise InvalidRequest("this server has no call rooms for this session", code="invalid_config")
        await rooms.meetings.load(self.config["room"])  # a meeting from before a restart, or of another server
        # an SFU room: the Janus room opens for its first member, each member gets its token (before joining)
        bridge = await sfu.admit(rooms, self.config["room"], self.config.get("mode"), self.participant)
        try:
            self.room = rooms.join(self.config["room"], self.participant)
        except Exception:
            await sfu.leave(rooms, self.participant)
            raise
        sfu.joined(bridge, self.room)
        self.config["name"] = self.participant.name  # suffixed if another participant has this name
        if self.captions is not None:
            await self.captions.start()

    def on_audio(self, pcm: np.ndarray, start_ms: int) -> None:
        if self.participant.sfu is None:  # in an SFU room my audio comes through the SFU (feed_audio)
            self._take_audio(pcm, start_ms)

    def _take_audio(self, pcm: np.ndarray, start_ms: int) -> None:
        """My microphone's 16 kHz samples into my captions and my interpretation pairs."""
        if self.room is None or self.captions is None:
            return  # not in the room yet, or a listener: nothing of mine is heard
        if self.participant.mic_muted:
            pcm = np.zeros_like(pcm)  # muted: silence for the room, whatever the (possibly live) track sends
        self.captions.on_audio(pcm, start_ms)
        if any(sid == self.participant.id for sid, _ in self.room.pairs):
            self.room.push_audio(self.participant.id, pcm.astype(np.float32) / 32768.0, start_ms)

    async def on_event(self, event: ClientEvent) -> None:
        if isinstance(event, RoomSignalClient):
            if self.room is None:
                raise InvalidRequest("not in a room yet", code="not_joined")
            self.room.relay_signal(self.participant, event.to, event.kind, event.payload)
            return
        if isinstance(event, SessionUpdate):
            self._update(event.session.get("config", event.session))
            return
        if isinstance(event, InputAudioBufferCommit):
            if self.captions is not None:  # a listener has no utterance to commit
                await self.captions.on_event(event)
            return
        if isinstance(event, RoomHand):
            if self.room is None or self.participant.sfu is None:
                raise InvalidRequest("room.hand is for SFU rooms (mode 'sfu')", code="not_sfu_room")
            if event.raised != self.participant.hand_raised:
                self.participant.hand_raised = event.raised
                self.room.update(self.participant)
            return
        await super().on_event(event)

    def _update(self, update: Any) -> None:
        if not isinstance(update, dict):
            raise InvalidRequest("session.update needs an object of settings", code="invalid_config")
        update = {k: v for k, v in update.items() if k not in ("type", "app")}
        if "room" in update and update["room"] != self.config["room"]:
            raise InvalidRequest("the room cannot change during a session; join the other room with a new session",
                                 code="invalid_config")
        update.pop("room", None)
        unknown = set(update) - LIVE_KEYS
        if unknown:
            raise InvalidRequest(f"unknown call settings: {show_keys(unknown)}", code="invalid_config")
        p = self.participant
        seen = p.public()
        # validate everything first: a refused update changes nothing
        new = {key: _flag(update, key, True) for key in FLAGS if key in update}
        new.update({key: _flag(update, key, False) for key in MUTES if key in update})
        language = check_language(update["language"], self.ctx.settings) if "language" in update else p.language
        listen = _listen(update["listen_language"]) if "listen_language" in update else p.listen_language
        if "language" in update or "listen_language" in update:
            check_listen(self.ctx.settings, listen, language)
        name = _name(update["name"]) if "name" in update else None
        if language != p.language and self.captions is not None:
            self.captions.transcriber.set_language(None if language == "auto" else language, None)
        new_language = language != p.language
        p.language = self.config["language"] = language
        p.listen_language = self.config["listen_language"] = listen
        if name is not None:
            p.name = self.config["name"] = self.room.free_name(name, p.id) if self.room is not None else name
        if "mic_muted" in new and new["mic_muted"] != p.mic_muted and self.captions is not None:
            self.captions.set_input_muted(new["mic_muted"])  # muting ends my utterance now
        for key, value in new.items():
            setattr(p, key, value)
            self.config[key] = value
        if new_language and self.room is not None:  # a new source language: new pipelines
            self.room.close_pairs(p.id)
        if p.sfu is not None:  # my language's interpreter feed
            p.sfu.listen_changed(p)
        self.ctx.emit(SessionUpdated(session={"config": self.config}))
        if self.room is not None and p.public() != seen:  # the room hears of changes only
            self.room.update(p)

    def set_input_muted(self, muted: bool) -> None:
        """``input_audio.muted``: the same mute state as ``session.update {mic_muted}`` (see the module); the room
        hears of a change only."""
        super().set_input_muted(muted)
        muted = bool(muted)
        if muted == self.participant.mic_muted:
            return
        if self.captions is not None:
            self.captions.set_input_muted(muted)
        self.participant.mic_muted = self.config["mic_muted"] = muted
        if self.room is not None:
            self.room.update(self.participant)

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"captions": self.captions.stats() if self.captions is not None else None}
        if self.room is not None:
            out["room"] = self.room.stats()
        if self.participant.sfu is not None:
            out["sfu"] = self.participant.sfu.stats()
        return out

    async def close(self) -> None:
        if self.room is not None:  # the others see me gone now, not after my last caption's drain
            self.room.announce_leaving(self.participant.id, getattr(self.ctx, "close_reason", None))
        try:
            if self.captions is not None:
                await self.captions.close()
        finally:
            if self.room is not None:
                self.room.leave(self.participant.id, getattr(self.ctx, "close_reason", None))
            await sfu.leave(self.ctx.rooms, self.participant)
