"""``rtc-agent bench call --participants N``: a call room measured at real aiortc peers.

N peers join one room of the ``call`` app on a real server process (every engine loaded), each streaming real
speech in real time (espeak-ng: peer 1 speaks Spanish, the others English, staggered so that they take turns as
people do, with some overlap). Every peer listens in English, so the Spanish speaker is interpreted for the
others (one pipeline shared by all of them). Measured at the listeners, on the clock of the audio as sent:

- caption latency: from the end of the speech a ``caption.final`` covers (its ``audio_end_ms`` on the speaker's
  session clock, which starts with the speaker's first audio frame) to its arrival at each other participant;
- interpretation lag: from the end of the chunk a ``translation.chunk`` EMIT translates to its arrival at a
  listener, and from the start of the Spanish speech to the first interpreted speech played on a listener's track;
- server CPU: user + system seconds of the server process during the call, per participant and per second;
- real time: a room size stays real time when the p95 caption latency is within ``--max-latency-ms`` and the
  server's CPU stays under the machine's cores. With ``--sweep`` (default) rooms of 2..N are measured and the
  largest that stays real time is reported.

Media between participants goes browser to browser in real calls; these peers send only their microphone to the
server, as the /call page does, so the figures are the server's share of a call.

Other measurements of a call are flags that hand the run to their own module (:data:`MODES`): ``--languages
en-es|es-en-de`` (:mod:`rtc_agent.bench.call_languages`: interpretation into every listener's language), ``--sfu``
(:mod:`rtc_agent.bench.call_sfu`: an interpreted webinar of N listeners through Janus).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import time
from typing import Any

import numpy as np

from rtc_agent.bench.audio import load_audio_48k
from rtc_agent.bench.common import local_server, machine, percentile_ms, write_json
from rtc_agent.bench.interpret import espeak_clip
from rtc_agent.rtc.client import ClientPeer
from rtc_agent.rtc.sources import PcmSourceTrack

SPANISH = ["El gobierno anunció ayer un nuevo plan para mejorar las escuelas públicas del país.",
           "Mi hermana trabaja en un hospital grande cerca del río."]
ENGLISH = [["Please remember to bring your umbrella tomorrow morning.", "The meeting starts at nine."],
           ["The library opens at nine on Saturday.", "We should order more paper for the printer."],
           ["My brother bought a new bicycle last week.", "It is red and very fast."],
           ["The train to the airport leaves every twenty minutes.", "Buy your ticket before you board."],
           ["Our team finished the report on Friday.", "Everyone worked hard on it."]]
TURN_S = 4.0  # each next speaker starts this much later
SETTLE_S = 6.0
TARGETS = {"caption_p95_ms": 3000}


def clips(n: int) -> list[tuple[np.ndarray, str]]:
    """(48 kHz int16 speech, language) per participant; participant i starts speaking after i * TURN_S."""
    out = []
    for i in range(n):
        lead = 1.5 + i * TURN_S
        if i == 0:
            pcm16, language = espeak_clip(SPANISH, "es", lead_s=lead), "es"
        else:
            pcm16, language = espeak_clip(ENGLISH[(i - 1) % len(ENGLISH)], "en", lead_s=lead), "en"
        out.append((load_audio_48k(pcm16), language))
    return out


async def run_room(base_url: str, n: int, server: Any) -> dict[str, Any]:
    room = f"bench-{n}-{int(time.time())}"
    media = clips(n)
    peers = [ClientPeer(base_url, "call", config={"room": room, "name": f"P{i}", "language": language,
                                                  "listen_language": "en", "interpret": True},
                        audio=PcmSourceTrack(pcm, 48000, tail="silence"), receive_audio=True)
             for i, (pcm, language) in enumerate(media)]
    try:
        for peer in peers:
            await peer.connect()
        cpu0, wall0 = server.cpu_seconds(), time.monotonic()
        await asyncio.sleep(max(len(pcm) for pcm, _ in media) / 48000 + SETTLE_S)
        cpu = server.cpu_seconds() - cpu0
        wall = time.monotonic() - wall0
    finally:
        for peer in peers:
            await peer.close()
    started = {peer.session_id: peer.audio.pacer.started_at for peer in peers}
    spanish = peers[0].session_id
    caption_s: list[float] = []
    interpret_s: list[float] = []
    first_speech_s: list[float] = []
    finals = 0
    for listener in peers:
        for event, at in zip(listener.events, listener.event_times, strict=True):
            speaker = (event.get("speaker") or {}).get("participant_id")
            t0 = started.get(speaker)
            if speaker == listener.session_id or t0 is None:
                continue
            if event["type"] == "caption.final" and event.get("text", "").strip():
                finals += 1
                caption_s.append(at - (t0 + event["audio_end_ms"] / 1000))
            elif event["type"] == "translation.chunk" and event.get("action") == "EMIT":
                interpret_s.append(at - (t0 + event["audio_end_ms"] / 1000))
        if listener.session_id != spanish:
            spoken = [at for e, at in zip(listener.events, listener.event_times, strict=True)
                      if e["type"] == "output_audio_buffer.started"]
            if spoken and started[spanish] is not None:
                first_speech_s.append(spoken[0] - (started[spanish] + 1.5))
    cores = os.cpu_count() or 1
    p95 = percentile_ms(caption_s, 95)
    return {
        "participants": n,
        "caption_finals_received": finals,
        "caption_latency_ms": {"p50": percentile_ms(caption_s, 50), "p95": p95, "max": percentile_ms(caption_s, 100)},
        "interpretation_lag_ms": {"p50": percentile_ms(interpret_s, 50), "p95": percentile_ms(interpret_s, 95),
                                  "emits": len(interpret_s)},
        "first_interpreted_speech_ms": {"p50": percentile_ms(first_speech_s, 50),
                                        "max": percentile_ms(first_speech_s, 100)},
        "server_cpu_s": round(cpu, 2),
        "server_cpu_per_participant": round(cpu / wall / n, 3),
        "server_cpu_cores_used": round(cpu / wall, 2),
        "real_time": bool(p95 is not None and p95 <= TARGETS["caption_p95_ms"] and cpu / wall < cores),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = list(range(2, args.participants + 1)) if args.sweep else [args.participants]
    rooms = []
    load_before = os.getloadavg()[0]  # other work on the machine skews every figure: say how busy it was
    async with local_server(max_room_participants=max(sizes)) as server:
        for n in sizes:
            print(f"room of {n} ...", flush=True)
            rooms.append(await run_room(server.base_url, n, server))
            print(rooms[-1], flush=True)
    real_time = [r["participants"] for r in rooms if r["real_time"]]
    return {"benchmark": "call", "rooms": rooms, "largest_real_time_room": max(real_time) if real_time else None,
            "targets": TARGETS, "load_1min_before": round(load_before, 2), "machine": machine()}


#: flag -> the module that runs ``bench call`` when the flag is given (its ``add_arguments`` adds the flag and its
#: options to this parser; its ``main(args)`` runs instead of the room sweep)
MODES = {"sfu": "rtc_agent.bench.call_sfu", "languages": "rtc_agent.bench.call_languages"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for module in MODES.values():
        importlib.import_module(module).add_arguments(parser)
    parser.add_argument("--participants", type=int, default=4, help="participants in the (largest) room (2-6)")
    parser.add_argument("--no-sweep", dest="sweep", action="store_false",
                        help="measure only the room of --participants (default: every size from 2)")
    parser.add_argument("--out", default="docs/benchmarks/call.json", help="write the JSON results here")


def main(args: argparse.Namespace) -> dict[str, Any]:
    for flag, module in MODES.items():
        if getattr(args, flag, None):
            return importlib.import_module(module).main(args)
    if not 2 <= args.participants <= 16:
        raise SystemExit("--participants must be 2-16")
    return write_json(asyncio.run(run(args)), args.out)
