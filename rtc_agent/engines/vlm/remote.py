"""Remote realtime vision services as a vision engine: the MOSS reference service (``--vlm-engine moss`` with
``--vlm-url``) and SGLang-Omni (``sglang`` / ``openai``). Each session is one WebSocket connection
(:class:`~rtc_agent.engines.vlm.remote_session.RemoteVisionSession`); the two services' messages are in
:mod:`~rtc_agent.engines.vlm.remote_wire`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp

from rtc_agent.engines.vlm.base import SessionOptions, VLMEngine
from rtc_agent.engines.vlm.remote_session import RemoteVisionSession
from rtc_agent.engines.vlm.remote_wire import RemoteSessionError, ServiceProtocol, health_url, realtime_url, safe_text
from rtc_agent.engines.vlm.session import VisionSession
from rtc_agent.redact import redact_url, register_url_secrets

__all__ = ["RemoteVLMEngine"]


class RemoteVLMEngine(VLMEngine):
    """A remote realtime vision service (``--vlm-engine moss`` with ``--vlm-url``, or ``sglang`` / ``openai``).

    ``load`` checks the service's ``/health``; each session is one WebSocket connection.
    """

    def __init__(self, url: str, *, protocol: ServiceProtocol = "moss", model: str | None = None,
                 connect_timeout: float = 30.0) -> None:
        super().__init__()
        self.url = realtime_url(url, protocol)
        self.shown_url = redact_url(self.url)
        register_url_secrets(self.url)
        self.protocol: ServiceProtocol = protocol
        self.model = model
        self.connect_timeout = connect_timeout

    def load(self, progress: Callable[[str], None]) -> None:
        target = health_url(self.url)
        progress(f"checking {redact_url(target)}")

        async def check() -> int:
            timeout = aiohttp.ClientTimeout(total=min(10.0, self.connect_timeout))
            async with aiohttp.ClientSession(timeout=timeout) as http, http.get(target) as resp:
                return resp.status

        try:
            status = asyncio.run(check())
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise RemoteSessionError(f"the {self.protocol} realtime service at {redact_url(target)} is not reachable: "
                                     f"{type(exc).__name__}: {safe_text(exc)}") from exc
        if status >= 400:
            raise RemoteSessionError(f"the {self.protocol} realtime service at {redact_url(target)} answered {status}")
        progress(f"{self.protocol} realtime service at {self.shown_url} is up")
        self.loaded = True

    def _open(self, options: SessionOptions, release: Callable[[], None]) -> VisionSession:
        return RemoteVisionSession(self.url, options, protocol=self.protocol, model=self.model,
                                   connect_timeout=self.connect_timeout, on_close=release)

    def describe(self) -> dict[str, Any]:
        return {"backend": f"remote-{self.protocol}", "url": self.shown_url, "model": self.model}
