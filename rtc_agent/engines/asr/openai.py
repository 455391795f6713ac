"""Remote ASR: an OpenAI-compatible ``/v1/audio/transcriptions`` (and ``/translations``) server.

Works with faster-whisper-server / speaches, vLLM's Whisper endpoint, whisper.cpp's server and OpenAI. The audio
goes up as a 16-bit WAV; ``verbose_json`` gives segments and, where the server reports them, ``no_speech_prob``
and ``avg_logprob``. These servers cannot force a prefix, so results say ``prefix_applied=False`` and the
streaming policy aligns the whole text itself; the committed text is sent as the ``prompt`` instead.
"""

from __future__ import annotations

import http.client
import io
import json
import time
import urllib.error
import urllib.request
import uuid
import wave
import zlib
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from rtc_agent.engines.asr.base import SAMPLE_RATE, Segment, TranscribeRequest, Transcript
from rtc_agent.errors import EngineError
from rtc_agent.redact import redact_text, redact_url, register_secret, register_url_secrets
from rtc_agent.worker.engine import run_each


def wav_bytes(audio: np.ndarray, sample_rate: int = SAMPLE_RATE) -> bytes:
    pcm = (np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0) * 32767).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


def multipart(fields: dict[str, str], files: dict[str, tuple[str, bytes, str]]) -> tuple[bytes, str]:
    """A ``multipart/form-data`` body and its content type."""
    boundary = "rtcagent" + uuid.uuid4().hex
    out = io.BytesIO()
    for name, value in fields.items():
        out.write(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    for name, (filename, data, content_type) in files.items():
        out.write(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                  f"Content-Type: {content_type}\r\n\r\n".encode())
        out.write(data)
        out.write(b"\r\n")
    out.write(f"--{boundary}--\r\n".encode())
    return out.getvalue(), f"multipart/form-data; boundary={boundary}"


class OpenAIASREngine:
    """Worker engine: one HTTP request per ``TranscribeRequest`` (run several with ``concurrency``)."""

    def __init__(self, base_url: str, model: str = "whisper-1", *, api_key: str = "", timeout_s: float = 30.0) -> None:
        if not base_url:
            raise ValueError("the openai ASR engine needs --asr-url (e.g. http://gpu-box:8000/v1)")
        self.base_url = base_url.strip().rstrip("/")
        self.shown_url = redact_url(self.base_url)
        self.model = model or "whisper-1"
        self.api_key = api_key
        self.timeout_s = timeout_s
        register_secret(api_key)
        register_url_secrets(self.base_url)

    def load(self, progress: Callable[[str], None]) -> None:
        progress(f"using the remote ASR server {self.shown_url} (model {self.model})")

    def endpoint(self, path: str) -> str:
        """``path`` under the base URL, the query (if any) kept last and the user-info left out of the request."""
        parts = urlsplit(self.base_url)
        netloc = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/") + path, parts.query, ""))

    def _safe(self, text: str) -> str:
        return redact_text(text, (self.api_key,))

    def run_batch(self, requests: list[TranscribeRequest]) -> list[Transcript | Exception]:
        return run_each(requests, self.transcribe, kind=TranscribeRequest)

    def transcribe(self, request: TranscribeRequest) -> Transcript:
        start = time.monotonic()
        fields = {"model": self.model, "response_format": "verbose_json", "temperature": "0"}
        if request.language and request.task == "transcribe":
            fields["language"] = request.language
        context = " ".join(t for t in (request.prompt.strip(), request.prefix.strip()) if t)
        if context:
            fields["prompt"] = context
        body, content_type = multipart(fields, {"file": ("audio.wav", wav_bytes(request.audio), "audio/wav")})
        path = "/audio/translations" if request.task == "translate" else "/audio/transcriptions"
        headers = {"Content-Type": content_type}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            http_request = urllib.request.Request(self.endpoint(path), data=body, headers=headers, method="POST")
        except ValueError as exc:
            raise EngineError(f"bad ASR server URL {self.shown_url}: {self._safe(str(exc))}",
                              code="engine_unreachable") from None
        try:
            with urllib.request.urlopen(http_request, timeout=self.timeout_s) as resp:
                data = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = self._safe(exc.read()[:300].decode(errors="replace"))
            raise EngineError(f"ASR server answered {exc.code}: {detail}", code="engine_http_error") from None
        except (urllib.error.URLError, TimeoutError, OSError, http.client.HTTPException) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            if isinstance(reason, TimeoutError):  # a server that accepts and never answers
                raise EngineError(f"ASR server {self.shown_url} did not answer within {self.timeout_s:.3g} s",
                                  code="engine_timeout", status=504) from None
            raise EngineError(f"ASR server {self.shown_url} unreachable: {self._safe(str(exc))}",
                              code="engine_unreachable") from None
        except json.JSONDecodeError:
            raise EngineError("ASR server sent a body that is not JSON", code="engine_bad_response") from None
        return self._transcript(data, request, time.monotonic() - start)

    @staticmethod
    def _transcript(data: dict, request: TranscribeRequest, elapsed: float) -> Transcript:
        text = str(data.get("text", "")).strip()
        raw_segments = data.get("segments") or []
        segments = [Segment(float(s.get("start", 0.0)), float(s.get("end", request.duration_s)), str(s.get("text", "")))
                    for s in raw_segments if isinstance(s, dict)]
        no_speech = max((float(s.get("no_speech_prob", 0.0)) for s in raw_segments if isinstance(s, dict)),
                        default=0.0)
        logprobs = [float(s["avg_logprob"]) for s in raw_segments if isinstance(s, dict) and "avg_logprob" in s]
        encoded = text.encode()
        return Transcript(
            text=text, segments=segments or ([Segment(0.0, request.duration_s, text)] if text else []),
            language=data.get("language") or request.language, no_speech_prob=no_speech,
            avg_logprob=sum(logprobs) / len(logprobs) if logprobs else 0.0,
            compression_ratio=len(encoded) / len(zlib.compress(encoded)) if encoded else 1.0,
            prefix_applied=False, audio_s=request.duration_s, decode_s=elapsed,
        )
