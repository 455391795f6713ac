"""JSON parsing with depth and number-size limits (rtc_agent.protocol.json_limits)."""

from __future__ import annotations

import json
import time

import pytest

from rtc_agent.protocol import json_limits
from rtc_agent.protocol.json_limits import JSONLimitError, loads


def test_plain_python_json_fails_on_these_inputs():
    """The findings: the standard parser raises RecursionError and ValueError (not JSONDecodeError)."""
    with pytest.raises(RecursionError):
        json.loads("[" * 50_000 + "]" * 50_000)
    with pytest.raises(ValueError, match="digits"):
        json.loads("9" * 5000)


@pytest.mark.parametrize("doc", [
    '{"type": "ping", "event_id": "e1", "client_ts": 12.5}',
    '{"a": [1, 2.5, -3e10, true, false, null, {"b": [[[]]]}], "s": "\\"quoted\\" \\\\ [[[{{{"}',
    '"just a string"', "123", "-0.5e-3", "[]", "{}",
    '{"long": "' + "9" * 10_000 + '"}',  # digits inside a string are text, not a number
    '{"nested": ' + "[" * 32 + "]" * 32 + "}",  # object + 32 arrays = 33 levels: over 32
])
def test_documents_within_the_limits_parse(doc):
    if doc.startswith('{"nested"'):
        with pytest.raises(JSONLimitError):
            loads(doc)
        assert loads(doc, max_depth=33) == json.loads(doc)
    else:
        assert loads(doc) == json.loads(doc)
        assert loads(doc.encode()) == json.loads(doc)


def test_brackets_inside_strings_do_not_count():
    doc = json.dumps({"text": "[" * 5000 + "{" * 5000, "escaped": '\\"[[[["' * 100})
    assert loads(doc) == json.loads(doc)


@pytest.mark.parametrize("depth", [33, 3000, 50_000])
def test_deep_nesting_is_refused(depth):
    for doc in ("[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth, "[" * depth):
        with pytest.raises(JSONLimitError, match="nested"):
            loads(doc)


def test_depth_limit_is_exact():
    assert loads("[" * 32 + "]" * 32) is not None
    with pytest.raises(JSONLimitError):
        loads("[" * 33 + "]" * 33)
    assert loads('[[1], [[2]], {"a": [3]}]', max_depth=3) == [[1], [[2]], {"a": [3]}]
    with pytest.raises(JSONLimitError):
        loads("[1, [2, [3, [4]]]]", max_depth=3)


@pytest.mark.parametrize("digits", [65, 5000, 100_000])
def test_long_numbers_are_refused(digits):
    for doc in ("9" * digits, '{"n": ' + "9" * digits + "}", "[1." + "0" * digits + "]", "-" + "1" * digits):
        with pytest.raises(JSONLimitError, match="number literal"):
            loads(doc)


def test_number_limit_is_exact():
    assert loads("9" * 64) == int("9" * 64)
    with pytest.raises(JSONLimitError):
        loads("9" * 65)
    assert loads("[1e5]", max_number_chars=3) == [1e5]


def test_the_parse_hooks_guard_what_the_scan_lets_through(monkeypatch):
    monkeypatch.setattr(json_limits, "_prescan", lambda *args: None)
    with pytest.raises(JSONLimitError, match="number literal"):
        loads("[" + "7" * 5000 + "]")
    with pytest.raises(JSONLimitError, match="nested too deeply"):
        loads("[" * 100_000 + "]" * 100_000)


def test_nan_and_infinity_are_refused():
    for doc in ("NaN", "[Infinity]", '{"x": -Infinity}'):
        with pytest.raises(JSONLimitError):
            loads(doc)


def test_errors_are_value_errors():
    for bad in ("{not json", b"\xff\xfe\xff", "[" * 3000, "1" * 5000, ""):
        with pytest.raises(ValueError):
            loads(bad)
    with pytest.raises(json.JSONDecodeError):
        loads("{not json")


def test_the_scan_is_fast_on_large_documents():
    big = json.dumps({"items": [{"n": i, "s": "x[{" * 5} for i in range(20_000)]})  # ~600 KB
    hostile = "[" * 250_000
    started = time.perf_counter()
    assert len(loads(big)["items"]) == 20_000
    with pytest.raises(JSONLimitError):
        loads(hostile)
    with pytest.raises(JSONLimitError):
        loads("1" * 250_000)
    assert time.perf_counter() - started < 1.0
