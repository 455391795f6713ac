"""Barge-in a person means: the gate's level floor (absolute, and relative to the input heard while the agent
speaks) and the interruption policy: a hold on loud input, a cancel only after ``barge_in_min_ms`` of loud speech,
echo, breathing and background talk dropped with the reply going on."""

from __future__ import annotations

from typing import Any

import numpy as np

from rtc_agent.apps.agent.barge_in import BargeInGate
from rtc_agent.apps.agent.interruption import Interruptions

RATE = 16000
FRAME_MS = 20


def tone(ms: float, dbfs: float, freq: float = 300.0) -> np.ndarray:
    n = int(RATE * ms / 1000)
    return (np.sqrt(2) * 10 ** (dbfs / 20) * np.sin(2 * np.pi * freq * np.arange(n) / RATE)).astype(np.float32)


def feed(gate: BargeInGate, audio: np.ndarray, start_ms: int, *, audible: bool) -> int:
    """Feed ``audio`` in 20 ms frames from ``start_ms``; returns the ms after it."""
    step = RATE * FRAME_MS // 1000
    for i in range(0, len(audio), step):
        gate.feed(audio[i:i + step], start_ms + i * 1000 // RATE, agent_audible=audible)
    return start_ms + len(audio) * 1000 // RATE


def test_breathing_under_the_floor_is_never_loud() -> None:
    gate = BargeInGate(min_ms=300, floor_dbfs=-40)
    end = feed(gate, tone(1000, -50), 0, audible=False)
    assert gate.loud_ms_since(0) == 0 and not gate.meant(0) and gate.quiet_since(0)
    end = feed(gate, tone(400, -25), end, audible=False)
    assert gate.meant(1000) and gate.loud_ms_since(1000) == 400


def test_the_floor_rises_with_the_input_heard_during_the_reply() -> None:
    gate = BargeInGate(min_ms=300, floor_dbfs=-40, margin_db=10)
    # residual echo and background talk at -30 dBFS while the agent speaks: the threshold becomes -20 dBFS
    end = feed(gate, tone(1500, -30), 0, audible=True)
    assert abs(gate.threshold_db - (-20)) < 0.5
    start = end
    end = feed(gate, tone(600, -28), end, audible=True)  # more of the same, a little louder: not meant
    assert not gate.meant(start)
    start = end
    feed(gate, tone(400, -12), end, audible=True)  # the user, close to the microphone
    assert gate.meant(start)


def test_the_minimum_length_counts_loud_blocks_only() -> None:
    for min_ms, loud_ms, meant in [(300, 250, False), (300, 320, True), (100, 120, True), (500, 450, False)]:
        gate = BargeInGate(min_ms=min_ms)
        # loud speech in 40 ms syllables with 20 ms quiet gaps between them
        audio = np.concatenate([np.concatenate([tone(40, -20), tone(20, -70)]) for _ in range(int(loud_ms / 40))])
        feed(gate, audio, 0, audible=False)
        assert gate.meant(0) is meant, (min_ms, loud_ms)


class Reply:
    def __init__(self) -> None:
        self.audible = True
        self.played_ms = 1000


class Host:
    def __init__(self, **config: Any) -> None:
        self.config = {"barge_in": True, "barge_in_grace_ms": 300, "min_speech_ms": 250, **config}
        self.responder = Reply()
        self.counts = {"false_barge_ins": 0}
        self.on = True

    def responding(self) -> bool:
        return self.on


class Speech:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause(self) -> None:
        self.calls.append("pause")

    def resume(self) -> None:
        self.calls.append("resume")


def policy(**config: Any) -> tuple[Interruptions, Host, Speech]:
    host, speech = Host(**config), Speech()
    return Interruptions(host, speech, BargeInGate(min_ms=300)), host, speech


def test_loud_speech_holds_at_once_and_interrupts_after_the_minimum() -> None:
    rules, _, speech = policy()
    rules.hear(tone(20, -20), 0)
    rules.maybe_pause(0.9, 0)
    assert speech.calls == ["pause"] and rules.paused_at == 0
    assert rules.contests(0)
    assert rules.decide() is None  # 20 ms: not yet
    for ms in range(20, 400, 20):
        rules.hear(tone(20, -20), ms)
    assert rules.decide() == "interrupt" and rules.contest is None


def test_quiet_input_does_not_hold_the_reply_and_a_dropped_contest_resumes_it() -> None:
    rules, host, speech = policy()
    rules.hear(tone(20, -55), 0)  # breathing: the VAD may say speech, the level says no
    rules.maybe_pause(0.9, 0)
    assert speech.calls == []
    assert rules.contests(0)
    for ms in range(20, 600, 20):
        rules.hear(tone(20, -55), ms)
    assert rules.decide() is None
    rules.drop()
    assert rules.contest is None and speech.calls == []
    # a short loud sound holds the reply, then quiet lets it go on where it paused
    rules.hear(tone(20, -20), 600)
    rules.maybe_pause(1.0, 600)
    for ms in range(620, 1000, 20):
        rules.hear(tone(20, -60), ms)
        rules.after_window(ms + 20, in_speech=True)
    assert speech.calls == ["pause", "resume"] and host.counts["false_barge_ins"] == 1


def test_no_hold_in_the_grace_window_or_with_barge_in_off_and_no_contest_without_a_reply() -> None:
    rules, host, speech = policy()
    host.responder.played_ms = 100
    rules.hear(tone(20, -20), 0)
    rules.maybe_pause(1.0, 0)
    assert speech.calls == []
    rules, host, speech = policy(barge_in=False)
    rules.hear(tone(20, -20), 0)
    rules.maybe_pause(1.0, 0)
    assert speech.calls == [] and not rules.contests(0)
    rules, host, _ = policy()
    host.on = False
    assert not rules.contests(0)


def test_a_reply_that_ends_during_the_contest_leaves_an_ordinary_turn() -> None:
    rules, host, _ = policy()
    assert rules.contests(0)
    rules.hear(tone(100, -20), 0)
    host.on = False
    assert rules.decide() == "turn"
