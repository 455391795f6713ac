"""The embedded LLM's tool suite: 20 spoken-style requests through the real chat template and the agent's parser.

Each request is what Whisper writes for a spoken question (numbers often in words): the time in a city, arithmetic,
a unit conversion, or chit-chat that needs no tool. A request passes when the model's first reply, read with
:class:`~rtc_agent.apps.agent.reply_parser.ReplyParser` (``<tool_call>`` tags, bare JSON and ```json fences), makes
exactly the expected call whose arguments pass the tool's schema and whose result is right (the calculator gives
the expected number, the time zone resolves to the city's zone, the conversion gives the expected value within
1 %), or, for chit-chat, makes no call and says something.

Run: ``python -m rtc_agent.bench.tools [--model NAME] [--precision P] [--out FILE]`` (prints one line per request
and the score). ``--guard N`` runs the agent's tool guard instead (:func:`run_guard`): N tries of each
:data:`GUARD_QUESTIONS` typed into one conversation through the real responder, writing
``docs/benchmarks/agent-tool-guard.json`` unless ``--out`` says otherwise.
The agent offers tools to the embedded model by default only when this suite scores at least
:data:`OFFER_TOOLS_SCORE` of 20 (the score is recorded on the model in ``PACKAGED_MODELS``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from typing import Any

#: Tools are offered to an embedded model by default from this score (out of 20) on.
OFFER_TOOLS_SCORE = 18


@dataclass(frozen=True)
class Case:
    text: str
    tool: str | None  # None: chit-chat, no call expected
    expect: Any = None  # calculate: the number; get_current_time: the IANA zone; convert_units: the result


SUITE: tuple[Case, ...] = (
    Case("What time is it in Tokyo?", "get_current_time", "Asia/Tokyo"),
    Case("What's the time in Paris right now?", "get_current_time", "Europe/Paris"),
    Case("Can you tell me the time in New York?", "get_current_time", "America/New_York"),
    Case("What time is it in London?", "get_current_time", "Europe/London"),
    Case("Do you know what time it is in Sydney?", "get_current_time", "Australia/Sydney"),
    Case("What is seventeen times twenty three?", "calculate", 391),
    Case("What's 144 divided by 12?", "calculate", 12),
    Case("How much is 2 to the power of 10?", "calculate", 1024),
    Case("What is the square root of 81?", "calculate", 9),
    Case("Add 345 and 678.", "calculate", 1023),
    Case("What is 15 percent of 200?", "calculate", 30),
    Case("How many miles is 10 kilometers?", "convert_units", 6.2137),
    Case("Convert 100 degrees Fahrenheit to Celsius.", "convert_units", 37.778),
    Case("How many pounds is 5 kilograms?", "convert_units", 11.023),
    Case("What is 3 feet in centimeters?", "convert_units", 91.44),
    Case("How many liters are in 2 gallons?", "convert_units", 7.5708),
    Case("Hello, how are you today?", None),
    Case("Thank you, that was helpful.", None),
    Case("Tell me a fun fact about cats.", None),
    Case("What's your name?", None),
)


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        if isinstance(value, str) and "/" in value:
            num, _, den = value.partition("/")
            try:
                return float(num) / float(den)
            except (ValueError, ZeroDivisionError):
                return None
        return None


def judge(case: Case, calls: list[Any], spoken: str, registry: Any) -> tuple[bool, str]:
    """Whether the reply passes ``case`` and a short reason. ``calls``: the parser's calls and errors."""
    from rtc_agent.apps.agent import ParsedToolCall

    if case.tool is None:
        if calls:
            return False, f"called {getattr(calls[0], 'name', None)!r} for chit-chat"
        return (True, "answered") if spoken.strip() else (False, "said nothing")
    if len(calls) != 1 or not isinstance(calls[0], ParsedToolCall):
        return False, f"{len(calls)} calls" if calls and isinstance(calls[0], ParsedToolCall) else (
            f"no call (said {spoken.strip()[:60]!r})" if not calls else f"bad call: {calls[0].message}")
    call = calls[0]
    if call.name != case.tool:
        return False, f"called {call.name!r} {call.arguments_json}"
    tool = registry.check(call.call_id, call.name, call.arguments)
    if not hasattr(tool, "handler"):
        return False, f"invalid arguments {call.arguments_json}: {getattr(tool, 'error', tool)}"
    try:
        result = tool.handler(**call.arguments)
    except Exception as exc:  # a tool error: the call was wrong
        return False, f"{call.arguments_json} -> error {exc}"
    if case.tool == "get_current_time":
        ok = result.get("timezone") == case.expect
    else:
        got = _number(result.get("result"))
        ok = got is not None and abs(got - float(case.expect)) <= 0.01 * max(1.0, abs(float(case.expect)))
    return ok, f"{call.arguments_json} -> {result.get('timezone') or result.get('result')}"


def run_suite(engine: Any, *, instructions: str | None = None, max_tokens: int = 60,
              echo: bool = True) -> dict[str, Any]:
    """Run :data:`SUITE` through a loaded chat engine; the score, per-case results and decode figures."""
    from rtc_agent.apps.agent import ReplyParser, ToolRegistry, register_builtins
    from rtc_agent.apps.agent.config import DEFAULT_INSTRUCTIONS
    from rtc_agent.engines.llm.job import CancelToken
    from rtc_agent.engines.llm.messages import ChatRequest

    registry = register_builtins(ToolRegistry())
    system = instructions if instructions is not None else DEFAULT_INSTRUCTIONS
    results = []
    tokens = 0
    decode_s = 0.0
    for case in SUITE:
        request = ChatRequest(messages=[{"role": "system", "content": system}, {"role": "user", "content": case.text}],
                              tools=registry.specs(), max_tokens=max_tokens)
        parser = ReplyParser()
        start = time.monotonic()
        first = None
        for delta in engine.generate(request, CancelToken()):
            if first is None and (delta.text or delta.tool_calls):
                first = time.monotonic()
            parser.feed(delta)
            if delta.usage is not None:
                tokens += max(0, delta.usage.completion_tokens - 1)
        parser.finish()
        end = time.monotonic()
        decode_s += end - (first or end)
        ok, why = judge(case, parser.calls, parser.text, registry)
        row = {"text": case.text, "tool": case.tool, "ok": ok, "why": why, "spoken": parser.text.strip(),
               "first_token_s": round((first or end) - start, 3), "total_s": round(end - start, 3)}
        results.append(row)
        if echo:
            print(f"{'PASS' if ok else 'FAIL'}  {case.text:<45} {why}  [{row['total_s']:.2f} s]", flush=True)
    score = sum(r["ok"] for r in results)
    return {"score": score, "of": len(SUITE), "decode_tokens_per_s": round(tokens / decode_s, 1) if decode_s else None,
            "first_token_p50_s": sorted(r["first_token_s"] for r in results)[len(results) // 2],
            "results": results}


#: The typed questions of the guard run and the tool each must call (issue 22: "What time is it in Tokyo?" was
#: answered "The current time in Tokyo is 14:00." without a call).
GUARD_QUESTIONS = (("What time is it in Tokyo?", "get_current_time"), ("What is 17 times 23?", "calculate"))
#: The browser tools the /agent page declares (static/js/apps/agent.js): the model sees them too.
PAGE_TOOLS = (
    {"type": "function", "name": "show_banner", "description": "Show a short message in a banner at the top of "
     "the user's page.", "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                                        "required": ["text"]}},
    {"type": "function", "name": "get_local_time", "description": "The current date, time and time zone of the "
     "user's device.", "parameters": {"type": "object", "properties": {}}},
    {"type": "function", "name": "get_browser_info", "description": "The user's browser language, screen size and "
     "whether it is online.", "parameters": {"type": "object", "properties": {}}},
)


def _uses_result(answer: str, outputs: list[str]) -> bool:
    """The answer says a figure of a tool result: a calculation's result, or the hour and minutes of a time."""
    import re

    said = answer.replace(",", "")
    for output in outputs:
        try:
            result = json.loads(output)
        except ValueError:
            continue
        if not isinstance(result, dict):
            continue
        figures = [str(result.get("result", "")).strip()] if "result" in result else []
        for key in ("time", "time_24h"):
            clock = re.match(r"(\d+):(\d+)", str(result.get(key, "")))
            figures += [f"{int(clock.group(1))}:{clock.group(2)}"] if clock else []
        if any(f and f in said for f in figures):
            return True
    return False


async def run_guard(llm: Any, tries: int, *, echo: bool = True) -> dict[str, Any]:
    """Type each of :data:`GUARD_QUESTIONS` ``tries`` times, in turn, into one conversation (as on the /agent
    page, with its browser tools declared) and run each turn through the agent's real
    :class:`~rtc_agent.apps.agent.responder.Responder` (text replies, the guard on). ``llm``: an
    :class:`~rtc_agent.engines.llm.client.LLMClient`. A try passes when the expected tool ran and the answer
    names none of the figures it did not give."""
    from rtc_agent.apps.agent import PendingBrowserCalls, ToolRegistry, register_builtins
    from rtc_agent.apps.agent.config import DEFAULT_INSTRUCTIONS
    from rtc_agent.apps.agent.conversation import Conversation
    from rtc_agent.apps.agent.responder import Responder, ResponseOptions

    tools = register_builtins(ToolRegistry())
    tools.declare_browser_tools(list(PAGE_TOOLS))
    conversation = Conversation(DEFAULT_INSTRUCTIONS)
    rows = []
    for i in range(tries * len(GUARD_QUESTIONS)):
        question, tool = GUARD_QUESTIONS[i % len(GUARD_QUESTIONS)]
        conversation.add_user(question)
        events: list[Any] = []
        responder = Responder(llm=llm, synthesizer=None, speech=None, emit=events.append, tools=tools,
                              pending=PendingBrowserCalls(), history=conversation.messages(),
                              options=ResponseOptions(audio=False, max_tokens=60, max_tool_rounds=1,
                                                      tool_guard=True))
        start = time.monotonic()
        await responder.run()
        for item in responder.items:
            conversation.add(item)
        called = [e.name for e in events if e.type == "response.function_call_arguments.done"]
        answer = "".join(e.delta for e in events if e.type == "response.output_text.delta").strip()
        outputs = [e.item.get("output", "") for e in events if e.type == "conversation.item.created"]
        row = {"question": question, "tool": tool, "ok": tool in called, "called": called,
               "answer_uses_result": _uses_result(answer, outputs),
               "guard_retries": responder.guard_retries, "answer": answer,
               "seconds": round(time.monotonic() - start, 2)}
        rows.append(row)
        if echo:
            print(f"{'PASS' if row['ok'] else 'FAIL'}  {question:<28} called {called} retries "
                  f"{responder.guard_retries} -> {answer[:70]!r} [{row['seconds']} s]", flush=True)
    by_question = {q: {"tool": t, "called": sum(r["ok"] for r in rows if r["question"] == q),
                       "answer_uses_result": sum(r["answer_uses_result"] for r in rows if r["question"] == q),
                       "of": sum(r["question"] == q for r in rows),
                       "guard_retries": sum(bool(r["guard_retries"]) for r in rows if r["question"] == q)}
                   for q, t in GUARD_QUESTIONS}
    return {"tries": tries, "questions": by_question, "called": sum(r["ok"] for r in rows), "of": len(rows),
            "results": rows}


async def _guard_main(args: argparse.Namespace, model: str) -> dict[str, Any]:
    from rtc_agent.config import Settings
    from rtc_agent.engines.llm.client import LLMClient
    from rtc_agent.engines.llm.smollm import SmolLMEngine
    from rtc_agent.worker import EngineSpec, Worker

    worker = Worker()
    worker.add(EngineSpec(name="llm", factory=lambda: SmolLMEngine(
        model, cache_dir=Settings().cache_dir, precision=args.precision, threads=args.threads), concurrency=1))
    try:
        engine = await worker.load("llm")
        report = await run_guard(LLMClient(worker, "llm"), args.guard)
        return {"model": getattr(engine, "model_name", model), "load": getattr(engine, "load_info", {}), **report}
    finally:
        await worker.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="", help="packaged model name or GGUF/folder (empty: the default)")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", default="", help="write the results as JSON here")
    parser.add_argument("--guard", type=int, default=0, metavar="N",
                        help="run the tool guard: N typed tries of each guard question (see the module docstring)")
    args = parser.parse_args(argv)
    from rtc_agent.bench.common import machine
    from rtc_agent.config import Settings
    from rtc_agent.engines.llm.packaged import DEFAULT_MODEL
    from rtc_agent.engines.llm.smollm import SmolLMEngine

    if args.guard > 0:
        import asyncio

        from rtc_agent.bench.common import write_json

        report = {"machine": machine(), **asyncio.run(_guard_main(args, args.model or DEFAULT_MODEL))}
        print(f"{report['model']}: the tool called in {report['called']}/{report['of']} typed tries")
        write_json(report, args.out or "docs/benchmarks/agent-tool-guard.json")
        return 0
    engine = SmolLMEngine(args.model or DEFAULT_MODEL, cache_dir=Settings().cache_dir, precision=args.precision,
                          threads=args.threads)
    engine.load(lambda message: print(message, file=sys.stderr))
    report = run_suite(engine)
    report = {"model": engine.model_name, "load": engine.load_info, "machine": machine(), **report}
    print(f"{engine.model_name}: {report['score']}/{report['of']} right; decode "
          f"{report['decode_tokens_per_s']} tokens/s; first token p50 {report['first_token_p50_s']} s")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(report, fh, indent=2)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
