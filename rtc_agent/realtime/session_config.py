"""The OpenAI Realtime (GA) session object: defaults, validation of updates, and the apps' configuration.

A :class:`SessionConfig` is immutable: :meth:`SessionConfig.updated` returns a new one or raises
:class:`~rtc_agent.realtime.events.RealtimeError` (``param`` names the field, e.g.
``session.audio.input.format.rate``) and changes nothing. Field rules, as OpenAI documents them:

- a whole top-level field replaces the old one; ``audio.input`` / ``audio.output`` fields are replaced one by one;
  a new ``turn_detection`` object starts from the defaults (``null`` turns server VAD off: manual turns);
- unknown fields are refused (``unknown_parameter``); ``prompt`` (stored prompts) and MCP tools are refused
  (``unsupported_parameter``); ``tracing``, ``truncation``, ``include``, ``noise_reduction``, ``reasoning``,
  ``parallel_tool_calls`` and ``idle_timeout_ms`` are kept and echoed but change nothing here;
- the ``type`` of a session cannot change.

:meth:`agent_config` / :meth:`captions_config` give the served app's configuration (``type: realtime`` is the
``agent`` app, ``type: transcription`` the ``captions`` app) and :meth:`native_update` the native
``session.update`` payload that moves the app from one config to the next.
"""

from __future__ import annotations

import copy
from typing import Any

from rtc_agent.apps.agent.config import DEFAULT_INSTRUCTIONS, DEFAULTS
from rtc_agent.apps.captions.app import LANGUAGE_CODES
from rtc_agent.realtime.audio import FORMAT_RATES
from rtc_agent.realtime.events import RealtimeError

__all__ = ["SessionConfig"]

KINDS = ("realtime", "transcription")
REALTIME_FIELDS = frozenset({"type", "model", "instructions", "output_modalities", "max_output_tokens", "tools",
                             "tool_choice", "audio", "include", "tracing", "truncation", "prompt", "reasoning",
                             "parallel_tool_calls"})
TRANSCRIPTION_FIELDS = frozenset({"type", "audio", "include"})
INPUT_FIELDS = frozenset({"format", "transcription", "noise_reduction", "turn_detection"})
OUTPUT_FIELDS = frozenset({"format", "voice", "speed"})
VAD_FIELDS = {"server_vad": frozenset({"type", "threshold", "prefix_padding_ms", "silence_duration_ms",
                                       "idle_timeout_ms", "create_response", "interrupt_response"}),
              "semantic_vad": frozenset({"type", "eagerness", "create_response", "interrupt_response"})}
EAGERNESS_SILENCE_MS = {"low": 1200, "medium": 700, "auto": 700, "high": 400}  # semantic_vad, approximated
PCM = {"type": "audio/pcm", "rate": 24000}
#: fields kept and echoed but not acted on, with what each may hold
PASSIVE_FIELDS = {
    "type": lambda v: v in KINDS,
    "tracing": lambda v: v is None or v == "auto" or isinstance(v, dict),
    "truncation": lambda v: v in ("auto", "disabled") or isinstance(v, dict),
    "include": lambda v: v is None or (isinstance(v, list) and all(isinstance(x, str) for x in v)),
    "reasoning": lambda v: v is None or isinstance(v, dict),
    "parallel_tool_calls": lambda v: v is None or isinstance(v, bool),
}


def _fail(message: str, param: str, code: str = "invalid_value") -> RealtimeError:
    return RealtimeError(message, code=code, param=param)


def _unknown(data: dict[str, Any], known: frozenset[str], path: str) -> None:
    for key in data:
        if key not in known:
            raise _fail(f"Unknown parameter: '{path}.{key}'.", f"{path}.{key}", "unknown_parameter")


def _number(value: Any, path: str, low: float, high: float, *, integer: bool = False) -> Any:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not low <= value <= high:
        kind = "an integer" if integer else "a number"
        raise _fail(f"'{path}' must be {kind} from {low:g} to {high:g}, got {str(value)[:40]}", path)
    return value


def _object(value: Any, path: str, *, nullable: bool = False) -> Any:
    if value is None and nullable:
        return None
    if not isinstance(value, dict):
        raise _fail(f"'{path}' must be an object{' or null' if nullable else ''}", path, "invalid_type")
    return value


def _format(value: Any, path: str) -> dict[str, Any]:
    fmt = _object(value, path)
    _unknown(fmt, frozenset({"type", "rate"}), path)
    kind = fmt.get("type", "audio/pcm")
    if kind not in FORMAT_RATES:
        raise _fail(f"Invalid value: {str(kind)[:40]!r}. Supported values are: 'audio/pcm', 'audio/pcmu' and "
                    "'audio/pcma'.", f"{path}.type")
    if kind == "audio/pcm":
        if fmt.get("rate", 24000) != 24000:
            raise _fail("audio/pcm is 24000 Hz only", f"{path}.rate")
        return dict(PCM)
    if "rate" in fmt:
        raise _fail(f"{kind} has no rate (it is always 8000 Hz)", f"{path}.rate", "unknown_parameter")
    return {"type": kind}


def _transcription(value: Any, path: str) -> dict[str, Any] | None:
    spec = _object(value, path, nullable=True)
    if spec is None:
        return None
    _unknown(spec, frozenset({"model", "language", "prompt", "delay", "keywords", "languages"}), path)
    out = {"model": spec.get("model", "whisper-1"), "language": spec.get("language"), "prompt": spec.get("prompt", "")}
    if not isinstance(out["model"], str) or not isinstance(out["prompt"], str):
        raise _fail("transcription model and prompt must be strings", path, "invalid_type")
    if out["language"] is not None and out["language"] not in LANGUAGE_CODES:
        raise _fail(f"unknown language {str(out['language'])[:20]!r}: use an ISO-639-1 code such as 'en'",
                    f"{path}.language")
    return out


def _turn_detection(value: Any, path: str, defaults: dict[str, Any]) -> dict[str, Any] | None:
    spec = _object(value, path, nullable=True)
    if spec is None:
        return None
    kind = spec.get("type", "server_vad")
    if kind not in VAD_FIELDS:
        raise _fail(f"Invalid value: {str(kind)[:40]!r}. Supported values are: 'server_vad' and 'semantic_vad'.",
                    f"{path}.type")
    _unknown(spec, VAD_FIELDS[kind], path)
    out = {**defaults, "type": kind}
    if kind == "semantic_vad":
        out = {"type": kind, "eagerness": spec.get("eagerness", "auto"), "create_response": True,
               "interrupt_response": True}
        if out["eagerness"] not in EAGERNESS_SILENCE_MS:
            raise _fail("eagerness must be 'low', 'medium', 'high' or 'auto'", f"{path}.eagerness")
    for key, value in spec.items():
        if key in ("threshold",):
            _number(value, f"{path}.{key}", 0.0, 1.0)
        elif key in ("prefix_padding_ms", "silence_duration_ms"):
            _number(value, f"{path}.{key}", 0, 10_000, integer=True)
        elif key == "idle_timeout_ms" and value is not None:
            _number(value, f"{path}.{key}", 5000, 30_000, integer=True)
        elif key in ("create_response", "interrupt_response") and not isinstance(value, bool):
            raise _fail(f"'{path}.{key}' must be a boolean", f"{path}.{key}", "invalid_type")
        if key not in ("type", "eagerness"):
            out[key] = value
    return out


def _tools(value: Any, path: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise _fail(f"'{path}' must be a list", path, "invalid_type")
    tools = []
    for i, tool in enumerate(value):
        tool = _object(tool, f"{path}[{i}]")
        if tool.get("type", "function") != "function":
            raise _fail(f"tools of type {str(tool.get('type'))[:20]!r} are not supported (functions only)",
                        f"{path}[{i}].type", "unsupported_parameter")
        _unknown(tool, frozenset({"type", "name", "description", "parameters"}), f"{path}[{i}]")
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise _fail("a function tool needs a 'name'", f"{path}[{i}].name", "missing_required_parameter")
        tools.append({"type": "function", "name": tool["name"], "description": tool.get("description") or "",
                      "parameters": tool.get("parameters") or {"type": "object", "properties": {}}})
    return tools


def _tool_choice(value: Any, path: str) -> Any:
    if value in ("auto", "none", "required"):
        return value
    if isinstance(value, dict) and value.get("type") == "function" and isinstance(value.get("name"), str):
        return {"type": "function", "name": value["name"]}
    raise _fail("tool_choice must be 'auto', 'none', 'required' or {'type': 'function', 'name': ...}", path)


class SessionConfig:
    """One session's GA configuration (see the module docstring). ``data`` is the normalized session object
    without ``id``/``object``/``expires_at``; treat it as read-only."""

    def __init__(self, data: dict[str, Any], vad_defaults: dict[str, Any]) -> None:
        self.data = data
        self.vad_defaults = vad_defaults  # what a new server_vad object starts from

    @classmethod
    def new(cls, kind: str, settings: Any, request: dict[str, Any] | None = None, *,
            model: str | None = None) -> SessionConfig:
        """The defaults for ``kind`` (``realtime`` or ``transcription``), then ``request`` (the ``session`` of a
        client secret or a call) applied as an update. ``param`` paths start with ``session``."""
        if kind not in KINDS:
            raise _fail(f"Invalid value: {str(kind)[:40]!r}. Supported values are: 'realtime' and 'transcription'.",
                        "session.type")
        vad = {"type": "server_vad", "threshold": settings.vad_threshold, "prefix_padding_ms":
               DEFAULTS["prefix_padding_ms"], "silence_duration_ms": DEFAULTS["min_silence_ms"],
               "idle_timeout_ms": None, "create_response": True, "interrupt_response": True}
        audio_in = {"format": dict(PCM), "transcription": None, "noise_reduction": None, "turn_detection": vad}
        if kind == "transcription":
            audio_in["transcription"] = {"model": "whisper-1", "language": None, "prompt": ""}
            data: dict[str, Any] = {"type": kind, "audio": {"input": audio_in}, "include": None}
        else:
            data = {"type": kind, "model": model or "gpt-realtime", "instructions": DEFAULT_INSTRUCTIONS,
                    "output_modalities": ["audio"], "max_output_tokens": "inf", "tools": [], "tool_choice": "auto",
                    "tracing": None, "truncation": "auto", "prompt": None, "include": None,
                    "audio": {"input": audio_in,
                              "output": {"format": dict(PCM), "voice": "alloy", "speed": 1.0}}}
        config = cls(data, dict(vad))
        return config.updated(request) if request else config

    # --- reading ---

    @property
    def kind(self) -> str:
        return self.data["type"]

    @property
    def input_format(self) -> str:
        return self.data["audio"]["input"]["format"]["type"]

    @property
    def output_format(self) -> str:
        return self.data["audio"].get("output", {}).get("format", PCM)["type"]

    @property
    def transcribe(self) -> bool:
        """Whether ``conversation.item.input_audio_transcription.*`` events are sent."""
        return self.data["audio"]["input"]["transcription"] is not None

    @property
    def client_tools(self) -> frozenset[str]:
        return frozenset(t["name"] for t in self.data.get("tools", []))

    def render(self, session_id: str, expires_at: int | None = None) -> dict[str, Any]:
        """The session object of ``session.created`` / ``session.updated`` and client secrets."""
        obj = "realtime.session" if self.kind == "realtime" else "realtime.transcription_session"
        return {"type": self.kind, "object": obj, "id": session_id, "expires_at": expires_at,
                **copy.deepcopy({k: v for k, v in self.data.items() if k != "type"})}

    # --- updating ---

    def updated(self, update: dict[str, Any]) -> SessionConfig:
        """A new config with ``update`` (a ``session.update`` ``session`` object) applied."""
        update = _object(update, "session")
        if update.get("type", self.kind) != self.kind:
            raise _fail(f"a {self.kind} session cannot become {str(update['type'])[:20]!r}", "session.type")
        _unknown(update, REALTIME_FIELDS if self.kind == "realtime" else TRANSCRIPTION_FIELDS, "session")
        data = copy.deepcopy(self.data)
        for key, value in update.items():
            path = f"session.{key}"
            if key == "audio":
                self._audio(data, _object(value, path))
            elif key in PASSIVE_FIELDS:
                if not PASSIVE_FIELDS[key](value):
                    raise _fail(f"Invalid value for '{path}'.", path)
                data[key] = value
            elif key == "model" or key == "instructions":
                if not isinstance(value, str):
                    raise _fail(f"'{path}' must be a string", path, "invalid_type")
                data[key] = value
            elif key == "output_modalities":
                if value not in (["audio"], ["text"]):
                    raise _fail("output_modalities must be ['audio'] or ['text']", path)
                data[key] = list(value)
            elif key == "max_output_tokens":
                data[key] = value if value == "inf" else _number(value, path, 1, 4096, integer=True)
            elif key == "tools":
                data[key] = _tools(value, path)
            elif key == "tool_choice":
                data[key] = _tool_choice(value, path)
            elif key == "prompt" and value is not None:
                raise _fail("stored prompts are not supported by this server", path, "unsupported_parameter")
        return SessionConfig(data, self.vad_defaults)

    def _audio(self, data: dict[str, Any], audio: dict[str, Any]) -> None:
        _unknown(audio, frozenset({"input", "output"} if self.kind == "realtime" else {"input"}), "session.audio")
        for key, value in _object(audio.get("input", {}), "session.audio.input").items():
            path = f"session.audio.input.{key}"
            _unknown({key: value}, INPUT_FIELDS, "session.audio.input")
            if key == "format":
                data["audio"]["input"]["format"] = _format(value, path)
            elif key == "transcription":
                data["audio"]["input"]["transcription"] = _transcription(value, path)
            elif key == "turn_detection":
                data["audio"]["input"]["turn_detection"] = _turn_detection(value, path, self.vad_defaults)
            else:
                data["audio"]["input"]["noise_reduction"] = _object(value, path, nullable=True)
        for key, value in _object(audio.get("output", {}), "session.audio.output").items():
            path = f"session.audio.output.{key}"
            _unknown({key: value}, OUTPUT_FIELDS, "session.audio.output")
            if key == "format":
                data["audio"]["output"]["format"] = _format(value, path)
            elif key == "speed":
                data["audio"]["output"]["speed"] = _number(value, path, 0.25, 1.5)
            elif isinstance(value, str) and 0 < len(value) <= 64:
                data["audio"]["output"]["voice"] = value
            elif isinstance(value, dict) and isinstance(value.get("id"), str):
                data["audio"]["output"]["voice"] = {"id": value["id"]}
            else:
                raise _fail("voice must be a voice name or {'id': ...}", path)

    # --- the apps ---

    def agent_config(self, settings: Any) -> dict[str, Any]:
        """The ``agent`` app's configuration for this (realtime) session."""
        d = self.data
        audio_in, audio_out = d["audio"]["input"], d["audio"]["output"]
        vad = audio_in["turn_detection"]
        choice = d["tool_choice"]
        config: dict[str, Any] = {
            "instructions": d["instructions"],
            "turn_detection": "vad" if vad is not None else "manual",
            "create_response": vad["create_response"] if vad else True,
            "barge_in": vad["interrupt_response"] if vad else False,
            "output": d["output_modalities"][0],
            "tool_choice": choice,
            "tools": False if choice == "none" else (True if choice != "auto" else "auto"),
            "browser_tool_calls": "end_response",
            "speed": audio_out["speed"],
            "voice": audio_out["voice"] if settings.tts_engine != "embedded" and isinstance(audio_out["voice"], str)
            else None,
        }
        if d["max_output_tokens"] != "inf":
            config["max_tokens"] = d["max_output_tokens"]
        if vad is not None:
            silence = (EAGERNESS_SILENCE_MS[vad["eagerness"]] if vad["type"] == "semantic_vad"
                       else vad["silence_duration_ms"])
            config["min_silence_ms"] = min(5000, max(100, silence))
            config["vad_threshold"] = min(0.99, max(0.01, vad.get("threshold", settings.vad_threshold)))
            config["prefix_padding_ms"] = min(5000, vad.get("prefix_padding_ms", DEFAULTS["prefix_padding_ms"]))
        language = (audio_in["transcription"] or {}).get("language")
        if language:
            config["language"] = language
        return config

    def captions_config(self, settings: Any) -> dict[str, Any]:
        """The ``captions`` app's configuration for this (transcription) session."""
        audio_in = self.data["audio"]["input"]
        vad = audio_in["turn_detection"] or {}
        config: dict[str, Any] = {"vision": False}
        language = (audio_in["transcription"] or {}).get("language")
        if language:
            config["language"] = language
        if vad.get("type") == "server_vad":
            config["vad_threshold"] = min(0.99, max(0.01, vad["threshold"]))
            config["vad_min_silence_ms"] = min(10_000, vad["silence_duration_ms"])
        return config

    def native_update(self, before: SessionConfig, settings: Any) -> dict[str, Any]:
        """The native ``session.update`` ``session`` payload taking the app from ``before`` to this config."""
        if self.kind == "transcription":
            config = self.captions_config(settings)
            return {"config": {"language": config.get("language", settings.asr_language)}}
        old, new = before.agent_config(settings), self.agent_config(settings)
        out: dict[str, Any] = {"instructions": new.pop("instructions"), "tools_replace_server": True}
        old.pop("instructions")
        if self.data["tools"] != before.data["tools"]:
            out["tools"] = self.data["tools"]
        changes = {k: v for k, v in new.items() if old.get(k) != v}
        for key in old.keys() - new.keys():  # back to the server's default
            changes[key] = settings.vad_threshold if key == "vad_threshold" else DEFAULTS[key]
        if "language" in old.keys() - new.keys() and settings.asr_language != "auto":
            changes["language"] = settings.asr_language
        out["config"] = changes
        return out

