"""The ``agent`` app's session configuration: keys, defaults and validation (``POST /v1/sessions`` ``config``).

Keys (:data:`DEFAULTS`): ``instructions`` (system prompt, at most ``max_instructions_chars``), ``language``,
``tools`` (``"auto"``, true or false: whether the model is offered tools), ``max_tokens``, ``temperature``,
``max_tool_rounds``, ``filler`` (said while a tool runs, at most ``max_text_field_chars``), ``vad_threshold``,
``min_silence_ms``, ``min_speech_ms``, ``barge_in``, ``barge_in_grace_ms``, ``barge_in_min_ms`` (loud speech
over a reply that cancels it; default: the server's ``agent_barge_in_min_ms``), ``preemptive`` and ``vision`` (false,
true or visual-commentary options, see :func:`~rtc_agent.apps.vision_commentary.validate_commentary_config`).

Turn and reply options (the OpenAI Realtime adapter sets them; a page may too): ``turn_detection`` (``"vad"``: the
server finds turns; ``"manual"``: the client commits its audio with ``input_audio_buffer.commit``),
``create_response`` (a VAD turn starts a response), ``prefix_padding_ms`` (audio kept before the detected speech),
``output`` (``"audio"``: spoken replies; ``"text"``: ``response.output_text.delta`` only, no TTS), ``tool_choice``
(``"auto"``, ``"none"``, ``"required"`` or ``{"type": "function", "name"}``), ``browser_tool_calls``
(``"wait"``: the response waits for the page's ``function_call_output`` and goes on; ``"end_response"``: the
response ends at the call, as in OpenAI Realtime, and the client answers with the output item and
``response.create``), ``voice`` (the TTS voice; None: the engine's), ``speed`` (0.25-4.0) and ``tool_guard``
(true: an answer that states what a declared built-in tool gives, without calling it, is discarded and asked
again with the tool forced; see :mod:`rtc_agent.apps.agent.tool_guard`).

Errors are :class:`~rtc_agent.errors.InvalidRequest`: ``invalid_config`` for an unknown key or a bad value,
``config_too_large`` for text over its cap (checked first, see :mod:`rtc_agent.apps.limits`).
"""

from __future__ import annotations

from typing import Any

from rtc_agent.apps.captions.app import check_language
from rtc_agent.apps.limits import TextLimits, show, show_keys
from rtc_agent.apps.vision_commentary import validate_commentary_config
from rtc_agent.errors import InvalidRequest

__all__ = ["DEFAULTS", "DEFAULT_INSTRUCTIONS", "LIVE_KEYS", "validate_agent_config"]

DEFAULT_INSTRUCTIONS = (
    "You are a helpful voice assistant. Answer in one or two short spoken sentences. Use plain words: no lists, "
    "no markdown, no emoji."
)

DEFAULTS: dict[str, Any] = {
    "instructions": DEFAULT_INSTRUCTIONS,
    "language": "en",
    "tools": "auto",  # auto: a remote LLM, or an embedded one scoring >= 18/20 on the tool suite (bench/tools.py)
    "max_tokens": 200,
    "temperature": None,
    "max_tool_rounds": 3,
    "filler": "One moment.",
    "vad_threshold": 0.5,
    "min_silence_ms": 400,
    "min_speech_ms": 250,
    "barge_in": True,
    "barge_in_grace_ms": 300,
    "barge_in_min_ms": 300,  # the server's agent_barge_in_min_ms unless given
    "preemptive": True,
    "vision": False,  # true or commentary options: visual commentary of the camera track (vision.* events)
    "turn_detection": "vad",
    "create_response": True,
    "prefix_padding_ms": 300,
    "output": "audio",
    "tool_choice": "auto",
    "browser_tool_calls": "wait",
    "voice": None,
    "speed": 1.0,
    "tool_guard": True,  # a time, sum or conversion a built-in tool gives is never answered without calling it
}
#: Keys a ``session.update`` may change during a session (``session.config``); the rest are fixed at the start.
LIVE_KEYS = frozenset(DEFAULTS) - {"vision", "preemptive", "instructions"}  # instructions: session.instructions


def _check(config: dict[str, Any], key: str, kinds: tuple[type, ...], low: float | None = None,
           high: float | None = None) -> None:
    value = config[key]
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if ok and low is not None and not low <= value <= (high if high is not None else value):
        ok = False
    if not ok:
        raise InvalidRequest(f"agent config {key!r} has a bad value {show(value)}", code="invalid_config")


def validate_agent_config(config: dict[str, Any], settings: Any) -> dict[str, Any]:
    """``config`` over :data:`DEFAULTS` (``vad_threshold`` and, when not ``auto``, ``language`` from the server
    ``settings``), validated; see the module docstring for the errors."""
    unknown = set(config) - set(DEFAULTS)
    if unknown:
        raise InvalidRequest(f"unknown agent config keys: {show_keys(unknown)}", code="invalid_config")
    limits = TextLimits.from_settings(settings)
    limits.instructions("agent config instructions", config.get("instructions"))
    limits.text("agent config filler", config.get("filler"))
    out = {**DEFAULTS, "vad_threshold": settings.vad_threshold,
           "barge_in_min_ms": getattr(settings, "agent_barge_in_min_ms", DEFAULTS["barge_in_min_ms"]), **config}
    if settings.asr_language != "auto" and "language" not in config:
        out["language"] = settings.asr_language
    out["language"] = check_language(out["language"], settings)
    _check(out, "instructions", (str,))
    _check(out, "max_tokens", (int,), 1, 4096)
    _check(out, "max_tool_rounds", (int,), 0, 10)
    _check(out, "filler", (str,))
    _check(out, "vad_threshold", (int, float), 0.01, 0.99)
    _check(out, "min_silence_ms", (int,), 100, 5000)
    _check(out, "min_speech_ms", (int,), 0, 2000)
    _check(out, "barge_in", (bool,))
    _check(out, "barge_in_grace_ms", (int,), 0, 5000)
    _check(out, "barge_in_min_ms", (int,), 0, 2000)
    _check(out, "preemptive", (bool,))
    _check(out, "tool_guard", (bool,))
    if out["temperature"] is not None:
        _check(out, "temperature", (int, float), 0, 2)
    if not isinstance(out["vision"], bool | dict):
        raise InvalidRequest("agent config 'vision' must be true, false or commentary options",
                             code="invalid_config")
    if isinstance(out["vision"], dict):
        validate_commentary_config(out["vision"], settings)
    if out["tools"] not in ("auto", True, False):
        raise InvalidRequest("agent config 'tools' must be 'auto', true or false", code="invalid_config")
    _check_turn_options(out)
    return out


def _one_of(config: dict[str, Any], key: str, choices: tuple[Any, ...]) -> None:
    if config[key] not in choices or isinstance(config[key], bool) != isinstance(choices[0], bool):
        raise InvalidRequest(f"agent config {key!r} must be one of {', '.join(map(repr, choices))}, got "
                             f"{show(config[key])}", code="invalid_config")


def _check_turn_options(out: dict[str, Any]) -> None:
    _one_of(out, "turn_detection", ("vad", "manual"))
    _one_of(out, "output", ("audio", "text"))
    _one_of(out, "browser_tool_calls", ("wait", "end_response"))
    _check(out, "create_response", (bool,))
    _check(out, "prefix_padding_ms", (int,), 0, 5000)
    _check(out, "speed", (int, float), 0.25, 4.0)
    choice = out["tool_choice"]
    named = isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str)
    if choice not in ("auto", "none", "required") and not named:
        raise InvalidRequest("agent config 'tool_choice' must be 'auto', 'none', 'required' or "
                             "{'type': 'function', 'name': ...}", code="invalid_config")
    if out["voice"] is not None and (not isinstance(out["voice"], str) or not 0 < len(out["voice"]) <= 64):
        raise InvalidRequest("agent config 'voice' must be a voice name or null", code="invalid_config")
