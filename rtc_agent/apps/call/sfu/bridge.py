"""The bridge of one rtc-agent call room to its Janus VideoRoom.

:meth:`SfuBridge.open` connects to Janus (one :class:`~rtc_agent.rtc.sfu.JanusClient` per room), creates the
VideoRoom (a random numeric id, a random ``secret``, private, join tokens checked, ``publishers`` =
``sfu_max_speakers`` + one per interpreter language (at most ``room_max_pairs``) + 1) and joins it as the
participant ``rtc-agent`` (a publisher handle that publishes nothing: it hears ``publishers``, ``unpublished``
and ``leaving``).

Members. :meth:`SfuBridge.add` gives a participant its own random token (``allowed`` ``add``; removed by
:meth:`SfuBridge.remove`) and, for a listener who hears interpretation, the interpreter feed of its listen
language (:class:`InterpreterFeed`, display ``interpreter-<lang>``, audio only: started for the first listener
of the language, unpublished when the last one leaves). Pair interpreters write to that feed instead of each
listener's track (:attr:`~rtc_agent.apps.call.participant.Participant.feed_speech`).

Speakers' audio. A Janus publisher whose display is a speaker's participant id is that speaker's feed
(``feed_id``, announced with ``room.participant.updated``): the bridge subscribes to its audio only
(:class:`~rtc_agent.rtc.sfu.FeedSubscriber`) and hands every 16 kHz chunk to the speaker's captions and
interpretation input (``Participant.feed_audio``), positioned on the speaker's session clock (the subscription's
first sample at the clock's now, then counted: a re-published feed continues after the last one). Publishers with
other displays are not ours and are ignored.

The bridge's tasks (subscriptions, feed starts, a reconnect) end with it; :meth:`SfuBridge.close` (the room
ended, or the server stops) destroys the Janus room and closes the connection. Janus refusing is a
:class:`~rtc_agent.rtc.sfu.JanusError`. A lost connection is reconnected with backoff
(:mod:`rtc_agent.apps.call.sfu.reconnect`: the same room id, tokens, subscriptions and interpreter feeds again;
``sfu_state`` in ``room.sfu.updated`` says ``connected``, ``reconnecting`` or ``lost``); a participant joining
while the room is not connected is refused (502 ``sfu_reconnecting``).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any

import numpy as np

from rtc_agent.apps.call.participant import Participant
from rtc_agent.apps.call.room import RoomFull
from rtc_agent.apps.call.sfu.feeds import InterpreterFeed
from rtc_agent.apps.call.sfu.reconnect import reconnect
from rtc_agent.protocol.events import RoomParticipantUpdated, RoomSfuUpdated
from rtc_agent.rtc.sfu import FeedSubscriber, JanusClient, JanusError, videoroom

log = logging.getLogger(__name__)

AGENT_DISPLAY = "rtc-agent"
ROOM_EXISTS = 427  # JANUS_VIDEOROOM_ERROR_ROOM_EXISTS
LISTED_LISTENERS = 20  # past this many listeners, only their count travels
SAMPLE_RATE = 16000
SUBSCRIBE_ATTEMPTS = 3


class SfuBridge:
    """One rtc-agent room's Janus VideoRoom (see the module). ``name`` is the rtc-agent room name."""

    def __init__(self, name: str, settings: Any) -> None:
        self.name = name
        self.settings = settings
        self.room_id = videoroom.random_room_id()
        self.secret = secrets.token_urlsafe(24)
        self.own_token = secrets.token_urlsafe(24)
        self.client = self._new_client()
        self.members: dict[str, Participant] = {}
        self.tokens: dict[str, str] = {}
        self.feeds: dict[str, InterpreterFeed] = {}
        self.subscribers: dict[int, FeedSubscriber] = {}
        self.feed_owner: dict[int, str] = {}  # feed id -> the speaker whose feed it is
        self.room: Any = None  # the rtc-agent Room, once its first member joined it
        self.closed = False
        self._ready: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self._clock_end: dict[str, int] = {}  # speaker id -> where its last subscription's audio ended
        self._admin: Any = None
        self.sfu_state = "connected"  # or "reconnecting", "lost" (see rtc_agent.apps.call.sfu.reconnect)
        self.reconnects = 0

    # --- limits and what pages see ---------------------------------------------------------------------

    @property
    def max_speakers(self) -> int:
        return int(self.settings.sfu_max_speakers)

    @property
    def max_listeners(self) -> int:
        return int(self.settings.sfu_max_listeners)

    @property
    def max_participants(self) -> int:
        return self.max_speakers + self.max_listeners

    @property
    def listener_count(self) -> int:
        return sum(1 for p in self.members.values() if p.role == "listener")

    @property
    def interpreter_feeds(self) -> dict[str, int]:
        return {lang: feed.feed_id for lang, feed in self.feeds.items() if feed.feed_id is not None}

    def listed(self, p: Participant) -> bool:
        """Whether ``p`` is listed and announced one by one (speakers; listeners while at most 20)."""
        return p.role == "speaker" or self.listener_count <= LISTED_LISTENERS

    def joined_fields(self, p: Participant) -> dict[str, Any]:
        """What ``room.joined`` adds for ``p`` in this SFU room."""
        url = self.settings.sfu_public_url or self.settings.sfu_url
        return {"mode": "sfu", "listener_count": self.listener_count,
                "sfu": {"url": url, "room": self.room_id, "token": self.tokens.get(p.id, ""), "display": p.id,
                        "interpreter_feeds": self.interpreter_feeds}}

    def announce(self) -> None:
        """``room.sfu.updated`` to every member of the room."""
        if self.room is None:
            return
        event = RoomSfuUpdated(room=self.name, interpreter_feeds=self.interpreter_feeds,
                               listener_count=self.listener_count, sfu_state=self.sfu_state,
                               reconnects=self.reconnects)
        for p in list(self.room.participants.values()):
            p.send(event)

    # --- lifecycle -------------------------------------------------------------------------------------

    async def ready(self) -> None:
        """The Janus room exists (opened once; every caller waits for the same opening). Raises JanusError."""
        if self.closed:
            raise JanusError(f"the SFU room of {self.name!r} has ended; join again")
        if self._ready is None:
            self._ready = asyncio.get_running_loop().create_task(self._open(), name=f"sfu-open-{self.name}")
        await asyncio.shield(self._ready)

    def _new_client(self) -> JanusClient:
        s = self.settings
        client = JanusClient(s.sfu_url, api_secret=s.sfu_api_secret, request_timeout_s=float(s.sfu_request_timeout_s),
                             poll_timeout_s=float(s.sfu_poll_timeout_s))
        client.on_lost = lambda reason: self._lost(client, reason)
        return client

    async def _open(self, again: bool = False) -> None:
        """Connect, create the Janus room (``again``: or find it still there) with every token, join as the
        watcher (which subscribes to the speakers publishing)."""
        await self.client.connect()
        self._admin = await self.client.attach(videoroom.PLUGIN)
        publishers = self.max_speakers + int(getattr(self.settings, "room_max_pairs", 12)) + 1
        tokens = [self.own_token, *self.tokens.values()]
        try:
            await videoroom.create_room(self._admin, room_id=self.room_id, secret=self.secret,
                                        publishers=publishers, allowed=tokens, description=f"rtc-agent {self.name}")
        except JanusError as exc:
            if not again or exc.janus_code != ROOM_EXISTS:
                raise
            await videoroom.allow_tokens(self._admin, self.room_id, self.secret, "add", tokens)
        watcher = await self.client.attach(videoroom.PLUGIN)
        watcher.on_event = self._on_event
        joined = await videoroom.join_publisher(watcher, self.room_id, display=AGENT_DISPLAY, token=self.own_token)
        for publisher in joined.get("publishers") or []:
            self._on_publisher(publisher)

    async def reopen(self) -> None:
        """A new connection to the same Janus room (see :mod:`~rtc_agent.apps.call.sfu.reconnect`); the interpreter
        feeds get publishers on it (started by :meth:`publish_wanted`). Raises JanusError."""
        await self.client.close()
        self.drop_media()  # what a failed attempt subscribed to
        self.client = self._new_client()
        await self._open(again=True)
        for feed in list(self.feeds.values()):
            await feed.rebind(self)

    def drop_media(self) -> None:
        """The connection is gone: every subscription ends (its speaker's ``feed_id`` cleared and announced), and
        the interpreter feeds have no feed id until published again."""
        for feed_id in list(self.subscribers):
            self._on_gone(feed_id)
        for feed in self.feeds.values():
            feed.feed_id = None

    async def add(self, p: Participant) -> None:
        """Admit ``p`` (its token, its language's interpreter feed); raises RoomFull or JanusError (502
        ``sfu_reconnecting`` while the connection to Janus is being restored or is lost; a lost one starts another
        round of reconnects)."""
        await self.ready()
        if self.sfu_state == "lost":  # someone wants in: one more bounded round of reconnects
            self.sfu_state = "reconnecting"
            self._spawn(reconnect(self, "a participant is joining"), f"sfu-reconnect-{self.name}")
        if self.sfu_state != "connected":
            raise JanusError(f"the SFU connection of room {self.name!r} is {self.sfu_state}; join again in a moment",
                             code="sfu_reconnecting")
        speakers = sum(1 for x in self.members.values() if x.role == "speaker")
        if p.role == "speaker" and speakers >= self.max_speakers:
            raise RoomFull(f"room {self.name!r} has {self.max_speakers} speakers already (sfu_max_speakers)")
        if p.role == "listener" and self.listener_count >= self.max_listeners:
            raise RoomFull(f"room {self.name!r} has {self.max_listeners} listeners already (sfu_max_listeners)")
        token = secrets.token_urlsafe(24)
        await videoroom.allow_tokens(self._admin, self.room_id, self.secret, "add", [token])
        self.tokens[p.id] = token
        self.members[p.id] = p
        self.listen_changed(p)

    def listen_changed(self, p: Participant) -> None:
        """Give ``p`` its language's interpreter feed (a listener who hears interpretation), start feeds that are
        now needed and end those that are not."""
        wanted = {x.listen_language for x in self.members.values()
                  if x.role == "listener" and x.interpret and x.listen_speech}
        cap = int(getattr(self.settings, "room_max_pairs", 12))
        for language in sorted(wanted):
            if language not in self.feeds and len(self.feeds) < cap:
                self.feeds[language] = InterpreterFeed(self, language)
        for language in [lang for lang in self.feeds if lang not in wanted]:
            feed = self.feeds.pop(language)
            for x in self.members.values():
                if x.feed_speech is feed.speech:
                    x.feed_speech = None
            self._spawn(feed.close(), f"sfu-unpublish-{language}")
            self.announce()
        for x in self.members.values():
            feed = self.feeds.get(x.listen_language) if x.role == "listener" else None
            x.feed_speech = feed.speech if feed is not None and x.interpret and x.listen_speech else None
        if self.sfu_state == "connected":
            self.publish_wanted()

    def publish_wanted(self) -> None:
        """Start every interpreter feed not started on the current connection."""
        for feed in self.feeds.values():
            if not feed.started:
                feed.started = True
                self._spawn(self._start_feed(feed), f"sfu-feed-{feed.language}")

    async def _start_feed(self, feed: InterpreterFeed) -> None:
        try:
            await feed.start()
        except JanusError as exc:
            log.warning("room %s: the %s interpreter feed could not be published: %s", self.name, feed.language, exc)
            return
        if self.feeds.get(feed.language) is feed:
            self.announce()
        else:  # no longer wanted while it started
            await feed.close()

    async def remove(self, p: Participant) -> None:
        """``p`` left the room: its token goes, its feed's subscription ends; the bridge closes with its last
        member. Never raises."""
        if self.members.pop(p.id, None) is None:
            return
        token = self.tokens.pop(p.id, None)
        for feed_id in [f for f, owner in self.feed_owner.items() if owner == p.id]:
            self._on_gone(feed_id)
        p.feed_speech = None
        self.listen_changed(p)
        if not self.members:
            await self.close()
            return
        if token is not None and self.client.connected:
            try:
                await videoroom.allow_tokens(self._admin, self.room_id, self.secret, "remove", [token])
            except JanusError as exc:
                log.warning("room %s: a left participant's token could not be removed: %s", self.name, exc)
        self.announce()

    async def close(self) -> None:
        """Destroy the Janus room and close the connection; idempotent, never raises."""
        if self.closed:
            return
        self.closed = True
        for feed in list(self.feeds.values()):
            feed.speech.stop()
        self.feeds.clear()
        for sub in list(self.subscribers.values()):
            await sub.close()
        self.subscribers.clear()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5.0)
        if self._admin is not None and self.client.connected:
            try:
                await videoroom.destroy_room(self._admin, self.room_id, self.secret)
            except JanusError as exc:
                log.warning("room %s: the SFU room could not be destroyed: %s", self.name, exc)
        await self.client.close()
        if self._ready is not None and not self._ready.done():
            self._ready.cancel()

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _lost(self, client: JanusClient, reason: str) -> None:
        """``client`` lost its connection: reconnect, unless it is not the current one, the room is still opening
        (its opening fails), has ended, or a reconnect runs already (it checks the connection it makes)."""
        if client is not self.client or self.closed or self._ready is None or not self._ready.done() \
                or self.sfu_state == "reconnecting":
            return
        self._spawn(reconnect(self, reason), f"sfu-reconnect-{self.name}")

    # --- Janus events ------------------------------------------------------------------------------------

    def _on_event(self, data: dict[str, Any], jsep: dict[str, Any] | None, message: dict[str, Any]) -> None:
        for publisher in data.get("publishers") or []:
            self._on_publisher(publisher)
        for key in ("unpublished", "leaving"):
            gone = data.get(key)
            if isinstance(gone, int):
                self._on_gone(gone)

    def _on_publisher(self, publisher: dict[str, Any]) -> None:
        feed_id, display = publisher.get("id"), str(publisher.get("display") or "")
        p = self.members.get(display)
        if p is None or p.role != "speaker" or not isinstance(feed_id, int) or feed_id in self.subscribers:
            return  # rtc-agent's own feeds, strangers, listeners, or known already
        streams = videoroom.audio_streams(publisher)
        if not streams:
            return
        p.feed_id = feed_id
        sub = FeedSubscriber(self.client, self.room_id, feed_id, streams, token=self.own_token,
                             sink=self._sink_for(p))
        self.feed_owner[feed_id] = p.id
        self.subscribers[feed_id] = sub
        self._spawn(self._subscribe(sub), f"sfu-subscribe-{feed_id}")
        if self.room is not None:
            for other in list(self.room.participants.values()):
                other.send(RoomParticipantUpdated(room=self.name, participant=p.public()))

    async def _subscribe(self, sub: FeedSubscriber) -> None:
        """Subscribe, retrying a few times (a feed announced a moment before Janus can serve it)."""
        for attempt in range(1, SUBSCRIBE_ATTEMPTS + 1):
            try:
                await sub.start()
                return
            except JanusError as exc:
                if self.subscribers.get(sub.feed_id) is not sub or attempt == SUBSCRIBE_ATTEMPTS:
                    log.warning("room %s: subscribing to feed %s failed: %s", self.name, sub.feed_id, exc)
                    break
                await asyncio.sleep(attempt)
                sub = self.subscribers[sub.feed_id] = FeedSubscriber(
                    self.client, self.room_id, sub.feed_id, sub.streams, token=self.own_token, sink=sub.sink)
        if self.subscribers.get(sub.feed_id) is sub:
            self.subscribers.pop(sub.feed_id, None)
            self.feed_owner.pop(sub.feed_id, None)

    def _on_gone(self, feed_id: int) -> None:
        sub = self.subscribers.pop(feed_id, None)
        owner = self.feed_owner.pop(feed_id, None)
        if sub is None:
            return
        self._spawn(sub.close(), f"sfu-unsubscribe-{feed_id}")
        p = self.members.get(owner or "")
        if p is not None and p.feed_id == feed_id:
            p.feed_id = None
            if self.room is not None:
                for other in list(self.room.participants.values()):
                    other.send(RoomParticipantUpdated(room=self.name, participant=p.public()))

    def _sink_for(self, p: Participant) -> Any:
        """The subscription's sink: chunks positioned on ``p``'s session clock, handed to ``p.feed_audio``."""
        offset: list[int] = []

        def sink(pcm: np.ndarray, start_ms: int) -> None:
            if not offset:
                offset.append(max(p.ctx.now_ms(), self._clock_end.get(p.id, 0)) - start_ms)
            at = offset[0] + start_ms
            self._clock_end[p.id] = at + pcm.size * 1000 // SAMPLE_RATE
            if p.feed_audio is not None:
                p.feed_audio(pcm, at)

        return sink

    def stats(self) -> dict[str, Any]:
        return {"sfu_room": self.room_id, "speakers": len(self.members) - self.listener_count,
                "listeners": self.listener_count, "subscriptions": len(self.subscribers),
                "interpreter_feeds": self.interpreter_feeds, "sfu_state": self.sfu_state,
                "reconnects": self.reconnects}
