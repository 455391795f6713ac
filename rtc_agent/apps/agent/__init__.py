"""The voice agent app: tool calls (parser, registry, built-in tools). The turn loop lives alongside.

Everything here is pure Python: no model library and no aiortc.
"""

from rtc_agent.apps.agent.browser_calls import PendingBrowserCalls
from rtc_agent.apps.agent.builtin_tools import builtin_tools, register_builtins
from rtc_agent.apps.agent.reply_items import ParsedItem, ParsedToolCall, SpokenText, ToolCallParseError
from rtc_agent.apps.agent.reply_parser import ReplyParser
from rtc_agent.apps.agent.tool import Tool, ToolError, ToolResult
from rtc_agent.apps.agent.tool_parser import ToolCallParser
from rtc_agent.apps.agent.tool_registry import ToolRegistry

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
