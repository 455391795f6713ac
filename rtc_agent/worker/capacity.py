"""How many sessions of each app this machine holds in real time, from the measured engine speeds.

The rule (:func:`app_capacity`, a pure function of the figures of :mod:`rtc_agent.worker.speed`):

1. Each app's *demand*: engine-seconds per second of session, per engine (:func:`app_demand`):

   - ``captions``: per second of speech, ``PARTIALS_PER_S`` partial decodes at the batched cost
     (``asr.partial_batch_s``: partials of several sessions share a batch) plus one final (``asr.final_s``) per
     ``UTTERANCE_S`` of speech. The app asks for a partial every 0.4 s of audio while the engine keeps up; under
     load partials queue and come less often while finals stay on time (they are urgent), so the partial rate
     that must fit is lower than the one asked for. A talker speaks all the time (``CAPTIONS_SPEECH_SHARE``).
   - ``call``: the same per participant, who speaks part of the time (``CALL_SPEECH_SHARE``).
   - ``interpret``: one translate decode (a partial's cost) per ``INTERPRET_CHUNK_S`` chunk, one flush (a final)
     per utterance, and the translation spoken (``tts.rtf`` per second of speech).
   - ``agent``: per ``TURN_S`` of conversation one turn: the user's utterance recognised (a final), the reply
     generated (``AGENT_PROMPT_TOKENS`` of prefill at the probe's prefill speed per token plus
     ``REPLY_TOKENS`` steps) and spoken (``REPLY_AUDIO_S`` times ``tts.rtf``).

2. An engine runs ``parallel`` such requests at once, each as fast as alone (Whisper: two one-thread decodes on
   two cores), so a session takes ``demand / parallel`` of the machine from that engine; the engines share the
   cores, so an app's *share* is the sum over its engines.
3. ``sessions = floor(1 / (safety * share))``: ``safety`` (setting ``capacity_safety``, 1.25) keeps the engines
   below full use (80 %), where queues, and the final's latency, grow without bound. Calibrated on the README's
   figures: a 2-core Xeon that keeps 8 captions sessions real time gets 8; the AMD EPYC of issue 19, twice as
   slow, gets 4. At least 1 (one session is
   always served: refusing every caller helps nobody), at most ``max_sessions``.

For example, on a loaded 2-core Xeon (Whisper base int8): ``partial_batch_s`` 0.14 and ``final_s`` 0.48 make a
captions session take (0.14 + 0.48 / 3) / 2 = 0.15 of the machine: 5 sessions; a CPU twice as slow holds 2.

The figures are the probe's at start-up, then (setting ``capacity_running``) the probe's times the slowdown the
engines show under load (:mod:`rtc_agent.worker.speed`): a machine slower with sessions than idle holds fewer, and
the limit moves down within seconds and back up over minutes. ``probe_sessions`` keeps what the probe alone said.

Engines that are not measured here (remote engines, or engines not probed) cost this machine nothing in the
rule. While an engine an app needs is still pending (loading or being probed), or none of its engines was
measured, the app is ``unmeasured`` and its limit is None: admission lets sessions in as before capacity was
measured (the load signals of :class:`~rtc_agent.worker.admission.LoadAdmission` still apply). A conservative
default instead (say one session) would refuse the second caller of every slow start-up, and the engines a
session needs are not ready then anyway. An override (setting ``capacity_sessions``, e.g.
``captions=4,agent=2``) replaces the measured limit of its app.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rtc_agent.worker.speed import SpeedBook

UTTERANCE_S = 3.0
PARTIALS_PER_S = 1.0
CAPTIONS_SPEECH_SHARE = 1.0
CALL_SPEECH_SHARE = 0.5
INTERPRET_CHUNK_S = 1.2  # chunks are 0.8 or 1.6 s
TURN_S = 12.0
AGENT_PROMPT_TOKENS = 400
REPLY_TOKENS = 40
REPLY_AUDIO_S = 5.0
DEFAULT_SAFETY = 1.25

#: The measured engines each app uses (the others it needs, such as the VAD, cost little).
APP_ENGINES: dict[str, tuple[str, ...]] = {
    "captions": ("asr",),
    "call": ("asr",),
    "interpret": ("asr", "tts"),
    "agent": ("asr", "llm", "tts"),
}
APPS = tuple(APP_ENGINES)

__all__ = ["APPS", "APP_ENGINES", "AppCapacity", "CapacityPlanner", "app_capacity", "app_demand",
           "parse_overrides"]

Figures = Mapping[str, Mapping[str, float]]


def _captions_asr(asr: Mapping[str, float], speech_share: float) -> float:
    partial = asr.get("partial_batch_s", asr.get("partial_s", 0.0))
    return speech_share * (PARTIALS_PER_S * partial + asr.get("final_s", 0.0) / UTTERANCE_S)


def app_demand(app: str, figures: Figures) -> dict[str, float]:
    """Engine-seconds per second of one ``app`` session, for each measured engine of ``figures`` that the app
    uses (see the module docstring); engines without figures are left out."""
    asr, tts, llm = figures.get("asr"), figures.get("tts"), figures.get("llm")
    out: dict[str, float] = {}
    if app in ("captions", "call"):
        if asr is not None:
            out["asr"] = _captions_asr(asr, CAPTIONS_SPEECH_SHARE if app == "captions" else CALL_SPEECH_SHARE)
    elif app == "interpret":
        if asr is not None:
            partial = asr.get("partial_batch_s", asr.get("partial_s", 0.0))
            out["asr"] = partial / INTERPRET_CHUNK_S + asr.get("final_s", 0.0) / UTTERANCE_S
        if tts is not None:
            out["tts"] = tts.get("rtf", 0.0)
    elif app == "agent":
        if asr is not None:
            out["asr"] = asr.get("final_s", 0.0) / TURN_S
        if llm is not None:
            per_token = llm.get("prefill_s", 0.0) / max(1.0, llm.get("prompt_tokens", 0.0) or 1.0)
            out["llm"] = (AGENT_PROMPT_TOKENS * per_token + REPLY_TOKENS * llm.get("step_s", 0.0)) / TURN_S
        if tts is not None:
            out["tts"] = REPLY_AUDIO_S * tts.get("rtf", 0.0) / TURN_S
    else:
        raise ValueError(f"no capacity model for app {app!r} (known: {', '.join(APPS)})")
    return out


@dataclass(frozen=True)
class AppCapacity:
    """One app's limit: ``sessions`` (None: unlimited by capacity), ``source`` (``measured``, ``override``,
    or ``unmeasured``), ``share`` (the part of the machine one session takes, from the measured
    engines), ``demand`` (engine-seconds per session-second) and ``waiting`` (engines still pending)."""

    sessions: int | None
    source: str
    share: float | None = None
    demand: dict[str, float] = field(default_factory=dict)
    waiting: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"sessions": self.sessions, "source": self.source,
                "share": None if self.share is None else round(self.share, 4),
                "demand": {k: round(v, 4) for k, v in self.demand.items()}, "waiting": list(self.waiting)}


def app_capacity(app: str, figures: Figures, parallel: Mapping[str, int], *, pending: Iterable[str] = (),
                 safety: float = DEFAULT_SAFETY, max_sessions: int, override: int | None = None) -> AppCapacity:
    """The rule of the module docstring for one app. ``parallel``: requests each engine runs at once (1 when
    missing); ``pending``: engines whose figures are still to come."""
    if override is not None:
        return AppCapacity(min(override, max_sessions), "override")
    waiting = tuple(e for e in APP_ENGINES[app] if e in set(pending))
    demand = app_demand(app, figures)
    if waiting or not demand:
        return AppCapacity(None, "unmeasured", demand=demand, waiting=waiting)
    share = sum(seconds / max(1, parallel.get(engine, 1)) for engine, seconds in demand.items())
    if share <= 0:
        return AppCapacity(max_sessions, "measured", share=0.0, demand=demand)
    sessions = max(1, min(max_sessions, math.floor(1.0 / (max(1.0, safety) * share) + 1e-9)))
    return AppCapacity(sessions, "measured", share=share, demand=demand)


def parse_overrides(entries: Iterable[str]) -> dict[str, int]:
    """``["captions=4", "agent=2"]`` (or one ``"captions=4,agent=2"``) -> ``{"captions": 4, "agent": 2}``.
    Raises ``ValueError`` on an unknown app, a missing ``=`` or a count below 1."""
    out: dict[str, int] = {}
    for entry in entries:
        for part in str(entry).split(","):
            if not part.strip():
                continue
            name, sep, count = part.partition("=")
            name = name.strip()
            if not sep or name not in APP_ENGINES:
                raise ValueError(f"capacity_sessions entry {part.strip()!r}: use APP=N with APP one of "
                                 f"{', '.join(APPS)}")
            try:
                value = int(count)
            except ValueError:
                raise ValueError(f"capacity_sessions entry {part.strip()!r}: N must be an integer") from None
            if value < 1:
                raise ValueError(f"capacity_sessions entry {part.strip()!r}: N must be at least 1")
            out[name] = value
    return out


class CapacityPlanner:
    """The server's capacity per app, from ``book``'s figures (recomputed when they change).

    ``enabled`` False (setting ``admission_capacity``) keeps publishing the figures but limits nothing.
    ``limit(app)`` is what admission asks; ``running(app)`` counts that app's sessions.
    """

    def __init__(self, book: SpeedBook, *, max_sessions: int, safety: float = DEFAULT_SAFETY,
                 overrides: Mapping[str, int] | None = None, enabled: bool = True,
                 running: Callable[[str], int] = lambda app: 0) -> None:
        self.book = book
        self.max_sessions = max_sessions
        self.safety = safety
        self.overrides = dict(overrides or {})
        self.enabled = enabled
        self.running = running
        #: the captions' decode plan (:class:`~rtc_agent.worker.decode_plan.DecodePlanner`), published per
        #: transcribing app in :meth:`snapshot` when set
        self.decode_plans: Any = None
        self._cache: tuple[int, dict[str, AppCapacity], dict[str, AppCapacity]] | None = None

    def apps(self) -> dict[str, AppCapacity]:
        """Per app the capacity from the book's figures (the running ones where they count)."""
        return self._computed()[0]

    def probe_apps(self) -> dict[str, AppCapacity]:
        """Per app the capacity the start-up probe's figures alone give (shown beside the running one)."""
        return self._computed()[1]

    def _computed(self) -> tuple[dict[str, AppCapacity], dict[str, AppCapacity]]:
        version = self.book.version
        if self._cache is None or self._cache[0] != version:
            parallel, pending = self.book.parallel(), set(self.book.pending)

            def per_app(figures: Figures) -> dict[str, AppCapacity]:
                return {app: app_capacity(app, figures, parallel, pending=pending, safety=self.safety,
                                          max_sessions=self.max_sessions, override=self.overrides.get(app))
                        for app in APPS}

            self._cache = (version, per_app(self.book.figures()), per_app(self.book.probe_figures()))
        return self._cache[1], self._cache[2]

    def limit(self, app: str) -> int | None:
        """Sessions of ``app`` this server admits at once (None: no capacity limit: off, unmeasured or an app
        without a model)."""
        if not self.enabled or app not in APP_ENGINES:
            return None
        return self.apps()[app].sessions

    def snapshot(self) -> dict[str, Any]:
        """JSON-able, for ``/health`` and the pages: ``enabled``, ``safety``, the speed figures (``engines``: per
        engine the probe's ``figures``, the ``slowdown`` measured under load and the ``running_figures`` the rule
        uses; ``pending``, ``failed``) and per app its capacity with ``probe_sessions`` (what the probe alone
        gives), ``running`` (sessions now) and ``enforced`` (admission refuses past ``sessions``); ``captions``
        and ``call`` also their ``plan`` (the final's beam and the partial interval their transcribers use now,
        :meth:`~rtc_agent.worker.decode_plan.DecodePlanner.snapshot`) when a decode planner is set."""
        apps: dict[str, Any] = {}
        probe_apps = self.probe_apps()
        plan = self.decode_plans.snapshot() if self.decode_plans is not None else None
        for app, cap in self.apps().items():
            entry = cap.as_dict()
            entry["probe_sessions"] = probe_apps[app].sessions
            entry["running"] = self.running(app)
            entry["enforced"] = self.enabled and cap.sessions is not None
            if plan is not None and app in ("captions", "call"):
                entry["plan"] = plan
            apps[app] = entry
        return {"enabled": self.enabled, "safety": self.safety, **self.book.snapshot(), "apps": apps}
