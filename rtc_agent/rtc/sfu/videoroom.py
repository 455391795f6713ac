"""The requests of Janus's VideoRoom plugin (``janus.plugin.videoroom``) that rtc-agent uses.

Room administration (on any VideoRoom handle; each needs the room's ``secret``): :func:`create_room` (private,
join tokens checked, Opus audio and VP8 video), :func:`destroy_room`, :func:`allow_tokens` (the ``allowed``
request: ``add`` / ``remove`` tokens). Participation: :func:`join_publisher` (the handle becomes a publisher;
the ``joined`` event lists the publishers already there), :func:`publish` / :func:`unpublish`,
:func:`join_subscriber` (Janus offers the chosen streams) and :func:`start` (our answer), and
:func:`list_participants`. :func:`audio_streams` picks a publisher's audio streams out of its ``streams`` list.

Every request raises :class:`~rtc_agent.rtc.sfu.janus_client.JanusError` when the plugin refuses it.
"""

from __future__ import annotations

import secrets
from typing import Any

from rtc_agent.rtc.sfu.janus_client import JanusError, JanusHandle

PLUGIN = "janus.plugin.videoroom"
ROOM_ID_MAX = 2**52  # Janus room ids are JSON numbers: stay within a double's exact integers


def random_room_id() -> int:
    """A random numeric VideoRoom id."""
    return secrets.randbelow(ROOM_ID_MAX - 1_000_000) + 1_000_000


async def create_room(handle: JanusHandle, *, room_id: int, secret: str, publishers: int,
                      allowed: list[str] | None = None, description: str = "rtc-agent room",
                      bitrate: int = 0) -> int:
    """Create a private VideoRoom ``room_id`` whose joins need one of ``allowed``; returns the room id."""
    body: dict[str, Any] = {
        "request": "create", "room": room_id, "secret": secret, "is_private": True, "permanent": False,
        "description": description, "publishers": publishers, "audiocodec": "opus", "videocodec": "vp8",
        "allowed": list(allowed or []), "notify_joining": False,
    }
    if bitrate:
        body["bitrate"] = bitrate
    reply = await handle.message(body)
    return int(reply.data.get("room", room_id))


async def destroy_room(handle: JanusHandle, room_id: int, secret: str) -> None:
    """Destroy the room (its participants are kicked out)."""
    await handle.message({"request": "destroy", "room": room_id, "secret": secret, "permanent": False})


async def allow_tokens(handle: JanusHandle, room_id: int, secret: str, action: str, tokens: list[str]) -> list[str]:
    """``action`` (``add``, ``remove``, ``enable``, ``disable``) on the room's join tokens; the list now."""
    reply = await handle.message({"request": "allowed", "room": room_id, "secret": secret, "action": action,
                                  "allowed": list(tokens)})
    return list(reply.data.get("allowed") or [])


async def list_participants(handle: JanusHandle, room_id: int) -> list[dict[str, Any]]:
    """The room's participants: ``{id, display, publisher, talking}`` each."""
    reply = await handle.message({"request": "listparticipants", "room": room_id})
    return list(reply.data.get("participants") or [])


async def join_publisher(handle: JanusHandle, room_id: int, *, display: str, token: str) -> dict[str, Any]:
    """Join as a publisher; the ``joined`` data (``id``, ``private_id``, ``publishers``)."""
    reply = await handle.message({"request": "join", "ptype": "publisher", "room": room_id, "display": display,
                                  "token": token}, wait_event=True)
    if reply.data.get("videoroom") != "joined":
        raise_unexpected("join", reply.data)
    return reply.data


async def publish(handle: JanusHandle, offer_sdp: str, *, audio: bool = True, video: bool = False,
                  display: str | None = None) -> str:
    """Publish the media of ``offer_sdp``; the answer SDP."""
    body: dict[str, Any] = {"request": "publish", "audio": audio, "video": video}
    if display is not None:
        body["display"] = display
    reply = await handle.message(body, {"type": "offer", "sdp": offer_sdp, "trickle": False}, wait_event=True)
    if reply.jsep is None or reply.jsep.get("type") != "answer":
        raise_unexpected("publish", reply.data)
    return str(reply.jsep["sdp"])


async def unpublish(handle: JanusHandle) -> None:
    await handle.message({"request": "unpublish"}, wait_event=True)


async def leave(handle: JanusHandle) -> None:
    await handle.message({"request": "leave"}, wait_event=True)


async def join_subscriber(handle: JanusHandle, room_id: int, streams: list[dict[str, Any]], *, token: str,
                          private_id: int | None = None) -> str:
    """Subscribe to ``streams`` (``{feed, mid}`` each; no ``mid``: all of that feed); Janus's offer SDP."""
    body: dict[str, Any] = {"request": "join", "ptype": "subscriber", "room": room_id, "streams": streams,
                            "token": token, "use_msid": False}
    if private_id is not None:
        body["private_id"] = private_id
    reply = await handle.message(body, wait_event=True)
    if reply.jsep is None or reply.jsep.get("type") != "offer":
        raise_unexpected("subscribe", reply.data)
    return str(reply.jsep["sdp"])


async def start(handle: JanusHandle, answer_sdp: str) -> None:
    """Answer a subscriber offer: media starts flowing."""
    await handle.message({"request": "start"}, {"type": "answer", "sdp": answer_sdp, "trickle": False},
                         wait_event=True)


def audio_streams(publisher: dict[str, Any]) -> list[dict[str, Any]]:
    """``{feed, mid}`` of each live audio stream of ``publisher`` (a ``publishers`` entry)."""
    return [{"feed": publisher["id"], "mid": str(stream["mid"])} for stream in publisher.get("streams") or []
            if stream.get("type") == "audio" and not stream.get("disabled")]


def raise_unexpected(what: str, data: dict[str, Any]) -> None:
    """Raise :class:`JanusError` for a reply that is not the one ``what`` should get."""
    raise JanusError(f"the SFU answered {what} unexpectedly: {sorted(data)}")
