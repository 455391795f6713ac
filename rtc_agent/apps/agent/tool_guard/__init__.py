"""The tool guard: the agent never states a time, a date, a sum or a conversion that one of its built-in tools
provides without calling that tool.

Each built-in tool declares how to recognise a request it answers (``Tool.asked_by``): a small matcher per tool,
in its own module (:mod:`.clock_request`, :mod:`.arithmetic_request`, :mod:`.units_request`, sharing the number
words of :mod:`.spoken_numbers`). :func:`~.guard.guarded_tool` picks the tool a user's turn asks for among the
server tools declared for the session; the responder holds that turn's first answer back and, when the model
answered without calling the tool, discards it and asks once more with ``tool_choice`` forced to the tool.
"""

from rtc_agent.apps.agent.tool_guard.arithmetic_request import asks_for_arithmetic
from rtc_agent.apps.agent.tool_guard.clock_request import asks_for_time
from rtc_agent.apps.agent.tool_guard.guard import forced_choice, guarded_tool
from rtc_agent.apps.agent.tool_guard.units_request import asks_for_conversion

__all__ = ["asks_for_arithmetic", "asks_for_conversion", "asks_for_time", "forced_choice", "guarded_tool"]
