"""The MOSS-VL-Realtime protocol rules of RealtimeVisionSession, one test per rule, with a scripted token source."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence

import pytest

from rtc_agent.engines.vlm.base import SessionBusy, SessionSlot
from rtc_agent.engines.vlm.chat_format import (
    DEFAULT_SYSTEM_PROMPT,
    ELLIPSIS,
    ROUND_END,
    ROUND_START,
    SILENCE,
    MossChatFormat,
    Segment,
    frame_wrapper,
)
from rtc_agent.engines.vlm.outputs import ChunkParser
from rtc_agent.engines.vlm.realtime import RealtimeVisionSession, TokenPacer
from tests.polling import collect, wait_until

SIL = 256
ELL = 257
SPECIAL = {SIL: SILENCE, ELL: ELLIPSIS}
IMG = object()  # frames are opaque to the session


def ids_of(text: str) -> list[int]:
    """One token per UTF-8 byte (so multi-byte characters span several tokens)."""
    return list(text.encode("utf-8"))


class ScriptedSource:
    """A token source whose next tokens come from a script.

    Each step is a list of candidate ids in preference order; the first one not suppressed is "sampled". An
    empty script yields silence. ``react(segment)`` returns steps to append when a segment is fed (default:
    answer each prompt with ``answer`` then silence; frames alone get silence). ``gate`` (when set) must be open
    for ``next_token`` to return.
    """

    def __init__(self, steps: Sequence[Sequence[int]] = (), *, answer: str = "ok",
                 react: Callable[[Segment], list[list[int]]] | None = None, wait_first: bool = False,
                 fail_after: int | None = None) -> None:
        self.chat_format = MossChatFormat()
        self.silence_ids = frozenset({SIL})
        self.suppress_ids = frozenset({ELL})
        self.wait_for_input_first = wait_first
        self.steps: list[list[int]] = [list(s) for s in steps]
        self.answer = answer
        self.react = react or self._default_react
        self.fail_after = fail_after
        self.fed: list[Segment] = []
        self.begun: tuple[str, str] | None = None
        self.calls = 0
        self.suppress_seen: list[frozenset[int]] = []
        self.gate: threading.Event | None = None
        self.closed = False
        self.lock = threading.Lock()

    def _default_react(self, segment: Segment) -> list[list[int]]:
        steps: list[list[int]] = []
        for _ in segment.prompts:
            steps += [[i] for i in ids_of(self.answer)] + [[SIL]]
        if not steps:
            steps.append([SIL])
        return steps

    def begin(self, system_prompt: str, initial_prompt: str) -> None:
        self.begun = (system_prompt, initial_prompt)

    def feed(self, segment: Segment) -> None:
        with self.lock:
            self.fed.append(segment)
            self.steps += self.react(segment)

    def next_token(self, suppress: frozenset[int]) -> int:
        if self.gate is not None:
            assert self.gate.wait(10), "gate never opened"
        with self.lock:
            self.calls += 1
            self.suppress_seen.append(suppress)
            if self.fail_after is not None and self.calls > self.fail_after:
                raise RuntimeError("model exploded")
            step = self.steps.pop(0) if self.steps else [SIL]
        return next(i for i in step if i not in suppress)

    def decode(self, ids: Sequence[int]) -> str:
        out = ""
        raw = bytearray()
        for i in ids:
            if i in SPECIAL:
                out += raw.decode("utf-8", "replace") + SPECIAL[i]
                raw.clear()
            else:
                raw.append(i)
        return out + raw.decode("utf-8", "replace")

    def close(self) -> None:
        self.closed = True








def make(source: ScriptedSource, **kwargs) -> RealtimeVisionSession:
    kwargs.setdefault("max_tokens_per_turn", 1000)
    return RealtimeVisionSession(source, **kwargs)


# --- API ------------------------------------------------------------------------------------------------------

def test_api_lifecycle_context_manager_active_and_pending_frames() -> None:
    source = ScriptedSource()
    source.gate = threading.Event()
    with make(source, initial_prompt="Describe changes.") as session:
        assert session.active
        wait_until(lambda: source.begun is not None)
        assert source.begun == (DEFAULT_SYSTEM_PROMPT, "Describe changes.")
        for ts in (0.0, 1.0, 2.0):
            assert session.push_frame(IMG, ts) is False
        assert session.pending_frames == 3  # the loop is held inside next_token
        source.gate.set()
        wait_until(lambda: session.pending_frames == 0 and session.parked)
    assert not session.active
    assert source.closed
    with pytest.raises(RuntimeError, match="closed"):
        session.push_frame(IMG, 3.0)
    with pytest.raises(RuntimeError, match="closed"):
        session.start()


def test_push_frame_starts_the_session_and_none_means_seconds_since_start() -> None:
    now = [100.0]
    source = ScriptedSource()
    session = make(source, clock=lambda: now[0])
    try:
        now[0] = 100.0
        session.push_frame(IMG)  # starts the session at t=100
        now[0] = 102.5
        session.push_frame(IMG)
        wait_until(lambda: sum(len(s.timestamps) for s in source.fed) == 2)
        assert [ts for s in source.fed for ts in s.timestamps] == [0.0, 2.5]
    finally:
        session.close()


# --- timestamps -------------------------------------------------------------------------------------------------

def test_timestamps_must_be_non_decreasing_with_the_reference_message() -> None:
    session = make(ScriptedSource())
    try:
        session.push_frame(IMG, 2.0)
        session.push_frame(IMG, 2.0)  # equal is fine
        with pytest.raises(ValueError) as info:
            session.push_frame(IMG, 1.5)
        assert str(info.value) == "Frame timestamps must be non-decreasing: 1.5 < 2.0"
        session.push_frame(IMG, 2.5)  # the rejected frame did not move the clock
    finally:
        session.close()


# --- prompts ----------------------------------------------------------------------------------------------------

def test_empty_prompt_is_rejected_and_queues_nothing() -> None:
    source = ScriptedSource()
    source.gate = threading.Event()
    session = make(source)
    try:
        for bad in ("", "   ", None):
            with pytest.raises(ValueError, match="prompt must not be empty"):
                session.push_prompt(bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="prompt must not be empty"):
            session.push_prompt_frame("", IMG, 1.0)
        assert session.pending_frames == 0
    finally:
        source.gate.set()
        session.close()


# --- bounded frame queue -----------------------------------------------------------------------------------------

def test_frame_queue_is_bounded_and_drops_the_oldest() -> None:
    source = ScriptedSource()
    source.gate = threading.Event()
    session = make(source, frame_queue_size=2)
    try:
        assert session.push_frame("f1", 1.0) is False
        assert session.push_frame("f2", 2.0) is False
        assert session.push_frame("f3", 3.0) is True  # f1 dropped
        assert session.pending_frames == 2
        with pytest.raises(queue.Full):
            session.push_frame("f4", 4.0, drop_oldest=False)
        source.gate.set()
        wait_until(lambda: bool(source.fed))
        assert source.fed[0].images == ("f2", "f3")
        assert source.fed[0].timestamps == (2.0, 3.0)
        assert session.counters["frames_dropped"] == 1
    finally:
        source.gate.set()
        session.close()


# --- frame wrapper text ------------------------------------------------------------------------------------------

def test_frames_enter_the_context_with_the_timestamp_wrapper() -> None:
    source = ScriptedSource()
    source.gate = threading.Event()
    session = make(source)
    try:
        session.push_frame("a", 1.26)
        session.push_frame("b", 12.0)
        source.gate.set()
        wait_until(lambda: bool(source.fed))
        assert source.fed[0].text == (
            "<|vision_start|><|time_start|>1.3 seconds<|time_end|><|image|><|vision_end|>"
            "<|vision_start|><|time_start|>12.0 seconds<|time_end|><|image|><|vision_end|>"
        )
        assert frame_wrapper(0.04) == "<|vision_start|><|time_start|>0.0 seconds<|time_end|><|image|><|vision_end|>"
    finally:
        session.close()


# --- silence parks the loop ----------------------------------------------------------------------------------------

def test_silence_parks_the_loop_until_new_input() -> None:
    source = ScriptedSource(steps=[ids_of("hi")[:1], ids_of("hi")[1:], [SIL]])
    session = make(source)
    try:
        session.start()
        out = collect(session.poll_output, lambda o: SILENCE in o)
        assert "".join(o for o in out if o != SILENCE) == "hi"
        wait_until(lambda: session.parked)
        calls = source.calls
        time.sleep(0.1)
        assert source.calls == calls  # no decoding while parked
        session.push_frame(IMG, 1.0)
        wait_until(lambda: source.calls > calls)
        wait_until(lambda: session.parked)
    finally:
        session.close()


# --- <|...|> suppressed --------------------------------------------------------------------------------------------

def test_ellipsis_token_is_suppressed() -> None:
    source = ScriptedSource(steps=[[ELL, ord("a")], [ELL, ord("b")], [SIL]])
    session = make(source)
    try:
        session.start()
        out = collect(session.poll_output, lambda o: SILENCE in o)
        assert out == ["a", "b", SILENCE]
        assert all(ELL in s for s in source.suppress_seen)
        assert not any(ELLIPSIS in o for o in out)
    finally:
        session.close()


# --- rounds --------------------------------------------------------------------------------------------------------

def test_prompt_opens_a_round_that_ends_when_the_model_goes_silent() -> None:
    source = ScriptedSource(answer="Yes.")
    session = make(source)
    try:
        session.start()
        collect(session.poll_output, lambda o: SILENCE in o)  # the first decision: silence
        session.push_prompt("Is anyone there?")
        out = collect(session.poll_output, lambda o: ROUND_END in o)
        assert out == [ROUND_START, "Y", "e", "s", ".", SILENCE, ROUND_END]
        fed = source.fed[-1]
        assert fed.prompts == ("Is anyone there?",)
        assert fed.text == "<|im_end|>\n<|im_start|>user\nIs anyone there?<|im_end|>\n<|im_start|>assistant\n"
    finally:
        session.close()


def test_prompt_with_frames_in_one_drain_inserts_the_silence_opener() -> None:
    source = ScriptedSource(answer="A cat.")
    source.gate = threading.Event()
    session = make(source)
    try:
        session.push_prompt_frame("What is this?", "frame", 3.0)
        source.gate.set()
        events = collect(session.poll_event, lambda o: any(e.kind == "round_end" for e in o))
        start = next(i for i, e in enumerate(events) if e.kind == "round_start")
        assert events[start].prompt == "What is this?" and events[start].prompted
        assert events[start + 1].kind == "silence"  # the opener, reported right after the round start
        assert events[start + 1].frame_ts == 3.0
        text = "".join(e.text for e in events if e.kind == "text")
        assert text == "A cat."
        assert all(e.frame_ts == 3.0 for e in events[start:])
        fed = next(s for s in source.fed if s.prompts)
        assert fed.text == (
            "<|im_end|>\n<|im_start|>user\nWhat is this?<|im_end|>\n<|im_start|>assistant\n"
            "<|silence|><|vision_start|><|time_start|>3.0 seconds<|time_end|><|image|><|vision_end|>"
        )
    finally:
        session.close()


def test_a_new_prompt_ends_the_open_round_first() -> None:
    long_answer = "abcdefghijklmnopqrstuvwxyz" * 4
    source = ScriptedSource(answer=long_answer)
    session = make(source, max_tokens_per_turn=200)
    try:
        session.push_prompt("first")
        collect(session.poll_event, lambda o: any(e.kind == "text" for e in o))
        session.push_prompt("second")
        events = collect(session.poll_event, lambda o: sum(e.kind == "round_end" for e in o) >= 2, timeout=10)
        marks = [(e.kind, e.round, e.prompt) for e in events if e.kind in ("round_start", "round_end")]
        assert marks[0] == ("round_end", 1, None)
        assert marks[1] == ("round_start", 2, "second")
        assert marks[2] == ("round_end", 2, None)
    finally:
        session.close()


def test_spontaneous_commentary_is_an_unprompted_round_in_events_only() -> None:
    source = ScriptedSource(steps=[[ord("x")], [SIL]])
    session = make(source)
    try:
        session.start()
        events = collect(session.poll_event, lambda o: any(e.kind == "round_end" for e in o))
        assert [(e.kind, e.prompted) for e in events] == [
            ("round_start", False), ("text", False), ("silence", False), ("round_end", False)]
        assert events[1].round == 1
    finally:
        session.close()
    # the string stream keeps the reference form: no round markers for unprompted commentary
    source = ScriptedSource(steps=[[ord("x")], [SIL]])
    session = make(source)
    try:
        session.start()
        assert collect(session.poll_output, lambda o: SILENCE in o) == ["x", SILENCE]
    finally:
        session.close()


def test_an_error_emits_round_end_and_fails_the_session() -> None:
    source = ScriptedSource(answer="a" * 50, fail_after=3)
    session = make(source)
    session.push_prompt("go")
    out: list[str] = []
    with pytest.raises(RuntimeError, match="realtime generation failed") as info:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            item = session.poll_output(timeout=0.05)
            if item is not None:
                out.append(item)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert str(info.value.__cause__) == "model exploded"
    assert ROUND_START in out
    assert out[-1] == ROUND_END
    assert source.closed
    assert not session.active
    with pytest.raises(RuntimeError, match="realtime generation failed"):
        session.push_frame(IMG, 1.0)
    with pytest.raises(RuntimeError, match="realtime generation failed"):
        session.close()


def test_close_ends_an_open_round() -> None:
    source = ScriptedSource(answer="z" * 500)
    session = make(source, max_tokens_per_turn=100)
    session.push_prompt("talk")
    collect(session.poll_output, lambda o: len(o) >= 3)
    session.close()
    rest = list(session.stream_outputs(poll_interval=0.01))
    assert rest[-1] == ROUND_END


# --- max_tokens_per_turn is a rate ---------------------------------------------------------------------------------

def test_token_pacer_is_a_tokens_per_second_cap() -> None:
    pacer = TokenPacer(10)  # one token per 0.1 s at most
    pacer.start(0.0)
    assert pacer.delay(0.03) == pytest.approx(0.07)  # the token's own cost counts toward the interval
    pacer.mark(0.1)
    assert pacer.delay(0.35) == 0.0  # a slow token waits no more
    with pytest.raises(ValueError):
        TokenPacer(0)


def test_max_tokens_per_turn_paces_decoding_and_defaults_to_12() -> None:
    assert RealtimeVisionSession(ScriptedSource()).max_tokens_per_turn == 12
    frozen = [5.0]  # a clock that does not move: every token costs 0 s, so every token waits a full interval
    source = ScriptedSource(steps=[[ord("a")]] * 9 + [[SIL]])
    session = RealtimeVisionSession(source, max_tokens_per_turn=200, clock=lambda: frozen[0])
    try:
        session.start()
        collect(session.poll_output, lambda o: SILENCE in o)
        wait_until(lambda: session.parked)
        assert source.calls == 10
        assert session.pacing_wait_s == pytest.approx(10 * (1 / 200))
    finally:
        session.close()


# --- multi-byte text ---------------------------------------------------------------------------------------------

def test_multibyte_characters_are_only_emitted_whole() -> None:
    text = "héllo 中文 ok 🙂"
    source = ScriptedSource(steps=[[i] for i in ids_of(text)] + [[SIL]])
    session = make(source)
    try:
        session.start()
        out = collect(session.poll_output, lambda o: SILENCE in o)
        pieces = out[:-1]
        assert "".join(pieces) == text
        assert not any("\ufffd" in p for p in pieces)
        assert "中" in pieces and "🙂" in pieces  # each emitted once complete
    finally:
        session.close()


# --- max_new_tokens --------------------------------------------------------------------------------------------

def test_max_new_tokens_parks_a_model_that_never_goes_silent() -> None:
    source = ScriptedSource(steps=[[ord("x")]] * 1000, react=lambda seg: [])
    session = make(source, max_new_tokens=5)
    try:
        session.start()
        wait_until(lambda: session.parked)
        assert source.calls == 5
        session.push_frame(IMG, 1.0)  # new input re-arms the allowance
        wait_until(lambda: source.calls == 10 and session.parked)
        assert session.counters["max_new_tokens_reached"] == 2
    finally:
        session.close()


def test_wait_for_input_first_parks_before_the_first_token() -> None:
    source = ScriptedSource(wait_first=True)
    session = make(source)
    try:
        session.start()
        wait_until(lambda: session.parked)
        assert source.calls == 0
        session.push_frame(IMG, 0.5)
        wait_until(lambda: source.calls == 1)
    finally:
        session.close()


# --- one session per model instance --------------------------------------------------------------------------------

def test_one_active_session_per_model_instance() -> None:
    slot = SessionSlot("test model")
    first = make(ScriptedSource(), on_close=slot.acquire("first"))
    first.start()
    with pytest.raises(SessionBusy, match="already has an active realtime session"):
        slot.acquire("second")
    first.close()
    assert not slot.busy
    release = slot.acquire("third")
    release()


# --- close -------------------------------------------------------------------------------------------------------

def test_close_times_out_when_the_model_does_not_return() -> None:
    source = ScriptedSource()
    source.gate = threading.Event()
    session = make(source)
    session.start()
    wait_until(lambda: source.begun is not None)
    with pytest.raises(TimeoutError):
        session.close(timeout=0.05)
    source.gate.set()
    session.close(timeout=5)
    assert not session.active


# --- the raw output parser used by adapter sessions ---------------------------------------------------------------

def test_chunk_parser_splits_control_tokens_even_across_chunks() -> None:
    parser = ChunkParser()
    pieces = parser.feed("<|round_start|><|response|>A person")
    pieces += parser.feed(" entered.<|sil")
    assert pieces == [("round_start", ""), ("text", "A person"), ("text", " entered.")]
    pieces = parser.feed("ence|><|...|>x<|round_end|>")
    assert pieces == [("silence", ""), ("text", "x"), ("round_end", "")]
    assert parser.feed("a < b") == [("text", "a < b")]
    assert parser.feed("tail <") == [("text", "tail ")]
    assert parser.flush() == [("text", "<")]
