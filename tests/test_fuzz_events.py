"""Fuzzing the data channel (issue 11, item 9): random messages through real in-process aiortc peers to an
``echo``, a ``captions``, an ``interpret`` and an ``agent`` session (its LLM an OpenAI-compatible stub, so answers
are instant); every example goes to all four.

Messages: random JSON values, deep nesting, long numbers, unknown types, known types with random fields, binary
messages, invalid UTF-8, oversize. Each is answered with an ``error`` event or accepted; one that cannot be an
event (not JSON, not an object, no type, unknown type, too deep, too long a number, too big) always gets its
``error`` before the next ``pong``; no message causes an ``internal_error``; the sessions stay open and answer
``ping`` to the end, and no ``session.ended`` is ever sent. Examples are derandomized, so a run is repeatable.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rtc_agent.protocol.events import CLIENT_EVENTS
from rtc_agent.rtc.client import ClientPeer
from tests.background_server import OTHER_THREADS_USE_RANDOM, BackgroundServer
from tests.openai_stub import OpenAIStub, text_reply

MAX_EVENT_BYTES = 4096
APPS = {"echo": {}, "captions": {"vision": False}, "interpret": {}, "agent": {"barge_in": False}}
REFUSAL_CODES = {"invalid_json", "invalid_event", "unknown_event", "message_too_large"}
pytestmark = OTHER_THREADS_USE_RANDOM


class Peers:
    def __init__(self, srv: BackgroundServer, peers: dict[str, ClientPeer]) -> None:
        self.srv, self.peers = srv, peers


@pytest.fixture(scope="module")
def peers() -> Iterator[Peers]:
    stub = OpenAIStub(default=text_reply("OK.", piece_size=8))

    async def prepare() -> dict[str, Any]:
        await stub.start()
        return {"llm_engine": "openai", "llm_url": stub.url, "llm_model": "stub-model"}

    async def connect(srv: BackgroundServer) -> dict[str, ClientPeer]:
        out = {}
        for app, config in APPS.items():
            peer = ClientPeer(srv.url, app, config=config)
            await peer.connect()
            await peer.wait_for("session.created", timeout=10)
            out[app] = peer
        return out

    with BackgroundServer(prepare=prepare, max_event_bytes=MAX_EVENT_BYTES) as srv:
        connected = srv.run(connect(srv))
        try:
            yield Peers(srv, connected)
        finally:
            for peer in connected.values():
                srv.run(peer.close())
            srv.run(stub.close())
            assert srv.no_sessions()


# --- messages: (must_refuse, payload) --------------------------------------------------------------------------

text = st.text(max_size=30)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(-10**60, 10**60) | text
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)
KNOWN = sorted(CLIENT_EVENTS)
FIELDS = {
    "session": st.dictionaries(st.sampled_from(["instructions", "tools", "config", "delay_s", "language",
                                                "voice", "temperature", "direction", "vision"]) | text,
                               json_values, max_size=3)
    | st.fixed_dictionaries({"config": json_values | st.dictionaries(st.sampled_from(
        ["delay_s", "language", "language_prior", "direction", "target_language", "speak", "chunk_ms"]),
        json_values | st.sampled_from(["en", "es-en", "auto", "fr"]), max_size=2)})
    | st.sampled_from([{"delay_s": 0.2}, {"tools": [{"type": "function", "name": "f", "parameters": {}}]},
                       {"config": None}, {"config": []}, {"language": "es"}, {"direction": "es-en"}]),
    "item": st.fixed_dictionaries({}, optional={
        "type": st.sampled_from(["message", "function_call_output", "x"]) | json_values,
        "role": st.sampled_from(["user", "assistant", "system"]) | json_values,
        "content": json_values | st.lists(st.fixed_dictionaries({"type": st.sampled_from(["input_text", "text"]),
                                                                 "text": text}), max_size=2),
        "call_id": json_values, "output": json_values, "text": text}),
    "text": text | json_values, "response": json_values, "response_id": json_values, "audio": text | json_values,
    "event_id": text | json_values, "client_ts": json_values,
}


def known_event() -> st.SearchStrategy[tuple[bool, str | bytes]]:
    """A known type with random (often wrong) fields: refused or accepted, either is fine."""
    fields = st.fixed_dictionaries({}, optional=FIELDS)
    return st.tuples(st.sampled_from(KNOWN), fields, st.dictionaries(text, json_values, max_size=2)).map(
        lambda t: (False, json.dumps({**t[2], **t[1], "type": t[0]})))


def wrap(value: str) -> str:
    return '{"type": "ping", "x": ' + value + "}"


def valid_event() -> st.SearchStrategy[tuple[bool, str | bytes]]:
    """A known type with the fields it takes, their values plausible: mostly accepted (a response starts...)."""
    user_text = st.text(min_size=1, max_size=40)
    shapes = {
        "session.update": st.fixed_dictionaries({"session": FIELDS["session"]}),
        "conversation.item.create": st.fixed_dictionaries({"item": st.one_of(
            user_text.map(lambda t: {"type": "message", "role": "user",
                                     "content": [{"type": "input_text", "text": t}]}),
            st.tuples(text, json_values).map(lambda t: {"type": "function_call_output", "call_id": t[0],
                                                        "output": json.dumps(t[1])}))}),
        "response.create": st.fixed_dictionaries({}, optional={"response": st.dictionaries(
            st.sampled_from(["instructions", "max_output_tokens", "tools", "modalities"]), json_values, max_size=2)}),
        "response.cancel": st.fixed_dictionaries({}, optional={"response_id": text}),
        "input_audio_buffer.append": st.fixed_dictionaries({"audio": st.binary(max_size=600).map(
            lambda b: base64.b64encode(b).decode()) | text}),
        "input_audio_buffer.commit": st.just({}),
        "input_audio_buffer.clear": st.just({}),
        "vision.prompt": st.fixed_dictionaries({"text": user_text}),
        "ping": st.fixed_dictionaries({}, optional={"client_ts": st.floats(0, 1e12)}),
        "pong": st.just({}),
    }
    weighted = sorted(shapes) + ["session.update"] * 4 + ["conversation.item.create", "response.create"] * 2
    return st.sampled_from(weighted).flatmap(
        lambda kind: shapes[kind].map(lambda fields: (False, json.dumps({"type": kind, **fields}))))


def messages() -> st.SearchStrategy[tuple[bool, str | bytes]]:
    refused = st.one_of(
        json_values.filter(lambda v: not isinstance(v, dict)).map(json.dumps),
        st.dictionaries(text.filter(lambda k: k != "type"), json_values, max_size=3).map(json.dumps),
        st.tuples(json_values.filter(lambda v: not isinstance(v, str) or not v), json_values).map(
            lambda t: json.dumps({"type": t[0], "x": t[1]})),
        text.filter(lambda t: t not in CLIENT_EVENTS).map(lambda t: json.dumps({"type": t})),
        st.sampled_from(["response.delete", "session.created", "error", "Ping", "ping ", "input_audio_buffer"]).map(
            lambda t: json.dumps({"type": t})),
        st.integers(33, 5000).map(lambda n: wrap("[" * n + "]" * n)),
        st.integers(33, 1000).map(lambda n: '{"type": "session.update", "session": ' + '{"a":' * n + "1"
                                  + "}" * n + "}"),
        st.integers(65, 3000).map(lambda n: wrap("9" * n)),
        st.integers(65, 500).map(lambda n: wrap("1." + "5" * n + "e9")),
        st.sampled_from(["NaN", "Infinity", "-Infinity"]).map(wrap),
        st.integers(MAX_EVENT_BYTES + 1, 60000).map(lambda n: wrap('"' + "x" * n + '"')),
        st.sampled_from(["", "{", "[1,", "\x00", "null", b"\xed\xa0\x80", b"\xff\xfe{}"]),
        st.binary(min_size=1, max_size=200).filter(lambda b: not _is_json(b)),
    ).map(lambda m: (True, m))
    raw = st.one_of(
        st.binary(max_size=300).map(lambda b: (False, b)),
        st.text(max_size=200).map(lambda t: (not _is_json(t.encode("utf-8", "surrogatepass")), t)),
        valid_event().map(lambda m: (False, m[1].encode())),  # a valid event as a binary message
    )
    kinds = {"refused": refused, "valid": valid_event(), "wrong": known_event(), "raw": raw}
    return st.sampled_from(["refused", "refused", "valid", "valid", "valid", "wrong", "wrong", "raw"]).flatmap(
        kinds.__getitem__)


def _is_json(raw: bytes) -> bool:
    try:
        json.loads(raw)
        return True
    except (ValueError, RecursionError):
        return False


# --- the exchange ----------------------------------------------------------------------------------------------

async def exchange(peer: ClientPeer, sent: list[tuple[bool, str | bytes]], tag: str) -> list[dict[str, Any]]:
    """Send the messages, a ping and a barrier (a ``vision.prompt`` these sessions refuse, so its ``error`` comes
    after the app handled everything before it); the events that arrived up to the barrier's error."""
    after = len(peer.events)
    for _, payload in sent:
        peer.send_raw(payload)
    peer.send({"type": "ping", "event_id": tag})
    peer.send({"type": "vision.prompt", "text": "barrier", "event_id": tag + "-barrier"})
    await peer.wait_for("pong", lambda e: e.get("ping_event_id") == tag, timeout=15, after=after)
    barrier = await peer.wait_for("error", lambda e: e["error"].get("event_id") == tag + "-barrier", timeout=15,
                                  after=after)
    return [e for e in peer.events[after:peer.events.index(barrier)]
            if not (e.get("type") == "pong" and e.get("ping_event_id") == tag)]


@given(data=st.data())
@settings(database=None, derandomize=True, deadline=None, max_examples=150,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_any_message_gets_an_error_or_is_accepted(peers: Peers, data: st.DataObject) -> None:
    sent = data.draw(st.lists(messages(), min_size=1, max_size=3))
    refusals = sum(1 for must, _ in sent if must)
    for app, peer in peers.peers.items():  # every example goes to every session
        tag = f"fuzz-{time.monotonic_ns()}"
        arrived = peers.srv.run(exchange(peer, sent, tag), timeout=30)
        errors = [e["error"] for e in arrived if e.get("type") == "error"]
        event(f"{app}: {len(errors) - refusals} errors besides the refusals")
        assert sum(1 for e in errors if e["code"] in REFUSAL_CODES) >= refusals, (app, errors, sent)
        for error in errors:
            assert error["code"] != "internal_error" and error["message"], (app, error, sent)
        assert not any(e.get("type") == "session.ended" for e in peer.events), (app, sent)
        assert peer.channel is not None and peer.channel.readyState == "open", app


NASTY = [
    {"type": "session.update", "session": {"config": None}},
    {"type": "session.update", "session": {"config": [1, 2]}},
    {"type": "session.update", "session": {"config": "en"}},
    {"type": "session.update", "session": {"config": {"language": None, "language_prior": 5}}},
    {"type": "session.update", "session": {"config": {"direction": "es-en-fr"}}},
    {"type": "session.update", "session": {"config": {"chunk_ms": [800]}}},
    {"type": "session.update", "session": {"delay_s": float("1e308")}},
    {"type": "session.update", "session": {"instructions": None, "tools": "all"}},
    {"type": "session.update", "session": {"tools": [{"type": "function"}, None, 3]}},
    {"type": "session.update", "session": {"tools": [{"type": "function", "name": "x" * 5000,
                                                      "parameters": {"type": "object", "properties": []}}]}},
    {"type": "session.update", "session": {"vision": {"prompt": None}}},
    {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": "hi"}},
    {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [None, 1]}},
    {"type": "conversation.item.create", "item": {"type": "message", "role": "system", "content": [{}]}},
    {"type": "conversation.item.create", "item": {"type": "function_call_output"}},
    {"type": "conversation.item.create", "item": {"type": "function_call_output", "call_id": [], "output": {}}},
    {"type": "response.create", "response": {"tools": "x", "max_output_tokens": -1, "instructions": 5}},
    {"type": "response.create", "response": {"modalities": None}},
    {"type": "response.cancel", "response_id": "resp_nope"},
    {"type": "input_audio_buffer.append", "audio": "not base64!"},
    {"type": "input_audio_buffer.append", "audio": "AAE="},
    {"type": "input_audio_buffer.commit"},
    {"type": "vision.prompt", "text": "x" * 4000},
    {"type": "ping", "client_ts": "yesterday", "event_id": ["a"]},
]


def test_a_corpus_of_nasty_known_events(peers: Peers) -> None:
    """Known types with fields every handler must check (kept explicit: random draws may miss them)."""
    sent = [(False, json.dumps(m)) for m in NASTY]
    for app, peer in peers.peers.items():
        for index in range(0, len(sent), 4):
            arrived = peers.srv.run(exchange(peer, sent[index:index + 4], f"nasty-{app}-{index}"), timeout=30)
            internal = [e["error"] for e in arrived if e.get("type") == "error"
                        and e["error"]["code"] == "internal_error"]
            assert not internal, (app, internal, NASTY[index:index + 4])
        assert peer.channel is not None and peer.channel.readyState == "open", app


def test_sessions_are_alive_after_fuzzing(peers: Peers) -> None:
    srv = peers.srv
    for app, peer in peers.peers.items():
        arrived = srv.run(exchange(peer, [], f"final-{app}"), timeout=30)
        assert all(e.get("type") != "session.ended" for e in arrived)
        internal = [e for e in peer.events if e.get("type") == "error" and e["error"]["code"] == "internal_error"]
        assert not internal, internal[:3]
        state = srv.call(lambda p=peer: srv.registry.get(p.session_id).state)
        assert state == "connected", (app, state)
    assert srv.request("GET", "/health")[0] == 200
