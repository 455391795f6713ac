"""Batch rows that go on from an earlier batch's rows (engines/llm/row_cache.py): the next batch seeds their keys
and values and computes only what is new, with the answers a batch computing everything gives; on a tiny Llama
model built from a config, through ``SmolLMEngine.generate_many``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rtc_agent.engines.llm.row_cache import TAIL_TOKENS, RowCache

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


def test_a_new_row_replaces_a_kept_one_it_differs_from_only_in_a_short_tail() -> None:
    """A prime of a sentence's first words ends in the chat's generation prompt; the next prime of more of its words
    (or its translation) shares everything before that prompt and serves what the old row served."""
    cache = RowCache(min_tokens=3, tail_tokens=2)
    cache.keep([1, 2, 3, 4, 8, 9], ["first words"], ["v"])  # context 1 2, said 3 4, generation prompt 8 9
    cache.keep([1, 2, 3, 7, 7, 7], ["another sentence"], ["v"])  # differs in its last 3 tokens: kept
    cache.keep([5, 5, 3, 4, 8, 9], ["another conversation"], ["v"])  # shares nothing: kept
    cache.keep([1, 2, 3, 4, 5, 6, 8, 9], ["more words"], ["v"])
    assert sorted(row.keys[0] for row in cache.__dict__["_rows"].values()) == [
        "another conversation", "another sentence", "more words"]
    kept, n = cache.take([1, 2, 3, 4, 5, 6, 0, 8, 9])  # the whole sentence: as far as it was said
    assert kept is not None and kept.keys == ["more words"] and n == 6
    assert RowCache().tail_tokens == TAIL_TOKENS


def _row(n: int, value: int) -> tuple[list[int], list[Any], list[Any]]:
    """A row of ``n`` tokens whose keys and values take ``2 * n * 4`` bytes (one float32 layer)."""
    return [value] * n, [torch.zeros(n)], [torch.zeros(n)]


def test_the_row_cache_stays_within_its_byte_budget_and_drops_the_least_recently_used() -> None:
    cache = RowCache(min_tokens=3, max_bytes=3 * 2 * 100 * 4)  # three rows of 100 tokens
    for value in (1, 2, 3):
        cache.keep(*_row(100, value))
    assert len(cache) == 3 and cache.bytes == 3 * 800 and cache.evicted == 0
    assert cache.take([1] * 101)[1] == 100  # row 1 is now the most recently used
    cache.keep(*_row(100, 4))  # row 2 goes
    assert cache.take([2] * 101) == (None, 0) and cache.take([1] * 101)[1] == 100
    assert cache.bytes <= cache.max_bytes and cache.evicted == 1
    cache.keep(*_row(400, 5))  # larger than the whole budget: not kept, nothing else lost
    assert len(cache) == 3 and cache.take([5] * 401) == (None, 0)
    cache.keep(*_row(100, 4))  # the same ids again replace their row
    assert len(cache) == 3 and cache.bytes == 3 * 800
    assert cache.stats() == {"rows": 3, "bytes": 2400, "max_bytes": 2400, "hits": 2, "seeded_tokens": 0,
                             "evicted": 1}
    cache.clear()
    assert cache.bytes == 0
    assert len(RowCache(max_bytes=0).__dict__["_rows"]) == 0
    with pytest.raises(ValueError):
        RowCache(max_bytes=-1)


def test_rooms_that_translate_in_turn_keep_their_rows_when_the_budget_holds_them() -> None:
    """Four rooms of three languages (12 pairs), each final of each room extending its pair's row: with room for
    every pair's row each prompt finds its own (and the row it extends is let go); with 8 rows (the old fixed size)
    round-robin use evicts each row before its pair comes back."""
    def run(size: int) -> RowCache:
        cache = RowCache(size=size, min_tokens=3, max_bytes=12 * 2 * 4 * 130)  # 12 rows of the last round
        rows = {pair: [pair] * 50 for pair in range(12)}
        for _ in range(4):
            for pair, ids in rows.items():
                cache.take([*ids, 0])
                rows[pair] = ids + [pair] * 20
                cache.keep(*_row(len(rows[pair]), pair))
        return cache
    roomy = run(256)
    assert roomy.hits == 36 and len(roomy) == 12 and roomy.evicted == 0  # every final after each pair's first
    assert run(8).hits == 0


def test_the_row_cache_budget_is_a_validated_setting_that_reaches_the_engine() -> None:
    import dataclasses

    from rtc_agent.config import Settings, SettingsError
    from rtc_agent.config.validation import validate
    from rtc_agent.engines import llm

    assert Settings().llm_row_cache_mb == 128
    for bad in (-1, 4097):
        with pytest.raises(SettingsError, match="llm_row_cache_mb"):
            validate(dataclasses.replace(Settings(), llm_row_cache_mb=bad))
    engine = llm.engine_spec(dataclasses.replace(Settings(), llm_row_cache_mb=3)).factory()  # not loaded
    assert engine.rows.max_bytes == 3 * 2**20


async def test_the_worker_shows_the_loaded_llm_row_cache_and_thread_choices(folder: Path) -> None:  # noqa: F811
    from rtc_agent.engines.llm.smollm import SmolLMEngine
    from rtc_agent.worker import EngineSpec, Worker

    worker = Worker()
    worker.add(EngineSpec(name="llm", factory=lambda: SmolLMEngine(folder, cache_dir=folder / "cache",
                                                                   precision="float32", warmup=False)))
    try:
        assert "runtime" not in worker.stats()["llm"]  # nothing loaded yet
        await worker.call("llm", ChatRequest(messages=[{"role": "user", "content": "good morning"}], max_tokens=4,
                                             temperature=0.0))
        runtime = worker.stats()["llm"]["runtime"]
        assert set(runtime["row_cache"]) >= {"rows", "bytes", "max_bytes", "hits", "evicted"}
        assert runtime["batch_int8"] == "off"  # a float32 model has no quantized layers
        threads = runtime["step_threads"]
        assert threads is None or set(threads) >= {"max_threads", "threads", "drops", "raises", "reduced_share"}
    finally:
        await worker.close()
