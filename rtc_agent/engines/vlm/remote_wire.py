"""The wire side of the remote realtime vision services: addresses, message framing, handshake and goodbye.

MOSS reference service (``run_online_inference.py --serve``, ``ws://HOST:8000/v1/realtime``), one session per
connection and per model process:

- client ``{"type": "start", "prompt", "system_prompt", "frame_queue_size", "max_tokens_per_second",
  "max_new_tokens", "do_sample"}`` → server ``{"type": "ready"}``;
- per frame ``{"type": "frame", "timestamp"[, "prompt"]}`` then the JPEG bytes → ``{"type": "frame_ack",
  "dropped_oldest", "pending_frames"}``; ``{"type": "prompt", "text"}`` → ``{"type": "prompt_ack"}``;
- ``{"type": "output", "text"}`` carries raw model chunks (text, ``<|silence|>``, ``<|round_start|>``, ...);
- ``{"type": "stop"}`` → ``{"type": "stopping"}``; ``session_end``; ``{"type": "error", "message"}`` (a busy
  service answers a second connection with an error and close code 1013).

SGLang-Omni (``/v1/video/realtime``): ``session.created`` → ``session.configure {prompt, system_prompt,
max_new_tokens, max_tokens_per_turn, input_queue_capacity}`` → ``session.configured``, ``session.ready``; frames
``input.frame {seq_no, timestamp, prompt, final, mime_type}``, then wait for ``input.frame.ready`` before the
binary image; prompts ``input.prompt {seq_no, prompt, final}`` (``seq_no`` dense from 0 across both); outputs
``response.text.delta {delta}``, ``response.turn.silence {timestamp}``; ``input.*.processed`` confirm that the
model has the input in context; ``response.done`` / ``session.done`` end; ``session.abort`` stops;
``error {code, message}`` (``session_capacity_exceeded`` when full; ``invalid_request`` rejects one event and the
session goes on).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from rtc_agent.engines.vlm.base import SessionBusy, SessionOptions
from rtc_agent.redact import redact_text, redact_url

__all__ = [
    "DEFAULT_PATHS",
    "RemoteSessionError",
    "ServiceProtocol",
    "error_of",
    "goodbye",
    "handshake",
    "health_url",
    "realtime_url",
    "recv_json",
    "safe_text",
]

ServiceProtocol = Literal["moss", "sglang"]
DEFAULT_PATHS: dict[str, str] = {"moss": "/v1/realtime", "sglang": "/v1/video/realtime"}


class RemoteSessionError(RuntimeError):
    """The remote service reported an error or the connection failed."""


def realtime_url(url: str, protocol: ServiceProtocol) -> str:
    """The WebSocket URL of a service given as ``host:port``, ``http(s)://...`` or ``ws(s)://...``; a URL without
    a path gets the protocol's default path."""
    if "://" not in url:
        url = "ws://" + url
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    if scheme not in ("ws", "wss"):
        raise ValueError(f"unsupported URL scheme in {redact_url(url)!r}: use ws, wss, http or https")
    path = parts.path if parts.path not in ("", "/") else DEFAULT_PATHS[protocol]
    return urlunsplit((scheme, parts.netloc, path, parts.query, ""))


def safe_text(value: object) -> str:
    """``str(value)`` with URLs redacted and registered secrets masked (for messages that carry a server's words)."""
    return redact_text(str(value))


def health_url(url: str) -> str:
    """The ``/health`` address (http or https) of a service's WebSocket URL."""
    parts = urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, "/health", "", ""))


async def recv_json(ws: aiohttp.ClientWebSocketResponse, shown_url: str) -> dict[str, Any]:
    """The next JSON object from the service (``{"type": "_binary"}`` for a binary message).

    Raises :class:`~rtc_agent.engines.vlm.base.SessionBusy` when the service closed with code 1013 (at capacity)
    and :class:`RemoteSessionError` for other closes, errors and messages that are not JSON objects.
    """
    msg = await ws.receive()
    if msg.type == aiohttp.WSMsgType.TEXT:
        data = json.loads(msg.data)
        if not isinstance(data, dict):
            raise RemoteSessionError(f"unexpected message from {shown_url}: {safe_text(msg.data[:200])!r}")
        return data
    if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED):
        code = ws.close_code
        if code == 1013:
            raise SessionBusy(f"the realtime service at {shown_url} is at capacity")
        raise RemoteSessionError(f"{shown_url} closed the connection (code {code})")
    if msg.type == aiohttp.WSMsgType.ERROR:
        raise RemoteSessionError(f"{shown_url}: connection error: {safe_text(ws.exception())}")
    return {"type": "_binary"}


def error_of(data: dict[str, Any], shown_url: str) -> BaseException:
    """The exception an ``error`` message stands for: :class:`~rtc_agent.engines.vlm.base.SessionBusy` when the
    service is full, else :class:`RemoteSessionError`."""
    message = str(data.get("message") or data.get("error") or "unknown error")
    code = str(data.get("code") or "")
    if code == "session_capacity_exceeded" or "already active" in message:
        return SessionBusy(f"the realtime service at {shown_url} is at capacity: {safe_text(message)}")
    return RemoteSessionError(f"{shown_url}: {code + ': ' if code else ''}{safe_text(message)}")


async def handshake(ws: aiohttp.ClientWebSocketResponse, protocol: ServiceProtocol, opts: SessionOptions,
                    shown_url: str) -> None:
    """Open the session: ``start`` → ``ready`` (MOSS), or ``session.created`` → ``session.configure`` →
    ``session.ready`` (SGLang-Omni). An ``error`` answer raises what :func:`error_of` says."""
    if protocol == "moss":
        start: dict[str, Any] = {
            "type": "start", "prompt": opts.initial_prompt, "frame_queue_size": opts.frame_queue_size,
            "max_tokens_per_second": opts.max_tokens_per_turn, "max_new_tokens": opts.max_new_tokens,
            "do_sample": False,
        }
        if opts.system_prompt is not None:
            start["system_prompt"] = opts.system_prompt
        await ws.send_str(json.dumps(start))
        want = "ready"
    else:
        while (data := await recv_json(ws, shown_url)).get("type") != "session.created":
            if data.get("type") == "error":
                raise error_of(data, shown_url)
        configure: dict[str, Any] = {
            "type": "session.configure", "prompt": opts.initial_prompt, "max_new_tokens": opts.max_new_tokens,
            "max_tokens_per_turn": opts.max_tokens_per_turn,
            "input_queue_capacity": max(1, min(256, opts.frame_queue_size)),
        }
        if opts.system_prompt is not None:
            configure["system_prompt"] = opts.system_prompt
        await ws.send_str(json.dumps(configure))
        want = "session.ready"
    while True:
        data = await recv_json(ws, shown_url)
        kind = data.get("type")
        if kind == "error":
            raise error_of(data, shown_url)
        if kind == want:
            return


async def goodbye(ws: aiohttp.ClientWebSocketResponse, protocol: ServiceProtocol) -> None:
    """Stop the remote session (``stop`` / ``session.abort``) and close the connection, two seconds at most each;
    failures are ignored."""
    if not ws.closed:
        message = {"type": "stop"} if protocol == "moss" else {"type": "session.abort"}
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2.0):
                await ws.send_str(json.dumps(message))
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2.0):
                await ws.close()
