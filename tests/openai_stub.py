"""A real OpenAI-compatible chat server for tests: aiohttp on a loopback port, scripted streamed replies.

It speaks ``POST /v1/chat/completions`` (SSE when the request says ``stream: true``, one JSON completion
otherwise) and ``GET /v1/models``, records every request it received, and notices clients that go away
mid-stream. Replies come from a FIFO of :class:`StubReply` (``push``) or from a ``responder(body)`` callable
(e.g. "answer with a tool call first, then with text once a tool result is in the messages").

Usage::

    async with OpenAIStub() as stub:
        stub.push(text_reply("Hello there."), tool_call_reply([("get_current_time", {"timezone": "UTC"})]))
        engine = OpenAIChatEngine(stub.url, "stub-model")
        ...
        assert stub.requests[0].body["stream"] is True

Reply builders: :func:`text_reply`, :func:`tool_call_reply` (structured ``tool_calls`` deltas, arguments split in
fragments, as vLLM's tool parser streams them), :func:`raw_tool_call_reply` (``<tool_call>`` markup inside the
content, split in small pieces so tags straddle chunks), :func:`error_reply`.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

__all__ = [
    "OpenAIStub",
    "RecordedRequest",
    "StubReply",
    "error_reply",
    "raw_tool_call_reply",
    "split_text",
    "text_reply",
    "tool_call_reply",
]


@dataclass
class StubReply:
    """One scripted answer.

    - ``deltas``: choice deltas in order (``{"content": "..."}``, ``{"tool_calls": [...]}``); a ``str`` item is
      written to the stream as is (for malformed-stream tests).
    - ``finish_reason``: sent with the last chunk (None: no finish chunk at all).
    - ``usage``: the usage object, sent in a final ``choices: []`` chunk when the client asked for it
      (``stream_options.include_usage``) and in non-streamed answers.
    - ``status``/``error``/``retry_after``: an HTTP error answer instead (``status >= 400``).
    - ``delay_s``: pause before each delta. ``hold``/``hold_after``: after ``hold_after`` deltas, wait until
      the event is set (the stub notices a client that leaves meanwhile). ``send_done``: end with
      ``data: [DONE]``; ``close_early``: stop after the deltas without finish or ``[DONE]``.
    - ``force_json``: answer with one JSON completion even to a streaming request.
    """

    deltas: list[dict[str, Any] | str] = field(default_factory=list)
    finish_reason: str | None = "stop"
    usage: dict[str, int] | None = None
    status: int = 200
    error: str | None = None
    retry_after: float | None = None
    delay_s: float = 0.0
    hold: asyncio.Event | None = None
    hold_after: int = 0
    send_done: bool = True
    close_early: bool = False
    force_json: bool = False


@dataclass
class RecordedRequest:
    """What the stub received: the JSON body and the headers."""

    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))


def split_text(text: str, size: int) -> list[str]:
    """``text`` in pieces of ``size`` characters."""
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def text_reply(text: str, *, piece_size: int = 4, finish_reason: str = "stop", prompt_tokens: int = 12,
               **options: Any) -> StubReply:
    """A plain text answer streamed in ``piece_size``-character pieces."""
    pieces = split_text(text, piece_size)
    deltas: list[dict[str, Any] | str] = [{"role": "assistant", "content": ""}]
    deltas += [{"content": p} for p in pieces if p]
    return StubReply(deltas=deltas, finish_reason=finish_reason,
                     usage={"prompt_tokens": prompt_tokens, "completion_tokens": len(pieces),
                            "total_tokens": prompt_tokens + len(pieces)}, **options)


def tool_call_reply(calls: Sequence[tuple[str, dict[str, Any]]], *, text: str = "", fragments: int = 3,
                    call_ids: Sequence[str] | None = None, **options: Any) -> StubReply:
    """Structured ``tool_calls`` deltas: per call, one delta with id and name, then the arguments JSON in
    ``fragments`` pieces; optional ``text`` content first. Finishes with ``tool_calls``."""
    deltas: list[dict[str, Any] | str] = [{"role": "assistant", "content": None}]
    if text:
        deltas += [{"content": p} for p in split_text(text, 5)]
    for index, (name, args) in enumerate(calls):
        call_id = call_ids[index] if call_ids else f"call_stub{index}"
        deltas.append({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                       "function": {"name": name, "arguments": ""}}]})
        encoded = json.dumps(args)
        size = max(1, -(-len(encoded) // fragments))
        for piece in split_text(encoded, size):
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    return StubReply(deltas=deltas, finish_reason="tool_calls",
                     usage={"prompt_tokens": 40, "completion_tokens": 20, "total_tokens": 60}, **options)


def raw_tool_call_reply(calls: Sequence[tuple[str, dict[str, Any]]], *, text_before: str = "",
                        text_after: str = "", piece_size: int = 3, **options: Any) -> StubReply:
    """Hermes/Qwen ``<tool_call>`` markup in the content (a server without a tool parser), streamed in
    ``piece_size``-character pieces so the tags are split across chunks. Finishes with ``stop``."""
    markup = "".join(
        "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>" for name, args in calls
    )
    text = text_before + markup + text_after
    return text_reply(text, piece_size=piece_size, **options)


def error_reply(status: int, message: str, *, retry_after: float | None = None) -> StubReply:
    """An HTTP error answer with an OpenAI-style error body."""
    return StubReply(status=status, error=message, retry_after=retry_after)


class OpenAIStub:
    """The server. ``url`` is the base URL with ``/v1`` (what ``--llm-url`` takes).

    - ``models``: what ``GET /v1/models`` lists. ``api_key``: when set, requests without
      ``Authorization: Bearer <api_key>`` get 401.
    - ``responder``: called with the request body when the FIFO is empty; ``default``: the reply when neither
      gives one (else a 500 "no scripted reply").
    - Observations: ``requests`` (every chat request), ``completed`` (streams sent to the end),
      ``disconnects`` (streams the client left early), ``disconnected`` (an event set at each disconnect).
    """

    def __init__(self, *, models: Sequence[str] = ("stub-model",), api_key: str | None = None,
                 responder: Callable[[dict[str, Any]], StubReply | None] | None = None,
                 default: StubReply | None = None) -> None:
        self.models = list(models)
        self.api_key = api_key
        self.responder = responder
        self.default = default
        self.replies: deque[StubReply] = deque()
        self.requests: list[RecordedRequest] = []
        self.completed = 0
        self.disconnects = 0
        self.disconnected = asyncio.Event()
        self.url = ""
        self._runner: web.AppRunner | None = None

    def push(self, *replies: StubReply) -> None:
        self.replies.extend(replies)

    async def start(self) -> OpenAIStub:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, handler_cancellation=True)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> OpenAIStub:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def wait_disconnect(self, timeout: float = 10.0) -> None:
        """Wait until a client left a stream early (raises ``TimeoutError`` otherwise)."""
        async with asyncio.timeout(timeout):
            await self.disconnected.wait()

    # handlers -------------------------------------------------------------------------------------------------

    def _unauthorized(self, request: web.Request) -> web.Response | None:
        if self.api_key and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return web.json_response({"error": {"message": "Invalid API key", "type": "invalid_request_error",
                                                "code": "invalid_api_key"}}, status=401)
        return None

    async def _models(self, request: web.Request) -> web.Response:
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        return web.json_response({"object": "list", "data": [
            {"id": m, "object": "model", "created": 0, "owned_by": "stub"} for m in self.models]})

    def _next_reply(self, body: dict[str, Any]) -> StubReply:
        if self.replies:
            return self.replies.popleft()
        if self.responder is not None:
            reply = self.responder(body)
            if reply is not None:
                return reply
        if self.default is not None:
            return self.default
        return error_reply(500, "the stub has no scripted reply for this request")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": {"message": "body is not JSON"}}, status=400)
        self.requests.append(RecordedRequest(body=body, headers=dict(request.headers)))
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        reply = self._next_reply(body)
        if reply.status >= 400:
            headers = {"Retry-After": str(reply.retry_after)} if reply.retry_after is not None else None
            return web.json_response({"error": {"message": reply.error or "error", "type": "server_error"}},
                                     status=reply.status, headers=headers)
        model = body.get("model") or (self.models[0] if self.models else "stub")
        if not body.get("stream") or reply.force_json:
            return web.json_response(_whole_completion(reply, model))
        return await self._stream(request, reply, model, body)

    async def _stream(self, request: web.Request, reply: StubReply, model: str,
                      body: dict[str, Any]) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        chunk_id = "chatcmpl-" + uuid.uuid4().hex[:12]
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None) -> bytes:
            data = {"id": chunk_id, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            return f"data: {json.dumps(data)}\n\n".encode()

        try:
            for i, delta in enumerate(reply.deltas):
                if reply.hold is not None and i == reply.hold_after:
                    await self._wait(request, reply.hold)
                if reply.delay_s:
                    await self._pause(request, reply.delay_s)
                await resp.write(delta.encode() if isinstance(delta, str) else chunk(delta, None))
            if reply.hold is not None and reply.hold_after >= len(reply.deltas):
                await self._wait(request, reply.hold)
            if reply.close_early:
                return resp
            if reply.finish_reason is not None:
                await resp.write(chunk({}, reply.finish_reason))
            if reply.usage is not None and (body.get("stream_options") or {}).get("include_usage"):
                usage_chunk = {"id": chunk_id, "object": "chat.completion.chunk", "created": created, "model": model,
                               "choices": [], "usage": reply.usage}
                await resp.write(f"data: {json.dumps(usage_chunk)}\n\n".encode())
            if reply.send_done:
                await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            self.completed += 1
        except (ConnectionError, _ClientGone):
            self._gone()
        except asyncio.CancelledError:  # aiohttp cancels the handler when the client disconnects
            self._gone()
            raise
        return resp

    def _gone(self) -> None:
        self.disconnects += 1
        self.disconnected.set()

    @staticmethod
    def _client_gone(request: web.Request) -> bool:
        transport = request.transport
        return transport is None or transport.is_closing()

    async def _pause(self, request: web.Request, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while (left := end - loop.time()) > 0:
            if self._client_gone(request):
                raise _ClientGone
            await asyncio.sleep(min(0.02, left))

    async def _wait(self, request: web.Request, event: asyncio.Event) -> None:
        while not event.is_set():
            if self._client_gone(request):
                raise _ClientGone
            try:
                async with asyncio.timeout(0.02):
                    await event.wait()
            except TimeoutError:
                pass


class _ClientGone(Exception):
    """The client closed the connection while the stub was waiting."""


def _whole_completion(reply: StubReply, model: str) -> dict[str, Any]:
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for delta in reply.deltas:
        if isinstance(delta, str):
            continue
        if delta.get("content"):
            content.append(delta["content"])
        for part in delta.get("tool_calls") or []:
            call = calls.setdefault(part["index"], {"id": None, "type": "function",
                                                    "function": {"name": None, "arguments": ""}})
            if part.get("id"):
                call["id"] = part["id"]
            fn = part.get("function") or {}
            if fn.get("name"):
                call["function"]["name"] = fn["name"]
            call["function"]["arguments"] += fn.get("arguments") or ""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {"id": "chatcmpl-" + uuid.uuid4().hex[:12], "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message,
                                         "finish_reason": reply.finish_reason or "stop"}],
            "usage": reply.usage}
