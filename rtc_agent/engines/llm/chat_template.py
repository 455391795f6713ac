"""OpenAI chat messages and tools as the turns an embedded model's chat template takes.

SmolLM2's chat template knows no tools, so tools are described in the system message the way Qwen/Hermes
templates do it (``<tools>`` JSON and the ``<tool_call>`` answer format), assistant tool calls are rendered back
as ``<tool_call>`` blocks and tool results as ``<tool_response>`` user turns. A 135M model rarely picks tools
reliably; tools want a capable model behind ``--llm-engine openai --llm-url``. Qwen's template has tools (it
answers with bare JSON, which the agent's parser reads); a model marked ``compact_tools`` sees them as compact
schemas (:func:`compact_tools`) with a one-line note in the system message, and after a tool result it is asked
to answer with it, without tools (a 0.5B model offered tools again repeats the call instead of answering).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from rtc_agent.engines.llm.messages import ChatRequest

#: JSON-schema keys a small model copies into its arguments instead of reading them (seen with Qwen2.5-Coder-0.5B:
#: ``{"expression": "17 * 23", "minLength": 1, "maxLength": 500}``); :func:`compact_tools` leaves them out.
_SCHEMA_NOISE = ("additionalProperties", "minLength", "maxLength", "pattern", "required", "description", "$schema")
#: Appended to the system message with compact tools: small models otherwise call made-up tools ("add", "sqrt").
TOOLS_NOTE = ("Only call a function listed below, and only when the user asks for the time, a calculation or a "
               "unit conversion (units: always convert_units). Greetings, thanks and small talk: answer directly, "
               "no function.")

#: Appended to the tool results of a ``compact_tools`` model's last turn (see :func:`template_turns`).
_ANSWER_NOTE = "Answer my question with this result, in one short spoken sentence."


def _compact_schema(schema: Any) -> Any:
    if not isinstance(schema, Mapping):
        return schema
    out = {k: v for k, v in schema.items() if k not in _SCHEMA_NOISE}
    if isinstance(out.get("properties"), Mapping):
        out["properties"] = {k: _compact_schema(v) for k, v in out["properties"].items()}
    if isinstance(out.get("items"), Mapping):
        out["items"] = _compact_schema(out["items"])
    return out


def compact_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``tools`` (Chat Completions entries) as a small model reads them best: each function's name, description
    and parameter types, without validation keywords or parameter descriptions (measured on the tool suite:
    Qwen2.5-Coder-0.5B 13/20 with the full schemas, 17/20 compact). The arguments are still validated against
    the full schema before a tool runs."""
    out = []
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else {}
        if not isinstance(fn, Mapping):
            continue
        entry = {"name": fn.get("name"), "description": fn.get("description", "")}
        entry["parameters"] = _compact_schema(fn.get("parameters") or {"type": "object", "properties": {}})
        out.append({"type": "function", "function": entry})
    return out



_TOOLS_PROMPT = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)


def _content_text(content: Any) -> str:
    """A message's content as plain text (text parts of a content list joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if isinstance(part, Mapping) and part.get("type") in ("text", "input_text", "output_text"):
            parts.append(str(part.get("text", "")))
        elif isinstance(part, str):
            parts.append(part)
    return "".join(parts)


def render_messages(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = (), *,
                    template_has_tools: bool = False) -> list[dict[str, str]]:
    """OpenAI messages as plain ``{"role", "content"}`` turns for a chat template without tool support.

    ``developer`` becomes ``system``; assistant ``tool_calls`` become ``<tool_call>`` blocks after the content;
    consecutive ``tool`` results become one user turn of ``<tool_response>`` blocks; when ``tools`` are given and
    ``template_has_tools`` is False, the Hermes tools block is appended to the system message (one is added when
    there is none). With ``template_has_tools`` the tools are left to the template.
    """
    out: list[dict[str, str]] = []
    for message in messages:
        role = str(message.get("role"))
        text = _content_text(message.get("content"))
        if role == "developer":
            role = "system"
        if role == "assistant" and message.get("tool_calls"):
            blocks = []
            for call in message["tool_calls"]:
                fn = call.get("function", call) if isinstance(call, Mapping) else {}
                args = fn.get("arguments", {})
                if isinstance(args, str):
                    with contextlib.suppress(ValueError):  # bad JSON stays the raw string the model wrote
                        args = json.loads(args) if args.strip() else {}
                blocks.append("<tool_call>\n" + json.dumps({"name": fn.get("name"), "arguments": args}) +
                              "\n</tool_call>")
            text = "\n".join(([text] if text else []) + blocks)
        if role == "tool":
            block = f"<tool_response>\n{text}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1]["content"].endswith("</tool_response>"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block})
            continue
        out.append({"role": role, "content": text})
    if tools and not template_has_tools:
        listing = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        block = _TOOLS_PROMPT.format(tools=listing)
        if out and out[0]["role"] == "system":
            out[0]["content"] = (out[0]["content"] + "\n\n" + block).strip()
        else:
            out.insert(0, {"role": "system", "content": block})
    return out



def forced_call_prefix(request: ChatRequest, tools: Sequence[Mapping[str, Any]]) -> str:
    """The text the assistant turn starts with so that the model honours ``request.tool_choice``: ``"required"``
    opens a ``<tool_call>`` and its ``"name"``; a named function (``{"type": "function", "function": {"name"}}``
    or the flat ``{"type": "function", "name"}``) also writes the name, leaving the model only the arguments.
    Empty for ``auto``/``none``/None, and when the chosen function is not among ``tools`` (the tools this turn
    offers: none while a compact model answers a tool result). The engine emits the prefix as the reply's first
    text, so the reply reads as one complete call."""
    choice = request.tool_choice
    functions = {str(fn.get("name")): fn for fn in (t.get("function") or t for t in tools if isinstance(t, Mapping))
                 if isinstance(fn, Mapping)}
    if not functions:
        return ""
    if choice == "required":
        return '<tool_call>\n{"name": "'
    if isinstance(choice, Mapping) and choice.get("type", "function") == "function":
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else choice.get("name")
        if isinstance(name, str) and name in functions:
            # the arguments object is opened too, and with its first key's quote when it has parameters: left
            # the bare value, a 0.5B model writes the expression itself (``"arguments": 17 * 23}``, measured)
            params = functions[name].get("parameters")
            has_keys = isinstance(params, Mapping) and bool(params.get("properties"))
            return "<tool_call>\n" + json.dumps({"name": name})[:-1] + ', "arguments": {' + ('"' if has_keys else "")
    return ""


def template_turns(request: ChatRequest, *, compact: bool,
                   template_has_tools: bool) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """The turns (:func:`render_messages`) and the tools to hand the chat template for ``request``.

    ``compact`` (a packaged model marked ``compact_tools``): tools become :func:`compact_tools` with
    :data:`TOOLS_NOTE` in the system message, and a last turn of tool results is answered without tools, asked to
    speak the result. ``tool_choice`` ``"none"`` offers no tools. The tools returned go to the template's own
    ``tools`` argument when ``template_has_tools``; otherwise they are already written into the system turn.
    """
    tools = list(request.tools) if request.tool_choice != "none" else []
    messages = [dict(m) for m in request.messages]
    answering = compact and bool(messages) and messages[-1].get("role") == "tool"
    if answering:
        # a tool result to speak: a 0.5B model offered tools again calls the same tool once more (measured);
        # without them, and asked to answer, it says the result ("17 multiplied by 23 equals 391."). It hears
        # only the system prompt and the turn being answered: with earlier answers in view it repeats the last
        # one ("The time in Tokyo is 10:56 AM." over a calculate result of 391, measured)
        tools = []
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
        head = [m for m in messages[:1] if m.get("role") in ("system", "developer")]
        messages = head + messages[last_user:] if last_user else messages
    if tools and compact:
        tools = compact_tools(tools)
        if messages and messages[0].get("role") in ("system", "developer"):
            messages[0]["content"] = (_content_text(messages[0].get("content")) + " " + TOOLS_NOTE).strip()
        else:
            messages.insert(0, {"role": "system", "content": TOOLS_NOTE})
    turns = render_messages(messages, tools, template_has_tools=template_has_tools)
    if answering and turns and turns[-1]["role"] == "user":
        # the question named again: with earlier answers in the history a 0.5B model otherwise repeats the last
        # one ("The time in Tokyo is 10:56 AM." over a calculate result of 391, measured)
        asked = next((_content_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
        note = _ANSWER_NOTE.replace("my question", f'my question "{asked.strip()[:300]}"') if asked.strip() else \
            _ANSWER_NOTE
        turns[-1]["content"] += "\n" + note
    return turns, tools
