"""Model backends by kind (``vad``, ``asr``, ``st``, ``mt``, ``llm``, ``tts``, ``vlm``), each behind a small
contract.

:func:`register_engines` adds the engines the settings choose to a worker; nothing loads until it is first used
or preloaded.
"""

from __future__ import annotations

from typing import Any


def engine_specs(settings: Any) -> list[Any]:
    """The ``EngineSpec`` of every engine the apps use, as the settings configure them."""
    from rtc_agent.engines import asr, llm, mt, st, tts, vad, vlm

    return [vad.engine_spec(settings), asr.engine_spec(settings), *tts.engine_specs(settings),
            llm.engine_spec(settings), *st.engine_specs(settings), vlm.engine_spec(settings),
            *mt.engine_specs(settings)]


def register_engines(worker: Any, settings: Any) -> None:
    for spec in engine_specs(settings):
        worker.add(spec)
