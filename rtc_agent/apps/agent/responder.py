"""``Responder``: one agent response, from the LLM's first token to the last clause of speech.

The reply streams through :class:`ReplyParser` (spoken text vs. tool calls), a :class:`ClauseSplitter` and the
TTS engine, clause by clause, into one utterance on the outgoing track, so the first clause plays while the LLM
is still writing. Tool calls run between LLM rounds: server tools with a timeout (a spoken filler when one takes
longer than ``filler_after_s``), browser tools as ``response.function_call_arguments.done`` answered by a
``function_call_output`` item. Results return to the model, which then speaks the answer.

Options for OpenAI Realtime sessions: ``audio=False`` answers in text only (``response.output_text.delta``, no
TTS); ``end_on_browser_call`` ends the response at a browser tool call instead of waiting for its output (the
client answers with a ``function_call_output`` item and a new ``response.create``). Response objects carry
``output_modalities``, ``metadata`` and ``usage`` (token counts as the LLM reported them).

Tool guard (``tool_guard``, on in the agent app): when the user's turn asks for what a declared built-in tool
answers (its ``asked_by`` matcher, see :mod:`rtc_agent.apps.agent.tool_guard`), the first round's text is held
back until the round ends; if the model answered without calling that tool, the answer is discarded unspoken and
unshown and the model is asked once more with ``tool_choice`` forced to the tool (``guard_retries`` names them).

A responder may start *held* (preemptive generation while the end of the user's turn is not yet confirmed): it
generates and synthesizes but emits nothing and plays nothing until :meth:`release`. :meth:`interrupt`
(barge-in) stops it and reports the assistant text actually heard.

The responder never changes the session's conversation itself: it returns the items it produced (``items``) and
the app commits them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from dataclasses import dataclass
from typing import Any

from rtc_agent.apps.agent.browser_calls import PendingBrowserCalls
from rtc_agent.apps.agent.conversation import Item, new_item_id
from rtc_agent.apps.agent.reply_items import ParsedToolCall, SpokenText, ToolCallParseError
from rtc_agent.apps.agent.reply_parser import ReplyParser
from rtc_agent.apps.agent.tool import ToolResult
from rtc_agent.apps.agent.tool_guard.guard import forced_choice, guarded_tool
from rtc_agent.apps.agent.tool_registry import ToolRegistry
from rtc_agent.engines.llm.messages import ChatRequest
from rtc_agent.engines.tts.base import Synthesis
from rtc_agent.engines.tts.stream import spoken_text
from rtc_agent.engines.tts.text import ClauseSplitter
from rtc_agent.errors import AgentError
from rtc_agent.protocol import ServerEvent, error_event
from rtc_agent.protocol.events import (
    ConversationItemCreated,
    ConversationItemTruncated,
    FunctionCallArgumentsDone,
    ResponseAudioTranscriptDelta,
    ResponseCreated,
    ResponseDone,
    ResponseTextDelta,
)

log = logging.getLogger(__name__)

_ids = itertools.count(1)
CLAUSE_QUEUE = 16
FIRST_LEAD_MS = 10  # silence kept before the first word of a response (the voice's own lead-in is ~50 ms)
MID_SENTENCE_TAIL_MS = 40  # pause kept after a clause that ends without punctuation
CLAUSE_END = ".!?…,;:"


@dataclass
class ResponseOptions:
    max_tokens: int = 200
    temperature: float | None = None
    max_tool_rounds: int = 3
    filler: str = "One moment."
    filler_after_s: float = 1.0
    offer_tools: bool = True
    tool_choice: str | dict[str, Any] | None = None  # passed to the LLM when tools are offered (None: auto)
    audio: bool = True  # False: text replies (ResponseTextDelta), nothing synthesized
    end_on_browser_call: bool = False
    speed: float = 1.0
    voice: str | None = None
    metadata: dict[str, Any] | None = None
    tool_guard: bool = False  # see the module docstring; the agent app turns it on (config "tool_guard")

    @classmethod
    def from_config(cls, config: dict[str, Any], *, offer_tools: bool) -> ResponseOptions:
        """The options of a response under a validated agent ``config`` (per-response overrides merged in);
        ``offer_tools``: whether the session offers its tools at all."""
        choice = config["tool_choice"]
        return cls(max_tokens=config["max_tokens"], temperature=config["temperature"],
                   max_tool_rounds=config["max_tool_rounds"], filler=config["filler"],
                   offer_tools=offer_tools and choice != "none",
                   tool_choice=None if choice in ("auto", "none") else choice, audio=config["output"] == "audio",
                   end_on_browser_call=config["browser_tool_calls"] == "end_response",
                   speed=config["speed"], voice=config["voice"], metadata=config.get("metadata"),
                   tool_guard=config.get("tool_guard", True))


class Responder:
    """Runs one response; construct, then ``await run()`` in a task the session owns."""

    def __init__(self, *, llm: Any, synthesizer: Any, speech: Any, emit: Any, tools: ToolRegistry,
                 pending: PendingBrowserCalls, history: list[dict[str, Any]], options: ResponseOptions,
                 held: bool = False) -> None:
        self.id = f"resp_{next(_ids)}"
        self.llm = llm
        self.synthesizer = synthesizer
        self.speech = speech
        self._emit = emit
        self.tools = tools
        self.pending = pending
        self.history = history
        self.options = options
        self.items: list[Item] = []
        self.status = "in_progress"
        self.released = asyncio.Event()
        self._held_events: list[ServerEvent] = []
        self.clauses: list[tuple[Item, Synthesis]] = []  # every clause queued for playback, in order
        self.utterances: list[Any] = []
        self._speaking_item: Item | None = None
        self._filler_spoken = False
        self.started = time.monotonic()
        self.timings: dict[str, float | None] = {"llm_first_token_ms": None, "tts_first_audio_ms": None}
        self.usage = {"input_tokens": 0, "output_tokens": 0}  # summed over the LLM rounds that reported it
        self.guard_retries: list[str] = []  # tools the guard forced after an answer without them
        if not held:
            self.released.set()

    # --- events and release ---

    def emit(self, event: ServerEvent) -> None:
        if self.released.is_set():
            self._emit(event)
        else:
            self._held_events.append(event)

    def release(self) -> None:
        """Let a held response speak: its events go out in order and its audio starts."""
        if self.released.is_set():
            return
        self.released.set()
        events, self._held_events = self._held_events, []
        for event in events:
            self._emit(event)

    # --- playback state ---

    @property
    def played_ms(self) -> int:
        return sum(u.sent_ms for u in self.utterances)

    @property
    def audible(self) -> bool:
        """True while some of this response's audio has started and not finished playing."""
        return any(getattr(u, "started", False) and not u.done.done() for u in self.utterances)

    @property
    def playing(self) -> bool:
        """True while this response still has audio queued or playing."""
        return any(not u.done.done() for u in self.utterances)

    def interrupt(self) -> None:
        """Barge-in or cancel: stop this response's audio now; when some of it was playing, truncate the
        assistant item to what was actually heard and say so with ``conversation.item.truncated`` (``audio_end_ms``
        within the item). The caller cancels the task afterwards."""
        playing = self.playing
        if self.speech is not None and playing:
            self.speech.clear()
        item = self._speaking_item
        if item is None or not playing:
            return
        before_s = 0.0
        own: list[Synthesis] = []
        for owner, synthesis in self.clauses:
            if owner is item:
                own.append(synthesis)
            elif not own:
                before_s += synthesis.duration_s
        played_s = max(0.0, self.played_ms / 1000 - before_s)
        item.text = spoken_text(own, played_s)
        item.truncated = True
        self.emit(ConversationItemTruncated(item_id=item.id, audio_end_ms=int(played_s * 1000)))

    # --- the response ---

    def _response(self, **fields: Any) -> dict[str, Any]:
        out = {"id": self.id, "object": "realtime.response", "status": self.status,
               "output_modalities": ["audio" if self.options.audio else "text"], **fields}
        if self.options.metadata is not None:
            out["metadata"] = self.options.metadata
        return out

    async def run(self) -> None:
        self.emit(ResponseCreated(response=self._response(output=[])))
        try:
            for round_index in range(self.options.max_tool_rounds + 1):
                offer_tools = self.options.offer_tools and round_index < self.options.max_tool_rounds
                guard = self._guarded_tool() if offer_tools and round_index == 0 else None
                calls = await self._generate(offer_tools, guard=guard)
                if calls is None:  # answered without the guarded tool: discarded; ask again, forcing it
                    assert guard is not None
                    self.guard_retries.append(guard)
                    log.info("response %s: answered without %s; asking again with it forced", self.id, guard)
                    calls = await self._generate(offer_tools, tool_choice=forced_choice(guard))
                if not calls or not await self._run_tools(calls):
                    break
            self._finish_utterances()
            self.status = "completed"
        except asyncio.CancelledError:
            self.status = "cancelled"
            self._finish_utterances()
            self.pending.cancel_all()
            self._done()
            raise
        except AgentError as exc:
            self.status = "failed"
            self._finish_utterances()
            self.emit(error_event(exc))
        except Exception as exc:  # a bug or an engine surprise: fail this response, keep the session
            log.exception("response %s failed", self.id)
            self.status = "failed"
            self._finish_utterances()
            self.emit(error_event(AgentError(f"response failed: {exc}")))
        self._done()

    def _done(self) -> None:
        usage = {**self.usage, "total_tokens": self.usage["input_tokens"] + self.usage["output_tokens"]}
        self.emit(ResponseDone(response=self._response(output=[item.realtime() for item in self.items],
                                                       timings=self.timings, usage=usage)))

    def _guarded_tool(self) -> str | None:
        """The built-in tool the user's turn asks for, when the guard is on and nothing was said yet."""
        if not self.options.tool_guard or self.items or self.options.tool_choice is not None:
            return None
        return guarded_tool(self.history, self.tools)

    async def _generate(self, offer_tools: bool, *, guard: str | None = None,
                        tool_choice: Any = None) -> list[ParsedToolCall | ToolCallParseError] | None:
        """One LLM round: speak the text as it comes; return the tool calls it made. With ``guard`` (a tool name)
        the text is held until the round ends and spoken only when the model called that tool; otherwise the
        round leaves nothing behind and None is returned. ``tool_choice`` overrides the configured one."""
        item = Item(new_item_id(), "assistant")
        self._speaking_item = item
        request = ChatRequest(
            messages=[*self.history, *(i.message() for i in self.items)],
            tools=self.tools.specs() if offer_tools else (), max_tokens=self.options.max_tokens,
            temperature=self.options.temperature,
            tool_choice=(tool_choice or self.options.tool_choice) if offer_tools and len(self.tools) else None,
        )
        parser = ReplyParser()
        # The first audio as early as a comma, or six words, allow, without waiting for the token after the mark.
        splitter = ClauseSplitter(first_min_soft_chars=12, first_max_words=6, first_eager_end=True)
        clauses: asyncio.Queue[str | None] = asyncio.Queue(maxsize=CLAUSE_QUEUE)
        speaker = asyncio.get_running_loop().create_task(self._speak_clauses(clauses, item))
        speaker.add_done_callback(_note_speaker_end)  # a session closed mid-answer ends its speech output
        calls: list[ParsedToolCall | ToolCallParseError] = []
        held: list[str] | None = [] if guard is not None else None  # text not spoken (yet)
        try:
            async with self.llm.stream(request) as stream:
                async for delta in stream:
                    if self.timings["llm_first_token_ms"] is None and (delta.text or delta.tool_calls):
                        self.timings["llm_first_token_ms"] = round((time.monotonic() - self.started) * 1000, 1)
                    if delta.usage is not None:
                        self.usage["input_tokens"] += delta.usage.prompt_tokens
                        self.usage["output_tokens"] += delta.usage.completion_tokens
                    for parsed in parser.feed(delta):
                        await self._route(parsed, splitter, clauses, calls, held)
            for parsed in parser.finish():
                await self._route(parsed, splitter, clauses, calls, held)
            if held is not None:
                if not any(getattr(c, "name", None) == guard for c in calls):
                    return None
                texts, held = held, None
                for text in texts:
                    await self._route(SpokenText(text), splitter, clauses, calls)
            for clause in splitter.flush():
                await clauses.put(clause)
            await clauses.put(None)
            await speaker
        finally:
            discarded = held is not None  # a held answer that was never spoken leaves nothing behind
            if not speaker.done():
                speaker.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await speaker
            if not item.truncated and not discarded:
                item.text = item.text or parser.text.strip()
            item.tool_calls = [
                {"id": c.call_id, "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments_json}}
                for c in calls if isinstance(c, ParsedToolCall)
            ]
            if (item.text or item.tool_calls) and not discarded:
                self.items.append(item)
        return calls

    async def _route(self, parsed: Any, splitter: ClauseSplitter, clauses: asyncio.Queue[str | None],
                     calls: list[Any], held: list[str] | None = None) -> None:
        if isinstance(parsed, SpokenText) and held is not None:
            held.append(parsed.text)
        elif isinstance(parsed, SpokenText):
            for clause in splitter.feed(parsed.text):
                await clauses.put(clause)
        else:
            calls.append(parsed)

    async def _speak_clauses(self, clauses: asyncio.Queue[str | None], item: Item) -> None:
        spoken: list[str] = []
        while (clause := await clauses.get()) is not None:
            await self._say(clause, item)
            spoken.append(clause)
        if not item.truncated:
            item.text = " ".join(spoken)

    async def _say(self, text: str, item: Item) -> None:
        """Synthesize one clause and queue it on the outgoing track (after release); in text mode only emit it."""
        if not self.options.audio:
            await self.released.wait()
            self.emit(ResponseTextDelta(response_id=self.id, item_id=item.id, delta=text + " "))
            return
        synthesis = await self.synthesizer.synthesize(text, speed=self.options.speed, voice=self.options.voice)
        # the answer starts with its first word; a clause cut mid-sentence runs on into the next one
        synthesis = synthesis.trimmed(lead_ms=FIRST_LEAD_MS if not self.clauses else None,
                                      tail_ms=None if text.rstrip()[-1:] in CLAUSE_END else MID_SENTENCE_TAIL_MS)
        await self.released.wait()
        if self.speech is not None:
            utterance = self.utterances[-1] if self.utterances else None
            if utterance is None or utterance.sample_rate != synthesis.sample_rate or utterance.finished:
                utterance = self.speech.start_utterance(synthesis.sample_rate, response_id=self.id)
                self.utterances.append(utterance)
            utterance.write(synthesis.pcm)
        self.clauses.append((item, synthesis))
        if self.timings["tts_first_audio_ms"] is None:
            self.timings["tts_first_audio_ms"] = round((time.monotonic() - self.started) * 1000, 1)
        self.emit(ResponseAudioTranscriptDelta(response_id=self.id, item_id=item.id, delta=text + " "))

    def _finish_utterances(self) -> None:
        for utterance in self.utterances:
            if not utterance.finished:
                utterance.finish()

    async def _run_tools(self, calls: list[ParsedToolCall | ToolCallParseError]) -> bool:
        """Run a round's calls; returns whether the model gets another round (False when the response ends at
        a browser call, see ``end_on_browser_call``)."""
        go_on = True
        for call in calls:
            if self.options.end_on_browser_call and isinstance(call, ParsedToolCall):
                tool = self.tools.get(call.name)
                if tool is not None and tool.kind == "browser":
                    self.emit(FunctionCallArgumentsDone(call_id=call.call_id, name=call.name,
                                                        arguments=call.arguments_json, response_id=self.id))
                    go_on = False  # the client runs it and answers with function_call_output + response.create
                    continue
            if isinstance(call, ToolCallParseError):
                result = ToolResult(call.call_id, call.name or "unknown", ok=False, error_type="invalid_arguments",
                                    error=f"the tool call could not be read: {call.message}")
            else:
                self.emit(FunctionCallArgumentsDone(call_id=call.call_id, name=call.name,
                                                    arguments=call.arguments_json, response_id=self.id))
                result = await self._run_tool(call)
            item = Item(new_item_id(), "tool", result.content(), call_id=result.call_id)
            self.items.append(item)
            self.emit(ConversationItemCreated(item={**item.realtime(), "name": result.name, "ok": result.ok}))
        return go_on

    async def _run_tool(self, call: ParsedToolCall) -> ToolResult:
        checked = self.tools.check(call.call_id, call.name, call.arguments)
        if isinstance(checked, ToolResult):  # unknown tool or invalid arguments: not executed
            return checked
        if checked.kind == "browser":
            self.pending.expect(call.call_id, call.name)
            return await self.pending.wait(call.call_id, checked.timeout_s)
        task = asyncio.get_running_loop().create_task(self.tools.run(call.call_id, call.name, call.arguments))
        try:
            done, _ = await asyncio.wait({task}, timeout=self.options.filler_after_s)
            if not done and not self._filler_spoken and self.options.filler:
                self._filler_spoken = True
                await self._say(self.options.filler, Item(new_item_id(), "assistant"))
            return await task
        finally:
            if not task.done():
                task.cancel()


def _note_speaker_end(task: asyncio.Task) -> None:
    """Retrieve the speaker task's outcome, so an output that ended under it (the session closed while it was
    speaking) is logged once instead of as an unretrieved task exception."""
    if not task.cancelled() and task.exception() is not None:
        log.debug("agent speech stopped: %r", task.exception())
