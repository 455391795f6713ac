"""The chat data that crosses the engine boundary: the request, the streamed deltas and the merged result.

- :class:`ChatRequest` is one chat completion in OpenAI Chat Completions terms, validated at construction.
- :class:`ChatDelta` (with :class:`ToolCallDelta` and :class:`Usage`) is one streamed piece of a reply.
- :class:`ChatAccumulator` merges deltas into a :class:`ChatResult` (with complete :class:`ToolCall` entries).
- :func:`partial_marker_len` is the hold-back rule of a streaming reader that looks for stop strings or tags.

Plain data only: nothing here touches threads, the event loop or the worker.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

#: ``finish_reason`` values: OpenAI's, plus ``cancelled`` (the caller stopped the generation).
FINISH_REASONS: Final = ("stop", "length", "tool_calls", "content_filter", "cancelled")
_ROLES: Final = ("system", "developer", "user", "assistant", "tool")


# --------------------------------------------------------------------------------------------------------------
# request


def _normalize_tool(tool: Any, index: int) -> dict[str, Any]:
    """One tool in Chat Completions form ``{"type": "function", "function": {name, description?, parameters?}}``.

    Also accepts the flat Realtime form ``{"type": "function", "name": ..., "parameters": ...}`` and a bare
    function object ``{"name": ..., "parameters": ...}``."""
    if not isinstance(tool, Mapping):
        raise ValueError(f"tools[{index}] must be an object, got {type(tool).__name__}")
    if tool.get("type", "function") != "function":
        raise ValueError(f"tools[{index}]: only type 'function' is supported, got {tool.get('type')!r}")
    fn = tool.get("function", tool)
    if not isinstance(fn, Mapping):
        raise ValueError(f"tools[{index}].function must be an object")
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"tools[{index}]: a function needs a non-empty string 'name'")
    out: dict[str, Any] = {"name": name}
    if fn.get("description") is not None:
        out["description"] = str(fn["description"])
    params = fn.get("parameters")
    if params is not None:
        if not isinstance(params, Mapping):
            raise ValueError(f"tools[{index}] ({name}): 'parameters' must be a JSON-schema object")
        out["parameters"] = dict(params)
    return {"type": "function", "function": out}


def tool_name(tool: Mapping[str, Any]) -> str:
    """The function name of a normalized tool entry."""
    return str(tool["function"]["name"])



@dataclass(frozen=True)
class ChatRequest:
    """One chat completion, in OpenAI Chat Completions terms.

    - ``messages``: OpenAI messages (``role`` system/developer/user/assistant/tool; ``content`` a string, None, or
      a list of ``{"type": "text", "text": ...}`` parts; assistant ``tool_calls``; tool ``tool_call_id``).
    - ``tools``: JSON-schema functions; normalized to ``{"type": "function", "function": {...}}`` entries.
    - ``tool_choice``: passed to remote servers as is (``"auto"``, ``"none"``, ``"required"`` or a function).
    - ``max_tokens``: most tokens to generate (>= 1). ``temperature``/``top_p``: None means the engine's default
      (the embedded engine decodes greedily). ``stop``: strings that end the reply (not included in it).
    - ``model``: overrides the engine's model name for a remote engine; ignored by the embedded one.
    - ``extra``: extra JSON fields for a remote server's request body (e.g. ``{"top_k": 20}``).
    - ``stop_loops``: the embedded engine ends a greedy reply once it repeats one phrase
      (:func:`~rtc_agent.engines.llm.loops.ends_in_loop`), with finish reason ``length`` (it would have run to its
      limit); a remote engine ignores it.

    Invalid values raise ``ValueError`` at construction.
    """

    messages: Sequence[Mapping[str, Any]]
    tools: Sequence[Mapping[str, Any]] = ()
    tool_choice: str | Mapping[str, Any] | None = None
    max_tokens: int = 256
    temperature: float | None = None
    top_p: float | None = None
    stop: Sequence[str] = ()
    model: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    stop_loops: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.messages, str | bytes) or not isinstance(self.messages, Sequence) or not self.messages:
            raise ValueError("messages must be a non-empty list of message objects")
        messages: list[dict[str, Any]] = []
        for i, message in enumerate(self.messages):
            if not isinstance(message, Mapping):
                raise ValueError(f"messages[{i}] must be an object, got {type(message).__name__}")
            role = message.get("role")
            if role not in _ROLES:
                raise ValueError(f"messages[{i}]: role must be one of {', '.join(_ROLES)}, got {role!r}")
            content = message.get("content")
            if content is not None and not isinstance(content, str | list):
                raise ValueError(f"messages[{i}]: content must be a string, a list of parts or null")
            messages.append(dict(message))
        object.__setattr__(self, "messages", tuple(messages))
        tools = tuple(_normalize_tool(t, i) for i, t in enumerate(self.tools))
        names = [tool_name(t) for t in tools]
        if len(set(names)) != len(names):
            raise ValueError(f"tool names must be unique, got {names}")
        object.__setattr__(self, "tools", tools)
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(self.stop))
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError("stop must hold non-empty strings")
        if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an int >= 1, got {self.max_tokens!r}")
        if self.temperature is not None and not 0.0 <= float(self.temperature) <= 2.0:
            raise ValueError(f"temperature must be within 0..2, got {self.temperature!r}")
        if self.top_p is not None and not 0.0 < float(self.top_p) <= 1.0:
            raise ValueError(f"top_p must be within (0, 1], got {self.top_p!r}")
        object.__setattr__(self, "extra", dict(self.extra))



@dataclass(frozen=True)
class Usage:
    """Token counts of one generation (as the engine or server reported them)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of a structured tool call, OpenAI style: deltas with the same ``index`` belong to one call; ``id``
    and ``name`` come once (usually first), ``arguments`` is a fragment of the JSON arguments string."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True)
class ChatDelta:
    """One streamed piece of a reply.

    ``text`` is a fragment of the assistant content (for a model without a tool parser it may contain raw
    ``<tool_call>`` markup: run it through ``rtc_agent.apps.agent.tool_parser``). ``tool_calls`` are structured
    tool-call fragments. The last delta of every generation that ends normally has ``finish_reason`` set (one of
    :data:`FINISH_REASONS`), and ``usage`` when the engine knows it.
    """

    text: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()
    finish_reason: str | None = None
    usage: Usage | None = None


@dataclass(frozen=True)
class ToolCall:
    """A complete structured tool call: ``arguments`` is the JSON string the model wrote (not validated)."""

    id: str
    name: str
    arguments: str

    def parsed_arguments(self) -> Any:
        """``arguments`` decoded; an empty string is ``{}``. Raises ``ValueError`` on bad JSON."""
        return json.loads(self.arguments) if self.arguments.strip() else {}


@dataclass(frozen=True)
class ChatResult:
    """A whole reply. ``first_token_s``: engine time from the start of the run to the first content (None when
    nothing came); ``duration_s``: the whole run; both exclude queueing in the worker."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str = "stop"
    usage: Usage | None = None
    model: str = ""
    first_token_s: float | None = None
    duration_s: float = 0.0

    @property
    def tokens_per_s(self) -> float | None:
        """Decode speed: completion tokens after the first, per second after the first token."""
        if self.usage is None or self.first_token_s is None or self.usage.completion_tokens < 2:
            return None
        span = self.duration_s - self.first_token_s
        return (self.usage.completion_tokens - 1) / span if span > 0 else None


class ChatAccumulator:
    """Merges deltas into a :class:`ChatResult` (structured tool calls by ``index``). Not thread-safe."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: Usage | None = None

    @property
    def text(self) -> str:
        return "".join(self._text)

    def add(self, delta: ChatDelta) -> None:
        if delta.text:
            self._text.append(delta.text)
        for part in delta.tool_calls:
            call = self._calls.setdefault(part.index, {"id": None, "name": None, "arguments": []})
            if part.id:
                call["id"] = part.id
            if part.name:
                call["name"] = part.name
            if part.arguments:
                call["arguments"].append(part.arguments)
        if delta.finish_reason is not None:
            self.finish_reason = delta.finish_reason
        if delta.usage is not None:
            self.usage = delta.usage

    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The structured calls so far, in index order; a call without an id gets ``call_<index>``."""
        return tuple(
            ToolCall(id=c["id"] or f"call_{i}", name=c["name"] or "", arguments="".join(c["arguments"]))
            for i, c in sorted(self._calls.items())
        )

    def result(self, *, model: str = "", first_token_s: float | None = None, duration_s: float = 0.0) -> ChatResult:
        return ChatResult(
            text=self.text, tool_calls=self.tool_calls(), finish_reason=self.finish_reason or "stop",
            usage=self.usage, model=model, first_token_s=first_token_s, duration_s=duration_s,
        )


def partial_marker_len(text: str, markers: Sequence[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of one of ``markers``: the characters a
    streaming reader must hold back because the next chunk may complete a tag or a stop string."""
    longest = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), longest, -1):
            if text.endswith(marker[:n]):
                longest = n
                break
    return longest

