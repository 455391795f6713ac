"""``Interruptions``: the agent's barge-in policy, between the received audio, the VAD and the reply playing.

- *Hold*: at the first loud sign of the user's voice (a VAD window above :data:`PAUSE_THRESHOLD`, or a
  :class:`~rtc_agent.apps.agent.onset.LoudnessOnset`) while the reply is audible past ``barge_in_grace_ms``, and
  only when the :class:`~rtc_agent.apps.agent.barge_in.BargeInGate` heard a loud block (above the echo and
  breathing floor), the agent's audio pauses within one frame.
- *Contest*: speech the VAD finds while a reply is being generated or played is not a turn yet: it becomes one,
  cancelling the reply, once the gate has heard ``barge_in_min_ms`` of it loud (:meth:`decide` says
  ``"interrupt"``); if the reply ends first it is an ordinary turn (``"turn"``); if the speech ends first it was
  the agent's own echo, breathing or the room, and is dropped (:meth:`drop`), the reply going on.
- *Resume*: a hold with no loud block for :data:`RESUME_AFTER_MS` (or a cough the VAD never called speech) lets
  the reply go on where it paused.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

import numpy as np

from rtc_agent.apps.agent.barge_in import BargeInGate

#: Holding playback is cheap to undo, so it triggers on weaker evidence than the start of a turn.
PAUSE_THRESHOLD = 0.3
#: A hold with no loud block for this long ends: the reply plays on.
RESUME_AFTER_MS = 250


class _Host(Protocol):
    """What the policy reads of the agent app."""

    config: dict[str, Any]
    responder: Any
    counts: dict[str, int]

    def responding(self) -> bool: ...


class Interruptions:
    """See the module docstring. ``speech``: the session's speech output (None: nothing to hold)."""

    def __init__(self, host: _Host, speech: Any, gate: BargeInGate) -> None:
        self.host = host
        self.speech = speech
        self.gate = gate
        self.paused_at: int | None = None  # playback held since this ms
        self.contest: int | None = None  # start ms of speech over the reply, not yet a turn

    def hear(self, audio: np.ndarray, start_ms: int) -> None:
        """Every received frame (float samples): the gate learns the echo while the reply plays unheld."""
        r = self.host.responder
        self.gate.feed(audio, start_ms, agent_audible=bool(r is not None and r.audible and self.paused_at is None))

    def maybe_pause(self, prob: float, start_ms: int) -> None:
        """Tentative barge-in: hold the agent's audio at the first loud window while it is audible."""
        r, config = self.host.responder, self.host.config
        if (self.paused_at is not None or not config["barge_in"] or prob < PAUSE_THRESHOLD or r is None
                or not r.audible or r.played_ms < config["barge_in_grace_ms"] or self.speech is None
                or self.gate.quiet_since(start_ms - 40)):
            return
        self.paused_at = start_ms
        self.speech.pause()

    def resume(self, *, false_alarm: bool) -> None:
        if self.paused_at is None:
            return
        self.paused_at = None
        if false_alarm:
            self.host.counts["false_barge_ins"] += 1
        if self.speech is not None:
            self.speech.resume()

    def after_window(self, end_ms: int, in_speech: bool) -> None:
        """After the VAD window ending at ``end_ms``: end a hold that no loud speech followed."""
        if self.paused_at is None:
            return
        cough = not in_speech and end_ms - self.paused_at > self.host.config["min_speech_ms"] + 200
        quiet = end_ms - self.paused_at > RESUME_AFTER_MS and self.gate.quiet_since(end_ms - RESUME_AFTER_MS)
        if cough or quiet:
            self.resume(false_alarm=True)

    def contests(self, ms: int) -> bool:
        """Speech started at ``ms``: True when it must earn its turn (a reply is on and barge-in is allowed)."""
        if not self.host.config["barge_in"] or not self.host.responding():
            return False
        self.contest = ms
        return True

    def decide(self) -> Literal["interrupt", "turn"] | None:
        """For a contest: ``"interrupt"`` (loud long enough: cancel the reply), ``"turn"`` (the reply ended
        first), or None (undecided). A decided contest is over."""
        if self.contest is None:
            return None
        if not self.host.responding():
            verdict: Literal["interrupt", "turn"] = "turn"
        elif self.gate.meant(self.contest):
            verdict = "interrupt"
        else:
            return None
        self.contest = None
        return verdict

    def drop(self) -> None:
        """The contested speech ended without earning its turn: the reply plays on."""
        self.contest = None
        self.resume(false_alarm=True)
