"""Which interpretation a pair (speaker, target language) gets: the best route this server has for the target.

Speech translation of the audio where it produces the target (lower lag, one model pass per chunk:
:class:`~rtc_agent.apps.call.interpretation.PairInterpreter`), else text translation of the speaker's caption
finals (:class:`~rtc_agent.apps.call.text_interpretation.TextPairInterpreter`); neither: an
``unsupported_language`` error, which the room sends to the listeners that wanted the pair.
"""

from __future__ import annotations

from rtc_agent.apps.call.interpretation import PairInterpreter, PairOutlet
from rtc_agent.apps.call.participant import Participant
from rtc_agent.apps.call.room import InterpretationPair
from rtc_agent.apps.call.text_interpretation import TextPairInterpreter
from rtc_agent.apps.interpret.deliverable import ROUTE_SPEECH, route_for
from rtc_agent.errors import AgentError, InvalidRequest

__all__ = ["InterpretationUnavailable", "make_pair", "unsupported"]


class InterpretationUnavailable(AgentError):
    """A pair this server could make but has no room for now (``room_max_pairs``, or the machine's capacity)."""

    type = "capacity_error"
    code = "interpretation_unavailable"
    status = 503


def unsupported(source: str, target: str) -> InvalidRequest:
    return InvalidRequest(f"no engine on this server interprets {source!r} into {target!r}: speech translation gives "
                          "English only and no text translation engine translates into it",
                          code="unsupported_language")


def make_pair(outlet: PairOutlet, speaker: Participant, target: str) -> InterpretationPair:
    """The pair for ``speaker`` into ``target`` by its best route (not started); raises ``unsupported_language``."""
    route = route_for(speaker.ctx.settings, target)
    if route is None:
        raise unsupported(speaker.language, target)
    if route[0] == ROUTE_SPEECH:
        return PairInterpreter(outlet, speaker, target)
    return TextPairInterpreter(outlet, speaker, target, route[1])
