"""The per-connection message budget (issue 23) as a policy, on a scripted clock: rates, bursts, the largest legal
message, one ``rate_limited`` notice a second, closing after sustained excess, and the traffic of normal clients
(a realtime client streaming 10 ms PCM16 chunks) never limited."""

from __future__ import annotations

import base64
import json

import pytest

from rtc_agent.config import Settings
from rtc_agent.protocol.message_budget import QUIET_S, BudgetLimits, MessageBudget, Verdict
from rtc_agent.realtime.adapter import MAX_EVENT_BYTES

DEFAULTS = BudgetLimits.from_settings(Settings(), max_message_bytes=MAX_EVENT_BYTES)


def run(budget: MessageBudget, *, rate: float, seconds: float, size: int = 20, start: float = 0.0) -> list[Verdict]:
    """Verdicts for messages of ``size`` bytes sent at ``rate`` a second for ``seconds``."""
    n = int(rate * seconds)
    return [budget.admit(size, start + i / rate) for i in range(n)]


def test_the_settings_defaults_are_the_documented_ones():
    assert (DEFAULTS.messages_per_s, DEFAULTS.bytes_per_s, DEFAULTS.burst_s, DEFAULTS.overload_close_s) == (
        200.0, 1024 * 1024, 2.0, 5.0)


def test_a_burst_of_burst_s_worth_passes_then_the_rate_holds():
    budget = MessageBudget(BudgetLimits(messages_per_s=100, bytes_per_s=0, burst_s=2.0), now=0.0)
    burst = [budget.admit(10, 0.0) for _ in range(250)]
    assert burst.count(Verdict.ADMIT) == 200  # 2 s of 100/s at once
    later = run(budget, rate=1000, seconds=3.0, start=0.001)
    admitted = later.count(Verdict.ADMIT)
    assert 295 <= admitted <= 301, admitted  # the refill: 100 a second


def test_bytes_are_limited_like_messages():
    budget = MessageBudget(BudgetLimits(messages_per_s=0, bytes_per_s=1000, burst_s=1.0), now=0.0)
    assert budget.admit(600, 0.0) is Verdict.ADMIT
    assert budget.admit(600, 0.0) is not Verdict.ADMIT
    assert budget.retry_after(600) == pytest.approx(0.2)
    assert budget.admit(600, 0.2) is Verdict.ADMIT


def test_the_largest_legal_message_fits_a_full_bucket_and_oversize_goes_to_the_decoder():
    budget = MessageBudget(DEFAULTS, now=0.0)
    assert DEFAULTS.bytes_per_s * DEFAULTS.burst_s < MAX_EVENT_BYTES  # so the floor matters
    assert budget.admit(MAX_EVENT_BYTES, 0.0) is Verdict.ADMIT
    refilled = MAX_EVENT_BYTES / DEFAULTS.bytes_per_s
    assert budget.admit(MAX_EVENT_BYTES, refilled + 0.01) is Verdict.ADMIT
    # a message over the limit is charged a full bucket, not refused here: the decoder says message_too_large
    assert MessageBudget(DEFAULTS, now=0.0).admit(10 * MAX_EVENT_BYTES, 0.0) is Verdict.ADMIT


def test_a_flood_is_told_once_a_second_and_closed_after_sustained_excess():
    limits = BudgetLimits(messages_per_s=200, bytes_per_s=1 << 20, burst_s=2.0, overload_close_s=5.0)
    budget = MessageBudget(limits, now=0.0)
    verdicts = run(budget, rate=20000, seconds=8.0)
    first_drop = verdicts.index(Verdict.DROP) if Verdict.DROP in verdicts else len(verdicts)
    first_close = verdicts.index(Verdict.CLOSE)
    notices = verdicts[:first_close].count(Verdict.NOTIFY)
    over_s = (first_close - first_drop) / 20000
    assert 4.9 <= over_s <= 5.1, over_s
    assert 5 <= notices <= 6, notices  # one a second while over the budget
    assert set(verdicts[first_close:]) == {Verdict.CLOSE} and budget.closed
    admitted = verdicts.count(Verdict.ADMIT)
    assert admitted <= 400 + 200 * 5.1, admitted  # burst + rate, nothing more


def test_a_quiet_second_ends_an_overload_episode():
    limits = BudgetLimits(messages_per_s=10, bytes_per_s=0, burst_s=1.0, overload_close_s=3.0)
    budget = MessageBudget(limits, now=0.0)
    t = 0.0
    for _ in range(4):  # 2 s floods with quiet gaps: never 3 s of excess in a row
        verdicts = run(budget, rate=1000, seconds=2.0, start=t)
        assert Verdict.CLOSE not in verdicts
        t += 2.0 + QUIET_S + 0.5
    assert not budget.closed and budget.dropped > 0


def test_overload_close_0_only_drops():
    budget = MessageBudget(BudgetLimits(messages_per_s=10, bytes_per_s=0, burst_s=1.0, overload_close_s=0), 0.0)
    assert Verdict.CLOSE not in run(budget, rate=1000, seconds=30.0)


def test_no_limits_admit_everything():
    budget = MessageBudget(BudgetLimits(messages_per_s=0, bytes_per_s=0), now=0.0)
    assert not budget.limited
    assert set(run(budget, rate=1e6, seconds=0.1, size=10**6)) == {Verdict.ADMIT}


def pcm_append(ms: int, rate: int = 24000) -> str:
    audio = base64.b64encode(b"\x01\x00" * (rate * ms // 1000)).decode()
    return json.dumps({"type": "input_audio_buffer.append", "event_id": "evt_0123456789abcdef", "audio": audio})


def test_a_realtime_client_streaming_10_ms_chunks_with_updates_is_never_limited():
    """100 appends a second (10 ms of 24 kHz PCM16 in base64, about 70 KB/s), a large session.update now and
    then, a commit and a response.create each second, for a minute: every message admitted."""
    budget = MessageBudget(DEFAULTS, now=0.0)
    append = len(pcm_append(10))
    update = len(json.dumps({"type": "session.update", "session": {"instructions": "x" * 60_000}}))
    verdicts = []
    for tick in range(6000):  # 60 s in 10 ms steps
        t = tick / 100
        verdicts.append(budget.admit(append, t))
        if tick % 100 == 50:
            verdicts += [budget.admit(60, t), budget.admit(60, t)]
        if tick % 1000 == 0:
            verdicts.append(budget.admit(update, t))
    assert set(verdicts) == {Verdict.ADMIT}, budget.stats()
    assert 60 * 100 * append / 60 > 60_000  # it is the ~70 KB/s stream


def test_a_data_channel_client_sending_at_the_page_rate_is_never_limited():
    """Pings each 2 s, vision prompts, session.updates and mutes in a busy burst: far under the budget."""
    budget = MessageBudget(BudgetLimits.from_settings(Settings(), max_message_bytes=64 * 1024), now=0.0)
    verdicts = [budget.admit(300, 0.0) for _ in range(100)]  # a page re-sending its state at once
    verdicts += run(budget, rate=50, seconds=60.0, size=2000, start=0.1)
    assert set(verdicts) == {Verdict.ADMIT}


def test_a_transport_that_can_wait_delays_instead_of_dropping_and_still_closes_a_flood():
    """The WebSocket way: hold an over-budget message back for retry_after, then take it. Nothing is lost, the
    sender is slowed to the rate, and one that is held back for overload_close_s is closed all the same."""
    limits = BudgetLimits(messages_per_s=100, bytes_per_s=0, burst_s=1.0, overload_close_s=5.0)
    budget = MessageBudget(limits, now=0.0)
    t, delivered, verdict = 0.0, 0, Verdict.ADMIT
    for _ in range(450):  # a fast sender: always another message waiting
        verdict = budget.admit(10, t)
        if verdict is Verdict.ADMIT:
            delivered += 1
            continue
        assert verdict is not Verdict.CLOSE
        t += budget.retry_after(10) + 0.001
        assert budget.take(10, t)
        delivered += 1
    assert delivered == 450 and budget.dropped == 0 and budget.delayed == 350
    assert 3.4 <= t <= 3.6, t  # slowed to 100 a second after the burst of 100
    while verdict is not Verdict.CLOSE:  # kept waiting: closed once over the budget for 5 s
        verdict = budget.admit(10, t)
        if verdict is not Verdict.ADMIT and verdict is not Verdict.CLOSE:
            t += budget.retry_after(10) + 0.001
            budget.take(10, t)
    assert 4.9 <= t <= 5.2, t  # over since the 101st message, at 0 s
    assert not budget.take(10, t + 10)
