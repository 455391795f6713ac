"""The voice agent app: tool calls (parser, registry, built-in tools). The turn loop lives alongside.

Everything here is pure Python: no model library and no aiortc.
"""

from rtc_agent.apps.agent.builtin_tools import builtin_tools, register_builtins
from rtc_agent.apps.agent.tool_parser import (
    ParsedItem,
    ParsedToolCall,
    ReplyParser,
    SpokenText,
    ToolCallParseError,
    ToolCallParser,
)
from rtc_agent.apps.agent.tools import PendingBrowserCalls, Tool, ToolError, ToolRegistry, ToolResult

__all__ = [
    "ParsedItem",
    "ParsedToolCall",
    "PendingBrowserCalls",
    "ReplyParser",
    "SpokenText",
    "Tool",
    "ToolCallParseError",
    "ToolCallParser",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "builtin_tools",
    "register_builtins",
]
