"""Vision engines: realtime commentary backends behind the MOSS-VL-Realtime session protocol.

Every backend is a worker :class:`~rtc_agent.worker.Engine` (``load`` / ``run_batch`` / ``close``) that also opens
realtime sessions (:meth:`VLMEngine.open_session`); a session has the API of
:class:`~rtc_agent.engines.vlm.realtime.RealtimeVisionSession`. Backends, chosen with ``--vlm-engine``:

- ``embedded`` (default): :class:`~rtc_agent.engines.vlm.scene.SceneDescriberEngine`, a CPU scene describer
  (scene cuts, motion, faces) that speaks the token protocol; no model weights.
- ``transformers``: :class:`~rtc_agent.engines.vlm.transformers_vlm.TransformersVLMEngine`, an image-text-to-text
  model from ``--vlm-model`` (a local folder; nothing is downloaded), driven token by token; a model that exposes
  ``create_realtime_session`` (MOSS-VL-Realtime) runs its own session.
- ``moss``: with ``--vlm-url``, the MOSS reference service (``/v1/realtime`` WebSocket); without, MOSS-VL-Realtime
  loaded from ``--vlm-model`` with its remote code (``trust_remote_code``).
- ``sglang`` / ``openai``: the SGLang-Omni realtime service at ``--vlm-url`` (``/v1/video/realtime``).

One realtime session per model instance: :func:`engine_spec` registers the engine with ``capacity=1`` and each
backend refuses a second concurrent session with :class:`~rtc_agent.engines.vlm.base.SessionBusy`.
This package face re-exports the contract the app layer uses (the engine in :mod:`~rtc_agent.engines.vlm.base`,
sessions in :mod:`~rtc_agent.engines.vlm.session`, outputs in :mod:`~rtc_agent.engines.vlm.outputs`) and imports
no model library; backends import theirs when they load.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rtc_agent.engines.vlm.base import ENGINE_NAME, SessionBusy, SessionOptions, VLMEngine
from rtc_agent.engines.vlm.outputs import VisionOutput
from rtc_agent.engines.vlm.session import VisionSession
from rtc_agent.worker import EngineSpec

__all__ = ["ENGINE_NAME", "SessionBusy", "SessionOptions", "VLMEngine", "VisionOutput", "VisionSession", "engine_spec"]


def engine_spec(settings: Any, name: str = ENGINE_NAME) -> EngineSpec:
    """The worker registration of the vision engine chosen by ``settings.vlm_engine`` (default name
    :data:`ENGINE_NAME`; ``capacity=1``: one realtime session per model instance).

    Raises :class:`~rtc_agent.config.SettingsError` for an unknown engine or a missing ``vlm_url`` /
    ``vlm_model``. Nothing is loaded here.
    """
    from rtc_agent.config import SettingsError

    kind = (settings.vlm_engine or "embedded").strip().lower()
    url = (settings.vlm_url or "").strip()
    model = (settings.vlm_model or "").strip()
    factory: Callable[[], Any]
    if kind == "embedded":
        def factory() -> Any:
            from rtc_agent.engines.vlm.scene import SceneDescriberEngine

            return SceneDescriberEngine()
    elif kind == "transformers" or (kind == "moss" and not url):
        if not model:
            raise SettingsError(f"vlm_engine={kind} needs vlm_model: a local model folder (nothing is downloaded)")
        trust = kind == "moss"

        def factory() -> Any:
            from rtc_agent.engines.vlm.transformers_vlm import TransformersVLMEngine

            return TransformersVLMEngine(model, trust_remote_code=trust)
    elif kind in ("moss", "sglang", "openai"):
        if not url:
            raise SettingsError(f"vlm_engine={kind} needs vlm_url (the realtime service's address)")
        protocol = "moss" if kind == "moss" else "sglang"

        def factory() -> Any:
            from rtc_agent.engines.vlm.remote import RemoteVLMEngine

            return RemoteVLMEngine(url, protocol=protocol, model=model or None)
    else:
        raise SettingsError(
            f"unknown vlm_engine {settings.vlm_engine!r}: use embedded, transformers, moss, sglang or openai")
    return EngineSpec(name=name, factory=factory, max_queue=4, capacity=1)
