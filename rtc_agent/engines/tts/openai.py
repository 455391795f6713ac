"""The remote TTS engine: any server with the OpenAI ``POST /v1/audio/speech`` API (OpenAI, vLLM-Omni, Kokoro-FastAPI,
openedai-speech, LocalAI, Speaches, ...).

The request is ``{"model", "input", "voice", "response_format", "speed"}`` (``speed`` only when not 1.0, which
some servers do not accept). ``response_format`` is ``wav`` (self-describing, the default) or ``pcm`` (raw 16-bit
little-endian mono at ``pcm_sample_rate``, 24 kHz in OpenAI's API). A WAV body is accepted whatever was asked.

Blocking ``http.client`` calls made from the worker's engine threads: one keep-alive connection per thread, a
connect timeout, a read timeout per socket operation and an overall deadline per request, a bounded response size.
Failures are ``EngineError`` with codes listed in :mod:`rtc_agent.engines.tts.base`.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from rtc_agent.engines.endpoints import openai_endpoint
from rtc_agent.engines.tts.base import (
    MAX_SPEED,
    MAX_TEXT_CHARS,
    MIN_SPEED,
    Synthesis,
    SynthesisRequest,
    check_language,
    check_text,
    decode_wav,
    effective_speed,
    language_code,
)
from rtc_agent.errors import EngineError
from rtc_agent.redact import redact_text, redact_url, register_secret, register_url_secrets
from rtc_agent.worker.engine import run_each

log = logging.getLogger(__name__)

__all__ = ["OpenAITTSEngine", "speech_url"]

RESPONSE_FORMATS = ("wav", "pcm")


def speech_url(url: str) -> str:
    """The full ``/v1/audio/speech`` URL from a base URL: ``http://h:8000``, ``http://h:8000/v1`` and the full URL
    all work. Raises ``ValueError`` for a missing or non-HTTP URL."""
    return openai_endpoint(url, "/audio/speech", "the TTS server URL (--tts-url)")


class OpenAITTSEngine:
    """An OpenAI-compatible speech server as a worker engine: ``SynthesisRequest`` in, ``Synthesis`` out.

    - ``url``: the server (see :func:`speech_url`); ``model`` and ``voice``: sent as is (``voice`` is the default,
      a request's own ``voice`` wins); ``api_key``: sent as ``Authorization: Bearer`` when set.
    - ``speed``: the base rate, multiplied by each request's ``speed`` (clamped to the allowed range).
    - ``response_format``: ``wav`` or ``pcm``; ``pcm_sample_rate``: the rate of raw ``pcm`` bodies.
    - ``timeout_s``: the most one request may take, from connecting to the last byte (``engine_timeout`` after);
      ``connect_timeout_s``: the most the TCP/TLS connect may take.
    - ``max_response_bytes``: larger bodies fail with ``tts_bad_audio`` (a bound, not a normal limit: 64 MB is
      over 20 minutes of 24 kHz audio).
    - ``max_chars``: longest text accepted in one request (``text_too_long`` above).
    - ``language``: the ISO 639-1 language of ``voice`` (``en``); ``voices``: more languages the server speaks,
      language -> voice. A request's ``language`` picks its voice (its own ``voice`` still wins); a language in
      neither fails with ``unsupported_language`` before anything is sent. The language itself is not sent: the
      OpenAI API has no such field, and the voice is what speaks it.

    ``load`` checks that the server answers (any HTTP status counts; a refused connection fails the load with
    ``tts_unreachable``). Requests of a batch run one after the other; run several batches at once with the
    worker's ``concurrency``. Each thread keeps its own keep-alive connection, and a request that fails on a
    reused connection that the server had closed is retried once on a fresh one.
    """

    def __init__(self, url: str, *, model: str = "tts-1", voice: str = "alloy", api_key: str = "",
                 speed: float = 1.0, response_format: str = "wav", pcm_sample_rate: int = 24000,
                 timeout_s: float = 30.0, connect_timeout_s: float = 5.0, max_response_bytes: int = 64 * 1024 * 1024,
                 max_chars: int = MAX_TEXT_CHARS, check_on_load: bool = True, language: str = "en",
                 voices: Mapping[str, str] | None = None) -> None:
        self.url = speech_url(url)
        self.shown_url = redact_url(self.url)  # for messages, progress and repr: no user-info, no query values
        if not MIN_SPEED <= speed <= MAX_SPEED:
            raise ValueError(f"speed must be in [{MIN_SPEED}, {MAX_SPEED}], got {speed!r}")
        if response_format not in RESPONSE_FORMATS:
            raise ValueError(f"response_format must be one of {', '.join(RESPONSE_FORMATS)}, got {response_format!r}")
        if pcm_sample_rate < 8000:
            raise ValueError(f"pcm_sample_rate must be >= 8000, got {pcm_sample_rate!r}")
        if timeout_s <= 0 or connect_timeout_s <= 0:
            raise ValueError("timeout_s and connect_timeout_s must be > 0")
        if max_response_bytes < 1024 or max_chars < 1:
            raise ValueError("max_response_bytes must be >= 1024 and max_chars >= 1")
        self.model = model or "tts-1"
        self.voice = voice or "alloy"
        self.language = language_code(language)
        self.voices = {language_code(code): name for code, name in (voices or {}).items() if name}
        self.speed = speed
        self.response_format = response_format
        self.pcm_sample_rate = pcm_sample_rate
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.max_response_bytes = max_response_bytes
        self.max_chars = max_chars
        self.check_on_load = check_on_load
        self._api_key = api_key
        register_secret(api_key)
        register_url_secrets(self.url)
        parts = urlsplit(self.url)
        self._scheme = parts.scheme
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._path = parts.path + (f"?{parts.query}" if parts.query else "")
        self._local = threading.local()
        self._connections: list[http.client.HTTPConnection] = []
        self._conn_lock = threading.Lock()
        self._sample_rate = 0

    def __repr__(self) -> str:  # never shows the API key
        return f"OpenAITTSEngine(url={self.shown_url!r}, model={self.model!r}, voice={self.voice!r})"

    @property
    def sample_rate(self) -> int:
        """Sample rate of the last response (0 before the first one)."""
        return self._sample_rate

    # connections ------------------------------------------------------------------------------------------------

    def _new_connection(self) -> http.client.HTTPConnection:
        if self._scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self._host, self._port, timeout=self.connect_timeout_s, context=ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self.connect_timeout_s)
        with self._conn_lock:
            self._connections.append(conn)
        return conn

    def _drop_connection(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        with self._conn_lock, contextlib.suppress(ValueError):
            self._connections.remove(conn)
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection and whether it was used before."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and conn.sock is not None:
            return conn, True
        if conn is not None:
            self._drop_connection(conn)
        conn = self._new_connection()
        self._local.conn = conn
        return conn, False

    def _safe(self, text: object) -> str:
        """``text`` (a server's answer, an exception) with URLs redacted and our API key masked."""
        return redact_text(str(text), (self._api_key,))

    def _unreachable(self, exc: BaseException) -> EngineError:
        return EngineError(f"TTS server {self._host}:{self._port} is unreachable: {self._safe(exc)} (check --tts-url)",
                           code="tts_unreachable")

    def _timeout(self, what: str) -> EngineError:
        return EngineError(f"TTS server {self._host}:{self._port} did not answer within {self.timeout_s:.3g} s "
                           f"({what})", code="engine_timeout", status=504)

    # engine contract ----------------------------------------------------------------------------------------------

    def load(self, progress: Callable[[str], None] = lambda _msg: None) -> None:
        """Check that the server answers (``GET`` of the speech URL; any HTTP status counts as reachable)."""
        progress(f"remote TTS {self.shown_url} (model {self.model}, voice {self.voice}, {self.response_format})")
        if not self.check_on_load:
            return
        conn = self._new_connection()
        try:
            conn.connect()
            conn.sock.settimeout(min(self.timeout_s, 10.0))
            conn.request("GET", self._path, headers=self._headers(json_body=False))
            status = conn.getresponse().status
        except TimeoutError as exc:
            raise self._timeout("connection check") from exc
        except (OSError, http.client.HTTPException) as exc:
            raise self._unreachable(exc) from exc
        finally:
            self._drop_connection(conn)
        if status == 404:
            progress(f"server reachable, but GET {redact_url(self._path)} answered 404: check --tts-url (e.g. http://host:8000/v1)")
        else:
            progress(f"server reachable (GET answered {status})")

    def _headers(self, json_body: bool = True) -> dict[str, str]:
        headers = {"Accept": "audio/wav" if self.response_format == "wav" else "audio/pcm, audio/wav;q=0.5",
                   "User-Agent": "rtc-agent"}
        if json_body:
            headers["Content-Type"] = "application/json"
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def synthesize(self, request: SynthesisRequest) -> Synthesis:
        """One request (blocking); raises ``EngineError`` on any failure."""
        text = check_text(request.text, self.max_chars)
        language = check_language("remote TTS", request.language, (self.language, *self.voices))
        voice = request.voice or (self.voices.get(language) if language else None) or self.voice
        body: dict[str, Any] = {"model": self.model, "input": text, "voice": voice,
                                "response_format": self.response_format}
        speed = effective_speed(self.speed, request.speed)
        if speed != 1.0:
            body["speed"] = speed
        payload = json.dumps(body).encode()
        start = time.perf_counter()
        status, headers, data = self._post(payload, start + self.timeout_s)
        if status != 200:
            raise self._http_error(status, headers, data)
        pcm, rate = self._decode(headers.get("content-type", ""), data)
        self._sample_rate = rate
        return Synthesis(pcm=pcm, sample_rate=rate, text=text, voice=voice, speed=speed,
                         compute_s=time.perf_counter() - start, extra={"bytes": len(data)})

    def run_batch(self, requests: list[SynthesisRequest]) -> list[Synthesis | Exception]:
        """One ``Synthesis`` or ``EngineError`` per request, in order."""
        return run_each(requests, self.synthesize, kind=SynthesisRequest)

    def close(self) -> None:
        """Close every keep-alive connection."""
        with self._conn_lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()

    # HTTP ---------------------------------------------------------------------------------------------------------

    def _post(self, payload: bytes, deadline: float) -> tuple[int, dict[str, str], bytes]:
        for attempt in (0, 1):
            conn, reused = self._connection()
            if conn.sock is None:
                try:
                    conn.connect()
                except (OSError, http.client.HTTPException) as exc:  # includes the connect timeout
                    self._drop_connection(conn)
                    raise self._unreachable(exc) from exc
            try:
                conn.sock.settimeout(max(0.01, deadline - time.perf_counter()))
                conn.request("POST", self._path, body=payload, headers=self._headers())
                response = conn.getresponse()
            except TimeoutError as exc:
                self._drop_connection(conn)
                raise self._timeout("waiting for the response") from exc
            except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected,
                    http.client.BadStatusLine) as exc:
                self._drop_connection(conn)
                if reused and attempt == 0:
                    continue  # the server closed an idle keep-alive connection: retry once on a fresh one
                raise self._unreachable(exc) from exc
            except (OSError, http.client.HTTPException) as exc:
                self._drop_connection(conn)
                raise self._unreachable(exc) from exc
            try:
                data = self._read_body(conn, response, deadline)
            except BaseException:
                self._drop_connection(conn)
                raise
            finally:
                response.close()  # fully read: the connection is ready for the next request
            headers = {k.lower(): v for k, v in response.getheaders()}
            if response.will_close:
                self._drop_connection(conn)
            return response.status, headers, data
        raise AssertionError("unreachable")

    def _read_body(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse,
                   deadline: float) -> bytes:
        length = response.getheader("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_response_bytes:
            raise EngineError(f"TTS response of {int(length)} bytes is over the limit of {self.max_response_bytes}",
                              code="tts_bad_audio")
        parts: list[bytes] = []
        total = 0
        try:
            while True:
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    raise self._timeout("reading the audio")
                if conn.sock is not None:
                    conn.sock.settimeout(remaining)
                chunk = response.read1(65536)
                if not chunk:
                    break
                total += len(chunk)
                if total > self.max_response_bytes:
                    raise EngineError(f"TTS response is over the limit of {self.max_response_bytes} bytes",
                                      code="tts_bad_audio")
                parts.append(chunk)
        except TimeoutError as exc:
            raise self._timeout("reading the audio") from exc
        except (OSError, http.client.HTTPException) as exc:
            raise EngineError(f"TTS server {self._host}:{self._port} broke off the response: {self._safe(exc)}",
                              code="tts_server_error") from exc
        return b"".join(parts)

    def _http_error(self, status: int, headers: dict[str, str], data: bytes) -> EngineError:
        detail = self._safe(_error_message(data))
        where = f"TTS server {self.shown_url} answered {status}"
        if status in (401, 403):
            return EngineError(f"{where}: {detail} (check the API key, RTC_AGENT_TTS_API_KEY)",
                               code="tts_unauthorized")
        if status == 404:
            return EngineError(f"{where}: {detail} (check --tts-url, e.g. http://host:8000/v1, and --tts-model "
                               f"{self.model!r})", code="tts_not_found")
        if status in (429, 503):
            retry = headers.get("retry-after", "")
            return EngineError(f"{where}: {detail}", code="tts_busy", status=503,
                               retry_after=float(retry) if retry.replace(".", "", 1).isdigit() else 1.0)
        if 400 <= status < 500:
            return EngineError(f"{where}: {detail} (model {self.model!r}, voice, format {self.response_format!r})",
                               code="tts_bad_request")
        return EngineError(f"{where}: {detail}", code="tts_server_error")

    def _decode(self, content_type: str, data: bytes) -> tuple[np.ndarray, int]:
        if not data:
            raise EngineError("TTS server answered 200 with an empty body", code="tts_bad_audio")
        if data[:4] == b"RIFF":
            try:
                pcm, rate = decode_wav(data)
            except ValueError as exc:
                raise EngineError(f"TTS server sent an unreadable WAV: {exc}", code="tts_bad_audio") from exc
        else:
            kind = content_type.split(";")[0].strip().lower()
            if self.response_format == "wav" or kind.startswith(("application/json", "text/")) or kind in (
                    "audio/mpeg", "audio/mp3", "audio/ogg", "audio/opus", "audio/aac", "audio/flac"):
                raise EngineError(f"TTS server sent {kind or 'an unknown content type'} "
                                  f"({len(data)} bytes: {data[:60]!r}), expected {self.response_format} audio",
                                  code="tts_bad_audio")
            if len(data) % 2:
                data = data[:-1]
            pcm, rate = np.frombuffer(data, dtype="<i2").astype(np.int16), self.pcm_sample_rate
        if pcm.size == 0:
            raise EngineError("TTS server sent audio with no samples", code="tts_bad_audio")
        return pcm, rate


def _error_message(data: bytes, limit: int = 300) -> str:
    """The human part of an error body: OpenAI's ``{"error": {"message"}}``, FastAPI's ``{"detail"}``, or text."""
    text = data[:4096].decode("utf-8", "replace").strip()
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            text = str(err["message"])
        elif isinstance(err, str):
            text = err
        elif body.get("detail"):
            text = json.dumps(body["detail"]) if not isinstance(body["detail"], str) else body["detail"]
        elif body.get("message"):
            text = str(body["message"])
    text = " ".join(text.split())
    return (text[:limit] + "...") if len(text) > limit else (text or "no details")
