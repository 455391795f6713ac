"""Remote LLM engine: any OpenAI-compatible ``/v1/chat/completions`` server (vLLM, SGLang, llama.cpp server,
Ollama, the Sophon engine) with ``stream: true`` and tools.

The engine runs in worker threads like every engine, so it speaks HTTP with the blocking standard library client
(one connection per generation, closed at its end): a blocking read is cancelled by shutting the socket down from
the cancelling thread, which the server sees as the client going away, so it stops generating too.

Tool calls arrive either as structured ``tool_calls`` deltas (a server started with a tool parser, e.g. vLLM
``--enable-auto-tool-choice --tool-call-parser hermes``) or as raw ``<tool_call>...</tool_call>`` text in the
content (a server without one); both are passed through unchanged: structured ones as
:class:`~rtc_agent.engines.llm.messages.ToolCallDelta`, raw ones as text for the agent's streaming tool parser.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import socket
import ssl
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from rtc_agent.engines.endpoints import openai_endpoint
from rtc_agent.engines.llm.engine import ChatEngine
from rtc_agent.engines.llm.job import CancelToken
from rtc_agent.engines.llm.messages import ChatDelta, ChatRequest, ToolCallDelta, Usage
from rtc_agent.errors import EngineError
from rtc_agent.redact import redact_text, redact_url, register_secret, register_url_secrets

log = logging.getLogger(__name__)

__all__ = ["OpenAIChatEngine", "chat_completions_url"]

_MAX_ERROR_BODY = 64 * 1024
_MAX_LINE = 4 * 1024 * 1024


def chat_completions_url(url: str) -> str:
    """The full chat-completions endpoint for a base URL: ``http://h:8000``, ``http://h:8000/v1`` and
    ``http://h:8000/v1/chat/completions`` all give ``http://h:8000/v1/chat/completions``."""
    return openai_endpoint(url, "/chat/completions", "LLM URL")


class _Connection:
    """One HTTP exchange; ``abort`` (any thread) shuts the socket down so a blocked read returns, and makes a
    request that has not connected yet fail right after connecting."""

    def __init__(self, url: str, connect_timeout: float, read_timeout: float) -> None:
        self.aborted = False
        parts = urlsplit(url)
        self.host = parts.hostname or ""
        self.path = parts.path + (f"?{parts.query}" if parts.query else "")
        self.read_timeout = read_timeout
        if parts.scheme == "https":
            self.conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self.host, parts.port, timeout=connect_timeout, context=ssl.create_default_context()
            )
        else:
            self.conn = http.client.HTTPConnection(self.host, parts.port, timeout=connect_timeout)

    def request(self, method: str, body: bytes | None, headers: Mapping[str, str]) -> http.client.HTTPResponse:
        self.conn.connect()
        if self.aborted:
            raise ConnectionAbortedError("the request was cancelled")
        if self.conn.sock is not None:
            self.conn.sock.settimeout(self.read_timeout)
        self.conn.request(method, self.path, body=body, headers=dict(headers))
        return self.conn.getresponse()

    def abort(self) -> None:
        self.aborted = True
        sock = self.conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.conn.close()


class OpenAIChatEngine(ChatEngine):
    """Chat completions against an OpenAI-compatible server.

    - ``url``: the server's base URL (see :func:`chat_completions_url`).
    - ``model``: the model name to send; empty means the first model ``GET /v1/models`` lists at load time.
    - ``api_key``: sent as ``Authorization: Bearer ...`` when set.
    - ``connect_timeout``: seconds to connect; ``read_timeout``: most seconds of silence between two pieces of the
      response (time to the first token included).
    - ``include_usage``: ask for token usage (``stream_options.include_usage``); turn off for servers that reject
      the field.
    - ``headers``/``extra_body``: more request headers / JSON body fields for every request.

    Errors (``EngineError``): ``llm_unreachable`` (cannot connect), ``llm_timeout``, ``llm_unauthorized`` (401/403),
    ``llm_busy`` (429/503, with ``retry_after`` from the server), ``llm_http_error`` (other statuses, with the
    server's message), ``llm_bad_response`` (malformed stream), ``llm_stream_truncated`` (the stream ended before a
    finish reason).

    Error messages and load progress name the server by its redacted URL (no user-info, no query values) and
    never carry the API key, even when the server echoes it back.
    """

    def __init__(self, url: str, model: str = "", *, api_key: str | None = None, connect_timeout: float = 5.0,
                 read_timeout: float = 60.0, include_usage: bool = True, headers: Mapping[str, str] | None = None,
                 extra_body: Mapping[str, Any] | None = None) -> None:
        self.url = chat_completions_url(url)
        parts = urlsplit(self.url)
        self.models_url = urlunsplit(parts._replace(path=parts.path[: -len("/chat/completions")] + "/models"))
        self.shown_url, self.shown_models_url = redact_url(self.url), redact_url(self.models_url)
        self.model_name = model
        self.api_key = api_key or None
        register_secret(self.api_key)
        register_url_secrets(url)
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.include_usage = include_usage
        self.headers = dict(headers or {})
        self.extra_body = dict(extra_body or {})

    # load -----------------------------------------------------------------------------------------------------

    def load(self, progress: Callable[[str], None]) -> None:
        """Check the server with ``GET /v1/models``. Without a configured model name, use the first listed model
        (and fail clearly when the server cannot say). With one, an unreachable server is only reported: the
        server may start after us, and every request reports its own error."""
        progress(f"checking {self.shown_models_url}")
        try:
            models = self._list_models()
        except EngineError as exc:
            if not self.model_name:
                raise EngineError(
                    f"no LLM model name configured and the server cannot list its models: {exc.message}; "
                    "set --llm-model", code="llm_no_model",
                ) from exc
            progress(f"server not usable yet ({exc.message}); requests will use model {self.model_name!r}")
            return
        if not self.model_name:
            if not models:
                raise EngineError(f"{self.shown_models_url} lists no models; set --llm-model", code="llm_no_model")
            self.model_name = models[0]
            progress(f"using model {self.model_name!r} (first of {len(models)} listed)")
        elif models and self.model_name not in models:
            progress(f"warning: model {self.model_name!r} is not among the server's models {models[:8]}")
        else:
            progress(f"server ready, model {self.model_name!r}")

    def _list_models(self) -> list[str]:
        conn = _Connection(self.models_url, self.connect_timeout, self.connect_timeout)
        try:
            resp = self._send(conn, "GET", None, self.models_url)
            body = resp.read(_MAX_ERROR_BODY)
        except (TimeoutError, OSError, http.client.HTTPException) as exc:
            raise self._transport_error(exc, self.models_url) from exc
        finally:
            conn.close()
        try:
            data = json.loads(body)
            return [str(m["id"]) for m in data.get("data", []) if isinstance(m, dict) and "id" in m]
        except (ValueError, TypeError, AttributeError) as exc:
            raise EngineError(f"{self.shown_models_url}: not a model list", code="llm_bad_response") from exc

    # requests -------------------------------------------------------------------------------------------------

    def _headers(self, *, stream: bool) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if stream else "application/json",
            "User-Agent": "rtc-agent",
        }
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        headers.update(self.headers)
        return headers

    def body(self, request: ChatRequest) -> dict[str, Any]:
        """The JSON body sent for ``request`` (public for tests and debugging)."""
        body: dict[str, Any] = {
            "model": request.model or self.model_name,
            "messages": list(request.messages),
            "stream": True,
            "max_tokens": request.max_tokens,
        }
        if not body["model"]:
            del body["model"]
        if self.include_usage:
            body["stream_options"] = {"include_usage": True}
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.top_p is not None:
            body["top_p"] = request.top_p
        if request.stop:
            body["stop"] = list(request.stop)
        if request.tools:
            body["tools"] = list(request.tools)
            if request.tool_choice is not None:
                body["tool_choice"] = request.tool_choice
        body.update(self.extra_body)
        body.update(request.extra)
        return body

    def _send(self, conn: _Connection, method: str, body: bytes | None, url: str) -> http.client.HTTPResponse:
        resp = conn.request(method, body, self._headers(stream=body is not None))
        if resp.status >= 400:
            raise self._http_error(resp, url)
        return resp

    def _http_error(self, resp: http.client.HTTPResponse, url: str) -> EngineError:
        try:
            raw = resp.read(_MAX_ERROR_BODY)
        except (OSError, http.client.HTTPException):
            raw = b""
        message = raw.decode("utf-8", "replace").strip()
        try:
            data = json.loads(raw)
            err = data.get("error", data) if isinstance(data, dict) else data
            if isinstance(err, dict):
                message = str(err.get("message") or err.get("detail") or message)
            elif isinstance(err, str):
                message = err
        except ValueError:
            pass
        message = self._safe(message[:500] or resp.reason)
        text = f"LLM server {redact_url(url)} answered HTTP {resp.status}: {message}"
        if resp.status in (401, 403):
            return EngineError(text + " (check the API key)", code="llm_unauthorized")
        if resp.status in (429, 503):
            retry = resp.getheader("Retry-After")
            try:
                retry_after = float(retry) if retry else None
            except ValueError:
                retry_after = None
            return EngineError(text, code="llm_busy", status=503, retry_after=retry_after)
        return EngineError(text, code="llm_http_error")

    def _safe(self, text: str) -> str:
        """``text`` (from the server or an exception) with URLs redacted and our API key masked."""
        return redact_text(str(text), (self.api_key,))

    def _transport_error(self, exc: BaseException, url: str) -> EngineError:
        url, text = redact_url(url), self._safe(str(exc))
        if isinstance(exc, TimeoutError | socket.timeout):
            return EngineError(f"LLM server {url} did not answer in time ({text})", code="llm_timeout")
        if isinstance(exc, ConnectionRefusedError | socket.gaierror):
            return EngineError(f"cannot reach the LLM server {url}: {text}", code="llm_unreachable")
        return EngineError(f"LLM server {url} failed: {type(exc).__name__}: {text}", code="llm_unreachable")

    def generate(self, request: ChatRequest, cancel: CancelToken) -> Iterator[ChatDelta]:
        """Stream one reply. See :meth:`ChatEngine.generate`; the error codes are listed on the class."""
        payload = json.dumps(self.body(request)).encode()
        conn = _Connection(self.url, self.connect_timeout, self.read_timeout)
        unregister = cancel.on_cancel(conn.abort)
        try:
            try:
                resp = self._send(conn, "POST", payload, self.url)
            except (TimeoutError, OSError, http.client.HTTPException) as exc:
                if cancel.cancelled:
                    yield ChatDelta(finish_reason="cancelled")
                    return
                raise self._transport_error(exc, self.url) from exc
            content_type = (resp.getheader("Content-Type") or "").lower()
            if "text/event-stream" not in content_type:
                yield from self._whole_response(resp)  # a server that ignored stream: true
                return
            yield from self._read_stream(resp, cancel)
        finally:
            unregister()
            conn.close()

    def _whole_response(self, resp: http.client.HTTPResponse) -> Iterator[ChatDelta]:
        try:
            raw = resp.read()
        except (TimeoutError, OSError, http.client.HTTPException) as exc:
            raise self._transport_error(exc, self.url) from exc
        try:
            data = json.loads(raw)
            choice = data["choices"][0]
            message = choice.get("message") or {}
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise EngineError(f"LLM server {self.shown_url}: unreadable response", code="llm_bad_response") from exc
        calls = tuple(
            ToolCallDelta(index=i, id=c.get("id"), name=(c.get("function") or {}).get("name"),
                          arguments=_arguments_text((c.get("function") or {}).get("arguments")))
            for i, c in enumerate(message.get("tool_calls") or [])
        )
        if message.get("content") or calls:
            yield ChatDelta(text=message.get("content") or "", tool_calls=calls)
        yield ChatDelta(finish_reason=choice.get("finish_reason") or "stop", usage=_usage(data.get("usage")))

    def _read_stream(self, resp: http.client.HTTPResponse, cancel: CancelToken) -> Iterator[ChatDelta]:
        finish: str | None = None
        usage: Usage | None = None
        done = False
        for data in self._sse_events(resp, cancel):
            if data.strip() == "[DONE]":
                done = True
                break
            delta, chunk_finish, chunk_usage = self._parse_chunk(data)
            if chunk_usage is not None:
                usage = chunk_usage
            if chunk_finish is not None:
                finish = chunk_finish
            if delta is not None:
                yield delta
        if cancel.cancelled:
            yield ChatDelta(finish_reason="cancelled", usage=usage)
            return
        if not done and finish is None:
            raise EngineError(f"LLM server {self.shown_url} closed the stream before it finished",
                              code="llm_stream_truncated")
        yield ChatDelta(finish_reason=finish or "stop", usage=usage)

    def _sse_events(self, resp: http.client.HTTPResponse, cancel: CancelToken) -> Iterator[str]:
        """The ``data`` of each server-sent event (several ``data:`` lines of one event joined with newlines);
        comments and other fields are ignored. Ends quietly when ``cancel`` fired or the connection closed."""
        data_lines: list[str] = []
        while True:
            try:
                raw = resp.readline(_MAX_LINE)
            except (TimeoutError, OSError, http.client.HTTPException, ValueError) as exc:
                if cancel.cancelled:
                    return
                raise self._transport_error(exc, self.url) from exc
            if cancel.cancelled:
                return
            if not raw:
                if data_lines:
                    yield "\n".join(data_lines)
                return
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line.startswith("data:"):
                data_lines.append(line[5:].removeprefix(" "))
            elif not line and data_lines:
                yield "\n".join(data_lines)
                data_lines = []

    def _parse_chunk(self, data: str) -> tuple[ChatDelta | None, str | None, Usage | None]:
        try:
            chunk = json.loads(data)
        except ValueError as exc:
            raise EngineError(f"LLM server {self.shown_url} sent a malformed stream chunk: {self._safe(data[:200])!r}",
                              code="llm_bad_response") from exc
        if not isinstance(chunk, dict):
            raise EngineError(f"LLM server {self.shown_url} sent a non-object chunk", code="llm_bad_response")
        if chunk.get("error"):
            err = chunk["error"]
            message = err.get("message") if isinstance(err, dict) else str(err)
            raise EngineError(f"LLM server {self.shown_url} failed mid-stream: {self._safe(message)}",
                              code="llm_http_error")
        usage = _usage(chunk.get("usage"))
        choices = chunk.get("choices") or []
        choice = next((c for c in choices if isinstance(c, dict) and c.get("index", 0) == 0), None)
        if choice is None:
            return None, None, usage
        raw_delta = choice.get("delta") or {}
        text = raw_delta.get("content") or ""
        calls = []
        for i, call in enumerate(raw_delta.get("tool_calls") or []):
            if not isinstance(call, dict):
                continue
            fn = call.get("function") or {}
            calls.append(ToolCallDelta(
                index=int(call.get("index", i)), id=call.get("id") or None, name=fn.get("name") or None,
                arguments=_arguments_text(fn.get("arguments")),
            ))
        delta = ChatDelta(text=text, tool_calls=tuple(calls)) if text or calls else None
        return delta, choice.get("finish_reason") or None, usage


def _arguments_text(arguments: Any) -> str:
    """A tool call's arguments as a JSON string fragment (some servers send an object instead of a string)."""
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments)


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    try:
        return Usage(prompt_tokens=int(raw.get("prompt_tokens") or 0),
                     completion_tokens=int(raw.get("completion_tokens") or 0))
    except (TypeError, ValueError):
        return None

