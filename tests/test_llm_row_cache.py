"""Batch rows that go on from an earlier batch's rows (engines/llm/row_cache.py): the next batch seeds their keys
and values and computes only what is new, with the answers a batch computing everything gives; on a tiny Llama
model built from a config, through ``SmolLMEngine.generate_many``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rtc_agent.engines.llm.row_cache import RowCache

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rtc_agent.engines.llm import ChatRequest, ChatResult  # noqa: E402
from tests.test_llm_batch import folder, loaded  # noqa: E402,F401


def conversation(system: str, turns: list[str], replies: list[str]) -> ChatRequest:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for i, text in enumerate(turns):
        messages.append({"role": "user", "content": text})
        if i < len(replies):
            messages.append({"role": "assistant", "content": replies[i]})
    return ChatRequest(messages=messages, max_tokens=8, temperature=0.0)


def widths(engine: Any) -> list[int]:
    """Record the columns of every forward of the engine's batches (the first one: the prefill)."""
    seen: list[int] = []
    make = engine._batch_forward

    def recording(pads: list[int], capacity: int) -> Any:
        forward = make(pads, capacity)
        inner = forward.forward
        forward.forward = lambda ids: seen.append(int(ids.shape[1])) or inner(ids)
        return forward

    engine._batch_forward = recording
    return seen


def test_a_conversation_that_goes_on_computes_only_its_new_tokens(folder: Path) -> None:  # noqa: F811
    systems = ["translate into spanish", "translate into german", "translate into italian"]
    first_turns = ["good morning everyone", "thank you very much", "the meeting starts now"]
    engine = loaded(folder)
    fresh = loaded(folder, prefix_cache=False)
    first = [conversation(s, [t], []) for s, t in zip(systems, first_turns, strict=True)]
    replies = [r.text for r in engine.generate_many(first)]
    assert all(isinstance(r, str) for r in replies) and len(engine.rows) == 3
    after = [conversation(s, [t, "see you tomorrow"], [r])
             for s, t, r in zip(systems, first_turns, replies, strict=True)]
    expected = fresh.generate_many(after)
    seen = widths(engine)
    before = engine.rows.seeded_tokens
    got = engine.generate_many(after)
    for result, reference in zip(got, expected, strict=True):
        assert isinstance(result, ChatResult) and isinstance(reference, ChatResult)
        assert (result.text, result.finish_reason) == (reference.text, reference.finish_reason)
    prompts = [engine.encode(r) for r in after]
    assert engine.rows.seeded_tokens > before and engine.rows.hits >= 3
    assert seen[0] < max(len(p) for p in prompts)  # the prefill started after the kept tokens
    # a batch of conversations with nothing kept is computed whole, with the same answers
    other = [conversation(s, ["completely different words here now"], []) for s in systems]
    seen.clear()
    assert [r.text for r in engine.generate_many(other)] == [r.text for r in fresh.generate_many(other)]
    assert seen[0] == max(len(engine.encode(r)) for r in other)


def test_the_row_cache_keeps_the_newest_rows_and_serves_the_longest_prefix() -> None:
    cache = RowCache(size=2, min_tokens=3)
    cache.keep([1, 2, 3, 4, 5], ["k"], ["v"])
    cache.keep([1, 2, 9, 9, 9], ["k2"], ["v2"])
    kept, n = cache.take([1, 2, 3, 4, 7, 8])
    assert kept is not None and kept.ids == (1, 2, 3, 4, 5) and n == 4
    assert cache.take([1, 2, 3, 4, 5])[1] == 4  # the last prompt token is always computed
    assert cache.take([1, 2, 8, 8]) == (None, 0)  # below min_tokens
    cache.keep([7, 7, 7, 7], ["k3"], ["v3"])  # the least recently used ([1, 2, 9, ...]) goes
    assert len(cache) == 2 and cache.take([1, 2, 9, 9, 9, 1])[1] == 0
    cache.keep([1, 1], [], [])  # too short to be worth keeping
    assert len(cache) == 2
    cache.clear()
    assert len(cache) == 0
    with pytest.raises(ValueError):
        RowCache(size=0)
